-- log_lines: one row per line of an imported (or followed) controller log, verbatim, with the
-- file and line number it came from and the line grammar that matched it ('unknown' for a line
-- no grammar knows). What the spans and events of an imported run were derived from.
CREATE OR REPLACE VIEW log_lines AS
SELECT
    run_id,
    ts_ns,
    attributes->>'log.file.name' AS file,
    TRY_CAST(attributes->>'rolloutscope.import.line' AS INTEGER) AS line,
    attributes->>'rolloutscope.import.line_kind' AS kind,
    severity,
    body
FROM logs
WHERE attributes->>'rolloutscope.import.line_kind' IS NOT NULL
