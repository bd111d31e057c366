-- http_requests: one row per outbound HTTP request a traced process made (a CLIENT span with a
-- URL), in any SDK's conventions: url.full / http.request.method / http.response.status_code,
-- or the older http.url / http.method / http.status_code (the spans' url and http_status
-- columns copy the URL and the status, the newer first: fit.COPIED). Released Gym writes one
-- such span per try of every call between its servers and to model backends
-- (nemo_gym.server_utils.request; a call its model client retries is several tries under one
-- parent span).
-- target is scheme://host:port; internal is true when a traced SERVER of the same run answers
-- at that address (a hop inside the deployment, seen again on the server side); model_endpoint
-- when the path is an OpenAI-style generation route (/v1/chat/completions, /v1/completions,
-- /v1/responses, /v1/messages; Gym's rollout-prefixed /ng-rollout/<key>/v1/... included);
-- probe when it is a GET of a liveness route (/health*, /ping, /ready, /live, /v1/models).
-- capture_key is the Gym rollout the request belongs to: nemo.gym.rollout.id, else the key in
-- an /ng-rollout/<key>/ path (Gym stamps the attribute only where its ContextVar is set).
-- http_requests_of(run, floor_ns): the rows of run (NULL: every run) that start at or after
-- floor_ns (NULL: all), computed from there on; internal then says whether a server of the run
-- was traced at that address from ten minutes before the floor (a traced server answers
-- requests all the time), so a floored read scans no span older than that.
CREATE OR REPLACE MACRO http_requests_of(run, floor_ns) AS TABLE
WITH client AS (
    SELECT
        run_id, trace_id, span_id, parent_span_id, name, service, start_ns, end_ns,
        status_code, status_message, rollout_id, is_open,
        resource->>'nemo.gym.server.name' AS server_name,
        resource->>'nemo.gym.server.type' AS server_type,
        url,
        upper(coalesce(attributes->>'http.request.method', attributes->>'http.method',
                       CASE WHEN name LIKE 'HTTP %' THEN split_part(name, ' ', 2) END)) AS method,
        http_status,
        attributes->>'error.type' AS error_type,
        TRY_CAST(attributes->>'gen_ai.usage.input_tokens' AS BIGINT) AS input_tokens,
        TRY_CAST(attributes->>'gen_ai.usage.output_tokens' AS BIGINT) AS output_tokens,
        coalesce(attributes->>'gen_ai.request.model', attributes->>'gen_ai.response.model')
            AS model
    FROM all_spans
    WHERE kind = 'CLIENT'
      AND (run IS NULL OR run_id = run) AND (floor_ns IS NULL OR start_ns >= floor_ns)
),
parsed AS (
    SELECT *,
           regexp_extract(url, '^([A-Za-z][A-Za-z0-9+.-]*://[^/?#]+)', 1) AS target,
           regexp_extract(url, '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]+([^?#]*)', 1) AS path
    FROM client
    WHERE url IS NOT NULL
),
-- where each traced server of a run listens, as its SERVER spans record it: http.host, else
-- server.address:server.port (the spans' server_authority)
served AS (
    SELECT DISTINCT run_id, server_authority AS authority
    FROM all_spans
    WHERE kind = 'SERVER' AND server_authority IS NOT NULL
      AND (run IS NULL OR run_id = run)
      AND (floor_ns IS NULL OR start_ns >= floor_ns - 600000000000)
)
SELECT
    p.run_id,
    p.trace_id,
    p.span_id,
    p.parent_span_id,
    p.service,
    p.server_name,
    p.server_type,
    coalesce(p.rollout_id,
             nullif(regexp_extract(p.path, '/ng-rollout/([^/]+)/', 1), '')) AS capture_key,
    p.method,
    p.url,
    nullif(p.target, '') AS target,
    p.path,
    p.http_status,
    p.start_ns,
    p.end_ns,
    (p.end_ns - p.start_ns) / 1e9 AS duration_s,
    CASE WHEN p.end_ns IS NULL THEN 'open'
         WHEN p.status_code = 'ERROR' OR p.http_status >= 400 OR p.error_type IS NOT NULL
             THEN 'error'
         ELSE 'ok' END AS outcome,
    coalesce(p.status_message, p.error_type) AS error,
    s.authority IS NOT NULL AS internal,
    regexp_matches(p.path, '/(chat/completions|completions|responses|messages)/?$')
        AS model_endpoint,
    (p.method = 'GET'
     AND regexp_matches(p.path, '/(health[a-z_/]*|healthz|ping|ready|readyz|live|livez|v1/models)/?$'))
        AS probe,
    p.input_tokens,
    p.output_tokens,
    p.model,
    p.is_open
FROM parsed p
LEFT JOIN served s
    ON s.run_id = p.run_id
   AND s.authority = regexp_extract(p.target, '://(.*)$', 1);

CREATE OR REPLACE VIEW http_requests AS
SELECT * FROM http_requests_of(NULL, NULL)
