-- all_spans: every span, finished or still open.
-- An interval that has started but not ended (a parked rollout, a shard's current state, a live
-- deadline) is known only by its start marker in open_spans: it appears here with end_ns NULL
-- and is_open true. Model views read all_spans, so live dashboards see open intervals.
CREATE OR REPLACE VIEW all_spans AS
SELECT *, false AS is_open FROM spans
UNION ALL
SELECT *, true AS is_open FROM open_spans
