-- shard_engines: each stay of a generation shard in one fleet-health state (shard_states) with
-- the address of the engine behind it, as engine_state names engines: the host:port of the
-- shard's backend_url (nemo.rl.gen.backend.url), lower-cased, with the scheme's port where the
-- URL names none. This is what joins what fleet health says of a shard to what its engine says
-- of itself (serve --scrape http://HOST:PORT/metrics for a shard served at http://HOST:PORT/v1).
-- Shards without a backend_url have no row.
CREATE OR REPLACE VIEW shard_engines AS
SELECT
    run_id,
    shard_idx,
    state,
    start_ns,
    end_ns,
    span_id,
    backend_url,
    lower(CASE WHEN regexp_matches(authority, ':[0-9]+$') THEN authority
               WHEN backend_url ILIKE 'https:%' THEN authority || ':443'
               ELSE authority || ':80' END) AS address
FROM (SELECT *, regexp_extract(backend_url, '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]+)',
                               1) AS authority
      FROM shard_states
      WHERE backend_url IS NOT NULL)
