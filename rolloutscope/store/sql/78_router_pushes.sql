-- router_pushes: one row per membership push of the fleet monitor to the router (event
-- rl.router.membership_push, every probe tick): the serving set the router was told, and its
-- size. The push is unconditional, so consecutive rows often repeat the same set.
CREATE OR REPLACE VIEW router_pushes AS
SELECT
    run_id,
    ts_ns,
    TRY_CAST(attributes->>'nemo.rl.router.serving_backends.count' AS INTEGER) AS serving,
    attributes->'nemo.rl.router.serving_backends' AS serving_backends,
    span_id
FROM all_events
WHERE name = 'rl.router.membership_push'
