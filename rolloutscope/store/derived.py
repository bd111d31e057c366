"""Model rows maintained as spans arrive: each closed span is derived once, not by every reader.

The views in ``sql/`` stay the contract and the reference. Most model rows are each one span's
(and its own events'): a deadline, a parked stay, a shard's stay in one state, a checkpoint
participant's operation, an RL try (``rl_attempts``). Spans are immutable once committed and a
file's tables are append-only, so such a row, once its span has ended and been committed, never
changes. This module keeps those rows in tables (``d_<view>``) and fills them in *passes*: a pass derives the
rows of the spans committed since the last one, found by row id, and advances the watermark in
the same transaction as the rows it adds (a crash, ``kill -9`` included, leaves both as they
were, and the next pass derives the same spans again).

Three schemas hold the same view definitions over other inputs (a view in a schema reads that
schema's tables first, the store's main schema after):

- ``rs_new``: the spans (and events) between the watermark and the pass's upper bound, and no
  open markers: what a pass derives.
- ``rs_tail``: the spans not derived yet and every open marker: a reader's live rows.
- ``rs_read``: each maintained view as ``d_<view>`` ∪ ``rs_tail.<view>``, which equals the view
  computed from scratch at every moment, and every other view (the incident views among them) on
  top of those. A reader that asks for the maintained form reads ``rs_read``: the incident views
  then join typed rows instead of parsing every span's attributes again.

Which views are maintained is ``MAINTAINED``: those whose every row is one span's. Two more
merge pass by pass into keyed tables (``INSERT ... ON CONFLICT DO UPDATE``): ``completions`` per
execution and ``span_catalog`` per (run, service, name, kind), its median read from a duration
histogram at ``DURATION_DIGITS`` significant digits (within 0.5%). A test holds
``rs_read`` to the views computed from scratch on every built-in scenario, the Gym capture and a
synthetic run (tests/store/test_derived.py).

Late and out-of-order spans need no bound: a row is derived when its span is committed, whatever
its timestamps, since the watermark is the row id (commit order), not time.

A lake has no stable row ids and several writers; it reads the views as before (``available``).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from typing import TYPE_CHECKING

import duckdb

from rolloutscope.store import schema as _schema
from rolloutscope.store import views as _views

if TYPE_CHECKING:  # pyarrow is imported by a writer's pass only: readers and the CLI skip it
    import pyarrow as pa

log = logging.getLogger(__name__)

# views whose every row is one span's and its own events' (checked by tests/store/test_derived.py
# against the from-scratch views on every built-in scenario)
MAINTAINED: tuple[str, ...] = (
    "checkpoint_ops",
    "checkpoint_spans",
    "checkpoint_window_spans",
    "shard_states",
    "parked_intervals",
    "deadlines",
    "rl_attempts",
    "train_step_spans",
)

SCHEMAS = ("rs_new", "rs_tail", "rs_steps", "rs_read")
# A writer derives once this many rows wait, or this long after a commit. A pass costs about
# 50 ms of CPU however few spans it covers, and about 0.3 us per span on top (1.25 us a span at
# 50,000, 0.45 at 200,000, measured on a 1M-span synthetic run): passes of 50,000 keep the
# collector's added CPU near 1 us a span under load, and the next commit waits about 0.15 s
# for one. A reader is exact at any moment (rs_tail reads the spans not derived yet), so a
# pass can wait.
PASS_EVERY_S = 10.0
PASS_AFTER_SPANS = 50_000
# summaries maintained beside the rows, by adding each pass's counts: spans by run, name and
# minute (``info``'s counts and time range, and any whole-run picture by time), and by run and
# resource (the processes: ``services`` reads them)
BUCKET_NS = 60 * 10**9
_SUMMARY_DDL = (
    """CREATE TABLE IF NOT EXISTS d_span_buckets (
        run_id VARCHAR NOT NULL, name VARCHAR NOT NULL, bucket_ns BIGINT NOT NULL,
        spans BIGINT, run_id_on_span BIGINT, first_ns BIGINT, last_ns BIGINT,
        PRIMARY KEY (run_id, name, bucket_ns))""",
    """CREATE TABLE IF NOT EXISTS d_resources (
        run_id VARCHAR NOT NULL, resource VARCHAR NOT NULL,
        spans BIGINT, first_ns BIGINT, last_ns BIGINT, PRIMARY KEY (run_id, resource))""",
)
# NULL keys are kept as '' (a key column cannot hold NULL); the readers turn them back
_SUMMARY_PASS = (
    f"""INSERT INTO main.d_span_buckets
        SELECT coalesce(run_id, ''), coalesce(name, ''), start_ns // {BUCKET_NS} * {BUCKET_NS},
               count(*), count(*) FILTER (attributes LIKE '%"nemo.run.id"%'),
               min(start_ns), max(coalesce(end_ns, start_ns))
        FROM rs_new.spans GROUP BY ALL
        ON CONFLICT DO UPDATE SET spans = spans + excluded.spans,
            run_id_on_span = run_id_on_span + excluded.run_id_on_span,
            first_ns = least(first_ns, excluded.first_ns),
            last_ns = greatest(last_ns, excluded.last_ns)""",
    """INSERT INTO main.d_resources
        SELECT coalesce(run_id, ''), coalesce(resource, ''), count(*), min(start_ns),
               max(coalesce(end_ns, start_ns))
        FROM rs_new.spans GROUP BY ALL
        ON CONFLICT DO UPDATE SET spans = spans + excluded.spans,
            first_ns = least(first_ns, excluded.first_ns),
            last_ns = greatest(last_ns, excluded.last_ns)""",
)
# ``services`` over the maintained resources: its first step, spans grouped by run and
# resource, becomes the stored sums plus the spans not derived yet and the open markers
_SERVICES_FROM = """    SELECT run_id, resource, count(*) AS spans, min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns
    FROM all_spans
    GROUP BY run_id, resource
)"""
_SERVICES_MAINTAINED = """    SELECT run_id, resource, sum(spans) AS spans, min(first_ns) AS first_ns,
           max(last_ns) AS last_ns
    FROM (SELECT nullif(run_id, '') AS run_id, nullif(resource, '') AS resource, spans,
                 first_ns, last_ns FROM main.d_resources
          UNION ALL
          SELECT run_id, resource, count(*), min(start_ns), max(coalesce(end_ns, start_ns))
          FROM rs_tail.all_spans GROUP BY ALL) s
    GROUP BY run_id, resource
)"""

# What happened in each second of a run, summed as rows are derived (``d_run_seconds``): each
# row of a maintained view adds ``value`` to ``measure`` in the second its ``instant`` falls
# in. A whole-run picture (per train step, per time bucket) reads these sums, a few rows per
# second of the run, instead of the rows. Gauges are running sums of two of them: tries in
# flight = tries_started - tries_ended, rollouts parked = parked_started - parked_ended,
# serving shards = serving_entered - serving_left. (measure, view, instant, value, filter)
SECOND_NS = 10**9
MEASURES: tuple[tuple[str, str, str, str, str], ...] = (
    ("tries_started", "rl_attempts", "start_ns", "1", "true"),
    ("tries_ended", "rl_attempts", "end_ns", "1", "true"),
    ("committed", "rl_attempts", "end_ns", "1", "outcome = 'committed'"),
    ("failed_tries", "rl_attempts", "end_ns", "1", "outcome IN ('failed', 'cancelled')"),
    ("redispatches", "rl_attempts", "start_ns", "1", "attempt > 0"),
    ("timeouts", "deadlines", "fired_ns", "1", "outcome = 'fired'"),
    ("parked_started", "parked_intervals", "start_ns", "1", "true"),
    ("parked_ended", "parked_intervals", "end_ns", "1", "true"),
    ("parked_s", "parked_intervals", "end_ns", "duration_s", "true"),
    ("serving_entered", "shard_states", "start_ns", "1", "serving"),
    ("serving_left", "shard_states", "end_ns", "1", "serving"),
    ("quarantines", "shard_states", "start_ns", "1", "state = 'quarantined'"),
    ("checkpoint_ops", "checkpoint_ops", "start_ns", "1", "true"),
    ("checkpoint_ops_failed", "checkpoint_ops", "end_ns", "1", "outcome = 'error'"),
    ("train_steps_ended", "train_step_spans", "end_ns", "1", "true"),
)
_SECONDS_DDL = """CREATE TABLE IF NOT EXISTS d_run_seconds (
    run_id VARCHAR NOT NULL, sec_ns BIGINT NOT NULL, measure VARCHAR NOT NULL, value DOUBLE,
    PRIMARY KEY (run_id, sec_ns, measure))"""


def measures_sql(schema: str | None = None, where: str = "true", *,
                 prefix: str | None = None) -> str:
    """(run_id, sec_ns, measure, value) of the rows of ``schema``'s views (None: the main
    schema's, computed from scratch; ``prefix``: the relations ``<prefix><view>`` instead),
    each instant's second one row per measure; ``where`` filters every branch (it may name
    run_id and sec_ns)."""
    if prefix is None:
        prefix = f"{schema}." if schema else ""
    branches = []
    for measure, view, instant, value, keep in MEASURES:
        branches.append(
            f"SELECT run_id, {instant} // {SECOND_NS} * {SECOND_NS} AS sec_ns, "
            f"'{measure}' AS measure, ({value})::DOUBLE AS value "
            f"FROM {prefix}{view} WHERE {instant} IS NOT NULL AND ({keep})")
    body = "\n    UNION ALL ".join(branches)
    return (f"SELECT run_id, sec_ns, measure, sum(value) AS value FROM (\n    {body}) m "
            f"WHERE {where} GROUP BY ALL")


# a pass adds the sums of the rows it derived (``_PASS_ROWS``), held where its spans were copied
# (``_pass_input``), else the views over its spans computed again
_PASS_ROWS = "temp.main.rs_pass_"
_SECONDS_PASS = f"""INSERT INTO main.d_run_seconds
    SELECT coalesce(run_id, ''), sec_ns, measure, value FROM ({measures_sql(prefix=_PASS_ROWS)})
    ON CONFLICT DO UPDATE SET value = value + excluded.value"""

# -- rows that merge: completions and the span catalog ------------------------------------------
# A key column cannot hold NULL: a key part that is NULL is kept as '' (or 0) and its bit set in
# ``nulls``, so a NULL part and a real '' stay apart and the readers turn them back exactly.
def _key(parts: tuple[tuple[str, str], ...]) -> str:
    """The stored key columns of (column, sentinel) ``parts``, then ``nulls``."""
    cols = [f"coalesce({col}, {blank}) AS {col}_k" for col, blank in parts]
    bits = " + ".join(f"{1 << i} * ({col} IS NULL)::INTEGER" for i, (col, _) in enumerate(parts))
    return ", ".join(cols) + f", ({bits}) AS nulls"


def _unkey(parts: tuple[tuple[str, str], ...], prefix: str = "") -> str:
    """The key columns as they were, from their stored form."""
    return ", ".join(f"CASE WHEN ({prefix}nulls & {1 << i}) <> 0 THEN NULL ELSE {prefix}{col}_k "
                     f"END AS {col}" for i, (col, _) in enumerate(parts))


def _key_names(parts: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{col}_k" for col, _ in parts) + ", nulls"


# completions (sql/70_completions.sql): per execution, the earliest completed and acknowledged
# events' times and the completed event's prompt, result and span. Kept per execution in
# ``d_completions`` as each pass's events merge in, executions with only an ACK so far included
# (the view's rows need a completion). result_id and span_id are arg_min by the completed
# event's time, as in the view: each is kept with the time of the event it came from
# (``result_ns``, ``span_ns``: of the earliest event where it is not NULL, as arg_min skips
# NULLs); a later pass's value replaces it only at a strictly earlier time, so on a tie the
# first committed stays (the view's arg_min picks among tied events in no set order). prompt_idx
# is the view's any_value: the first not NULL, the first committed here.
_EXEC = (("run_id", "''"), ("rollout_id", "''"), ("attempt", "0"))
_EXEC_KEY = _key_names(_EXEC)
_COMPLETED = "name = 'gym.agent.completed'"
_RESULT = "(attributes->>'nemo.gym.agent.result_id')"
_COMPLETIONS_DDL = f"""CREATE TABLE IF NOT EXISTS d_completions (
    run_id_k VARCHAR NOT NULL, rollout_id_k VARCHAR NOT NULL, attempt_k INTEGER NOT NULL,
    nulls INTEGER NOT NULL, prompt_idx BIGINT, completed_ns BIGINT, ack_ns BIGINT,
    result_id VARCHAR, result_ns BIGINT, span_id VARCHAR, span_ns BIGINT,
    PRIMARY KEY ({_EXEC_KEY}))"""


def _completion_parts(schema: str) -> str:
    """Per execution, the completion columns of ``schema``'s events (``d_completions``'s)."""
    return f"""SELECT {_key(_EXEC)},
           any_value(prompt_idx) FILTER (WHERE {_COMPLETED}) AS prompt_idx,
           min(ts_ns) FILTER (WHERE {_COMPLETED}) AS completed_ns,
           min(ts_ns) FILTER (WHERE name = 'gym.agent.acknowledged') AS ack_ns,
           arg_min({_RESULT}, ts_ns) FILTER (WHERE {_COMPLETED}) AS result_id,
           min(ts_ns) FILTER (WHERE {_COMPLETED} AND {_RESULT} IS NOT NULL) AS result_ns,
           arg_min(span_id, ts_ns) FILTER (WHERE {_COMPLETED}) AS span_id,
           min(ts_ns) FILTER (WHERE {_COMPLETED} AND span_id IS NOT NULL) AS span_ns
    FROM {schema}.span_events
    WHERE name IN ('gym.agent.completed', 'gym.agent.acknowledged')
    GROUP BY ALL"""


_COMPLETIONS_PASS = f"""INSERT INTO main.d_completions {_completion_parts("rs_new")}
    ON CONFLICT DO UPDATE SET
        prompt_idx = coalesce(prompt_idx, excluded.prompt_idx),
        completed_ns = least(completed_ns, excluded.completed_ns),
        ack_ns = least(ack_ns, excluded.ack_ns),
        result_id = CASE WHEN result_ns IS NULL OR excluded.result_ns < result_ns
                         THEN excluded.result_id ELSE result_id END,
        result_ns = least(result_ns, excluded.result_ns),
        span_id = CASE WHEN span_ns IS NULL OR excluded.span_ns < span_ns
                       THEN excluded.span_id ELSE span_id END,
        span_ns = least(span_ns, excluded.span_ns)"""
# rs_read.completions: the kept executions the events not derived yet do not touch, as kept,
# and those they touch merged with them (the same rules: on a tie the kept value). A reader of a
# window's rows filters the kept table's own columns, which reach its scan, e.g. rows overlapping
# [lo, hi): WHERE completed_ns < hi AND (ack_ns IS NULL OR ack_ns >= lo) (docs/run-store.md).
_COMPLETION_COLUMNS = (f"{_unkey(_EXEC)}, prompt_idx, completed_ns, ack_ns, result_id, "
                       "span_id")
# (tail NOT MATERIALIZED: materialized, DuckDB built the anti join's hash table on the kept
# rows instead of the few executions of the tail, 35 ms instead of 9 for 189k kept rows)
_COMPLETIONS_MAINTAINED = f"""CREATE OR REPLACE VIEW rs_read.completions AS
WITH tail AS NOT MATERIALIZED ({_completion_parts("rs_tail")}),
merged AS (
    SELECT {_EXEC_KEY},
           arg_min(prompt_idx, src) AS prompt_idx,
           min(completed_ns) AS completed_ns,
           min(ack_ns) AS ack_ns,
           arg_min(result_id, (result_ns, src)) AS result_id,
           arg_min(span_id, (span_ns, src)) AS span_id
    FROM (SELECT k.*, 0 AS src FROM main.d_completions k SEMI JOIN tail USING ({_EXEC_KEY})
          UNION ALL
          SELECT *, 1 AS src FROM tail) b
    GROUP BY ALL
)
SELECT {_COMPLETION_COLUMNS}
FROM main.d_completions k ANTI JOIN tail USING ({_EXEC_KEY})
WHERE completed_ns IS NOT NULL
UNION ALL
SELECT {_COMPLETION_COLUMNS}
FROM merged
WHERE completed_ns IS NOT NULL"""

# span_catalog (sql/03_span_catalog.sql): per (run, service, name, kind) the counts, time range
# and longest duration add up pass by pass (``d_span_catalog``); the median does not, so each
# key's durations are kept as a histogram (``d_span_durations``) at DURATION_DIGITS significant
# digits (whole nanoseconds below 10^DURATION_DIGITS ns), and the median is read from it and
# the durations not derived yet: within 0.5% of the view's (half a unit in the third digit),
# the mean of the two middle values for an even count as DuckDB's median. Every other column is
# exact, and ``open`` counts the open markers (all in rs_tail).
DURATION_DIGITS = 3
_CATALOG = (("run_id", "''"), ("service", "''"), ("name", "''"), ("kind", "''"))
_CATALOG_KEY = _key_names(_CATALOG)
_CATALOG_DDL = (
    f"""CREATE TABLE IF NOT EXISTS d_span_catalog (
        run_id_k VARCHAR NOT NULL, service_k VARCHAR NOT NULL, name_k VARCHAR NOT NULL,
        kind_k VARCHAR NOT NULL, nulls INTEGER NOT NULL, spans BIGINT, errors BIGINT,
        open BIGINT, first_ns BIGINT, last_ns BIGINT, max_s DOUBLE,
        PRIMARY KEY ({_CATALOG_KEY}))""",
    f"""CREATE TABLE IF NOT EXISTS d_span_durations (
        run_id_k VARCHAR NOT NULL, service_k VARCHAR NOT NULL, name_k VARCHAR NOT NULL,
        kind_k VARCHAR NOT NULL, nulls INTEGER NOT NULL, duration_ns BIGINT NOT NULL,
        n BIGINT, PRIMARY KEY ({_CATALOG_KEY}, duration_ns))""",
)


def _catalog_parts(schema: str) -> str:
    return f"""SELECT {_key(_CATALOG)},
           count(*) AS spans,
           count(*) FILTER (WHERE status_code = 'ERROR') AS errors,
           count(*) FILTER (WHERE is_open) AS open,
           min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns,
           max((end_ns - start_ns) / 1e9) AS max_s
    FROM {schema}.all_spans
    GROUP BY ALL"""


def _duration_parts(schema: str) -> str:
    """Per key, the durations of ``schema``'s spans rounded, and how many of each."""
    small = 10 ** DURATION_DIGITS
    return f"""SELECT {_CATALOG_KEY},
           CASE WHEN abs(d) < {small} THEN d
                ELSE sign(d) * ((abs(d) + unit // 2) // unit) * unit END AS duration_ns,
           count(*) AS n
    FROM (SELECT *, CAST(10 ** (floor(log10(greatest(abs(d), {small})))
                                - {DURATION_DIGITS - 1}) AS BIGINT) AS unit
          FROM (SELECT {_key(_CATALOG)}, end_ns - start_ns AS d
                FROM {schema}.all_spans
                WHERE end_ns IS NOT NULL AND start_ns IS NOT NULL) s) s
    GROUP BY ALL"""


_CATALOG_PASS = (
    f"""INSERT INTO main.d_span_catalog {_catalog_parts("rs_new")}
        ON CONFLICT DO UPDATE SET spans = spans + excluded.spans,
            errors = errors + excluded.errors, open = open + excluded.open,
            first_ns = least(first_ns, excluded.first_ns),
            last_ns = greatest(last_ns, excluded.last_ns),
            max_s = greatest(max_s, excluded.max_s)""",
    f"""INSERT INTO main.d_span_durations {_duration_parts("rs_new")}
        ON CONFLICT DO UPDATE SET n = n + excluded.n""",
)
# span_catalog's first step, spans grouped by key, becomes the kept sums and histogram plus the
# spans not derived yet and the open markers
_SPAN_CATALOG_FROM = """    SELECT run_id, service, name, kind,
           count(*) AS spans,
           count(*) FILTER (WHERE status_code = 'ERROR') AS errors,
           count(*) FILTER (WHERE is_open) AS open,
           min(start_ns) AS first_ns,
           max(coalesce(end_ns, start_ns)) AS last_ns,
           median((end_ns - start_ns) / 1e9) AS median_s,
           max((end_ns - start_ns) / 1e9) AS max_s
    FROM all_spans
    GROUP BY run_id, service, name, kind
)"""
_SPAN_CATALOG_MAINTAINED = f"""    WITH sums AS (
        SELECT {_CATALOG_KEY}, CAST(sum(spans) AS BIGINT) AS spans,
               CAST(sum(errors) AS BIGINT) AS errors, CAST(sum(open) AS BIGINT) AS open,
               min(first_ns) AS first_ns, max(last_ns) AS last_ns, max(max_s) AS max_s
        FROM (SELECT {_CATALOG_KEY}, spans, errors, open, first_ns, last_ns, max_s
              FROM main.d_span_catalog
              UNION ALL
              {_catalog_parts("rs_tail")}) s
        GROUP BY ALL
    ),
    durations AS (
        SELECT {_CATALOG_KEY}, duration_ns,
               sum(n) OVER (PARTITION BY {_CATALOG_KEY} ORDER BY duration_ns) AS upto,
               sum(n) OVER (PARTITION BY {_CATALOG_KEY}) AS total
        FROM (SELECT {_CATALOG_KEY}, duration_ns, sum(n) AS n
              FROM (SELECT * FROM main.d_span_durations
                    UNION ALL
                    {_duration_parts("rs_tail")}) d
              GROUP BY ALL) d
    ),
    medians AS (  -- the middle value, or the mean of the two middle values
        SELECT {_CATALOG_KEY},
               (min(duration_ns) FILTER (WHERE upto > (total - 1) // 2)
                + min(duration_ns) FILTER (WHERE upto > total // 2)) / 2e9 AS median_s
        FROM durations
        GROUP BY ALL
    )
    SELECT {_unkey(_CATALOG, "s.")}, s.spans, s.errors, s.open, s.first_ns, s.last_ns,
           m.median_s, s.max_s
    FROM sums s LEFT JOIN medians m USING ({_CATALOG_KEY})
)"""
# views whose first step, spans grouped by a key, ``rs_read`` replaces by the kept sums plus the
# spans not derived yet: (the step's text in the view, what replaces it)
_FIRST_STEP_KEPT = {"services": (_SERVICES_FROM, _SERVICES_MAINTAINED),
                    "span_catalog": (_SPAN_CATALOG_FROM, _SPAN_CATALOG_MAINTAINED)}
_KEPT_DDL_MERGED = (_COMPLETIONS_DDL, *_CATALOG_DDL)
_MERGED_PASS = (_COMPLETIONS_PASS, *_CATALOG_PASS)
_MERGED_READ = (_COMPLETIONS_MAINTAINED, _SPAN_CATALOG_MAINTAINED)
# -- the step ledger, kept per step -----------------------------------------------------------
# step_ledger and step_stragglers aggregate a whole run's tries, snapshots and spans per train
# step (20 s and 49 s over 10^8 spans). A step's rows are kept (``d_step_ledger``,
# ``d_step_stragglers``) once a pass's spans end, at their 99th percentile, STEP_SETTLE_NS after
# the step: every step that ended before ``kept_until_ns`` is kept. ``rs_read`` reads the kept
# rows and computes the others in ``rs_steps``: the same views over the spans that end at or after
# ``floor_ns`` (and events from then on), which is STEP_LOOKBACK_NS before each run's last kept
# step had its batch (``ready_ns``). That is exact while a group's tries, calls and parked stays, and a
# snapshot, each last less than STEP_LOOKBACK_NS (tests/store/test_step_keep.py holds rs_read to
# the views).
# Late spans: a pass whose spans start before ``kept_until_ns`` (an exporter that retried, a node
# whose clock is behind, a long try exported at its end) drops the kept rows of the steps that
# ended after that start, and they are kept again by a later pass: a kept row is never stale.
# So does an open marker that started before ``kept_until_ns`` and arrived since the rows were
# kept (``d_steps_markers``: the markers then open).
STEP_SETTLE_NS = 600 * 10**9
STEP_LOOKBACK_NS = 3600 * 10**9
# a writer computes the steps to keep when one settled (a pass brought a step's end, or the
# last computation saw one end, ``next_end_ns``), at most this often (a computation reads the
# spans from floor_ns on: 0.5-1 s on a 10^8-span run)
KEEP_STEPS_EVERY_S = 30.0
STEP_VIEWS = ("step_ledger", "step_stragglers")
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1
_STEPS_STATE_DDL = """CREATE TABLE IF NOT EXISTS d_steps_state (
    kept_until_ns BIGINT, floor_ns BIGINT, seen_end_ns BIGINT, kept_ns BIGINT,
    next_end_ns BIGINT)"""
_STEPS_MARKERS_DDL = """CREATE TABLE IF NOT EXISTS d_steps_markers (
    run_id VARCHAR, trace_id VARCHAR, span_id VARCHAR, start_ns BIGINT)"""
_STEPS_WINDOW = (
    f"""CREATE OR REPLACE VIEW rs_steps.spans AS SELECT * FROM main.spans
    WHERE coalesce(end_ns, {_MAX_NS}) >= (SELECT floor_ns FROM main.d_steps_state)""",
    """CREATE OR REPLACE VIEW rs_steps.span_events AS SELECT * FROM main.span_events
    WHERE ts_ns >= (SELECT floor_ns FROM main.d_steps_state)""",
)
_STEPS_READ = (
    """CREATE OR REPLACE VIEW rs_read.step_ledger AS
    SELECT * FROM main.d_step_ledger
    UNION ALL
    SELECT * FROM rs_steps.step_ledger
    WHERE end_ns IS NULL OR end_ns >= (SELECT kept_until_ns FROM main.d_steps_state)""",
    """CREATE OR REPLACE VIEW rs_read.step_stragglers AS
    SELECT * FROM main.d_step_stragglers
    UNION ALL
    SELECT s.* FROM rs_steps.step_stragglers s
    WHERE s.step_span_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM main.d_step_ledger k
                      WHERE k.run_id = s.run_id AND k.span_id = s.step_span_id)""",
)
# the tables kept beside the maintained rows
SUMMARY_TABLES = ("d_span_buckets", "d_resources", "d_run_seconds", "d_completions",
                  "d_span_catalog", "d_span_durations", "d_step_ledger", "d_step_stragglers",
                  "d_steps_state", "d_steps_markers")

_STATE_DDL = """CREATE TABLE IF NOT EXISTS derive_state (
    spans_done BIGINT, events_done BIGINT, spans_upto BIGINT, events_upto BIGINT,
    digest VARCHAR, passes BIGINT, updated_ns BIGINT)"""


def digest() -> str:
    """What the maintained rows were derived by: the views' text, the maintained list and the
    summaries' statements."""
    h = hashlib.sha256(_views.digest().encode())
    h.update(",".join(MAINTAINED).encode())
    for _name, text in _views.definitions():  # as rs_read has them
        h.update(_reading_kept(text).encode())
    for schema in ("rs_new", "rs_tail"):
        h.update("".join(_window_views(schema, upto=schema == "rs_new")).encode())
    for stmt in (*_SUMMARY_DDL, *_SUMMARY_PASS, _SERVICES_MAINTAINED, _SECONDS_DDL,
                 _SECONDS_PASS, *_KEPT_DDL_MERGED, *_MERGED_PASS, *_MERGED_READ,
                 _STEPS_STATE_DDL, _STEPS_MARKERS_DDL, *_STEPS_WINDOW, *_STEPS_READ):
        h.update(stmt.encode())
    return h.hexdigest()[:16]


def _window_views(schema: str, *, upto: bool) -> list[str]:
    """``schema``'s spans and events: the pass's (``rs_new``, with no open markers: the
    connection's ``_pass_input``), else those from the watermark on (``rs_tail``, whose open
    markers are the store's)."""
    out = []
    for table, column in (("spans", "spans"), ("span_events", "events")):
        source = (f"temp.main.rs_pass_{table}" if upto else
                  f"main.{table} WHERE rowid >= (SELECT {column}_done FROM main.derive_state)")
        out.append(f"CREATE OR REPLACE VIEW {schema}.{table} AS SELECT * FROM {source}")
    if upto:
        out.append(f"CREATE OR REPLACE VIEW {schema}.open_spans AS "
                   "SELECT * FROM main.open_spans WHERE false")
    return out


# A pass of a large store reads its spans and events into the connection's memory once: a
# table's rows are read by row id by scanning every row id (DuckDB keeps no bounds of row ids
# per row group: 40-60 ms a read at 10^8 spans), and a pass reads its spans some 15 times. The
# copy costs about 2 us a span, the reads about 15 ns a row of the table: a pass copies where
# the store holds PASS_COPY_RATIO times its spans or more, and it holds at most
# PASS_COPY_MAX_SPANS (a store's first write reads its spans where they lie).
PASS_COPY_RATIO = 150
PASS_COPY_MAX_SPANS = 1_000_000


class Held:
    """The Arrow slices a writer committed to ``spans`` and ``span_events`` since its last
    pass, in commit order: a pass whose spans and events are exactly these reads them where
    they are, neither by row id nor copied (benchmarks/bench_pass.py). A writer that holds
    more than ``PASS_COPY_MAX_SPANS`` spans stops holding until its next pass."""

    TABLES = ("spans", "span_events")

    def __init__(self) -> None:
        self.slices: dict[str, list[pa.Table]] = {t: [] for t in self.TABLES}
        self.rows = dict.fromkeys(self.TABLES, 0)
        self.whole = True  # every slice since the last pass is here
        self.passes = 0  # the passes that read their spans from here

    def add(self, table: str, rows: pa.Table) -> None:
        if not self.whole or table not in self.slices:
            return
        self.slices[table].append(rows)
        self.rows[table] += rows.num_rows
        if self.rows["spans"] > PASS_COPY_MAX_SPANS:
            self.clear()
            self.whole = False

    def clear(self) -> None:
        self.slices = {t: [] for t in self.TABLES}
        self.rows = dict.fromkeys(self.TABLES, 0)
        self.whole = True

    def covers(self, spans: tuple[int, int], events: tuple[int, int]) -> bool:
        """Whether these are the pass's rows: as many as it has of each table (anything else
        that wrote to the store since the last pass makes the counts differ)."""
        return (self.whole and self.rows["spans"] == spans[1] - spans[0]
                and self.rows["span_events"] == events[1] - events[0])


def _pass_input(con: duckdb.DuckDBPyConnection, spans: tuple[int, int],
                events: tuple[int, int], held: Held | None = None) -> bool:
    """The pass's spans and events (row ids [from, to)), ``temp.main.rs_pass_spans`` and
    ``rs_pass_span_events``, which ``rs_new`` reads: the writer's ``held`` slices where they
    are the pass's, else a copy or the rows where they lie. Whether they are in memory."""
    count = spans[1] - spans[0]
    if (count > 0 or events[1] > events[0]) and held is not None and held.covers(spans, events):
        import pyarrow as pa

        for table in Held.TABLES:
            parts = held.slices[table]
            rows = (pa.concat_tables(parts) if parts else
                    _schema.ARROW_SCHEMAS[table].empty_table())
            con.register(f"rs_held_{table}", rows)
            con.execute(f"CREATE OR REPLACE TEMP VIEW rs_pass_{table} AS "
                        f"SELECT * FROM rs_held_{table}")
        held.passes += 1
        return True
    copy = 0 < count <= PASS_COPY_MAX_SPANS and spans[1] >= PASS_COPY_RATIO * count
    for table, (lo, hi) in (("spans", spans), ("span_events", events)):
        rows = f"SELECT * FROM main.{table} WHERE rowid >= {int(lo)} AND rowid < {int(hi)}"
        con.execute(f"CREATE OR REPLACE TEMP TABLE rs_pass_{table}_copy AS "
                    + (rows if copy else f"SELECT * FROM main.{table} WHERE false"))
        con.execute(f"CREATE OR REPLACE TEMP VIEW rs_pass_{table} AS "
                    + (f"SELECT * FROM temp.main.rs_pass_{table}_copy" if copy else rows))
    return copy


def _pass_done(con: duckdb.DuckDBPyConnection) -> None:
    """The pass's copies emptied and its held slices let go (its input views stay, empty:
    ``rs_new`` names them)."""
    _pass_input(con, (0, 0), (0, 0))
    _let_go(con)
    for name in MAINTAINED:
        con.execute(f"DROP TABLE IF EXISTS temp.main.rs_pass_{name}_rows")


def _let_go(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the connection's references to a pass's held slices."""
    for table in Held.TABLES:
        try:
            con.unregister(f"rs_held_{table}")
        except duckdb.Error:
            pass


def _needed(names: tuple[str, ...]) -> list[tuple[str, str]]:
    """The view definitions ``names`` read, themselves included, in creation order."""
    defs = _views.definitions()
    want = set(names)
    for name, text in reversed(defs):
        if name in want:
            for other, _ in defs:
                if other != name and _mentions(text, other):
                    want.add(other)
    return [(n, t) for n, t in defs if n in want]


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", text) is not None


def install(con: duckdb.DuckDBPyConnection) -> bool:
    """The derived tables, schemas and state in a writable file (inside the caller's
    transaction). Returns True when the maintained rows must be derived from the start (a new
    store, one written before this version, or one whose views changed)."""
    con.execute(_STATE_DDL)
    row = con.execute("SELECT digest FROM derive_state").fetchall()
    fresh = not row or row[0][0] != digest()
    for schema in SCHEMAS:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    if not fresh and _installed(con):
        return False
    # the state first: the window views read it (and rs_new the pass's input)
    con.execute("DELETE FROM derive_state")
    con.execute("INSERT INTO derive_state VALUES (0, 0, 0, 0, ?, 0, ?)",
                [digest(), time.time_ns()])
    _pass_input(con, (0, 0), (0, 0))
    for schema in ("rs_new", "rs_tail"):
        for stmt in _window_views(schema, upto=schema == "rs_new"):
            con.execute(stmt)
        for _name, text in _needed(MAINTAINED):
            con.execute(_views.in_schema(text, schema))
    con.execute(_STEPS_STATE_DDL)  # (the window reads it; made again below)
    for stmt in _STEPS_WINDOW:
        con.execute(stmt)
    for _name, text in _needed(STEP_VIEWS):
        con.execute(_views.in_schema(text, "rs_steps"))
    for name in MAINTAINED:
        con.execute(f"DROP TABLE IF EXISTS main.d_{name}")
        con.execute(f"CREATE TABLE main.d_{name} AS SELECT * FROM rs_new.{name} WHERE false")
    for table in ("d_incidents", "incidents_state",  # kept by other views: no longer true
                  *(f"d_final_{name}" for name in STEP_VIEWS)):
        con.execute(f"DROP TABLE IF EXISTS main.{table}")
    for table in SUMMARY_TABLES:
        con.execute(f"DROP TABLE IF EXISTS main.{table}")
    for stmt in (*_SUMMARY_DDL, _SECONDS_DDL, *_KEPT_DDL_MERGED, _STEPS_STATE_DDL,
                 _STEPS_MARKERS_DDL):
        con.execute(stmt)
    con.execute("INSERT INTO main.d_steps_state VALUES (?, ?, ?, 0, ?)",
                [_MIN_NS, _MIN_NS, _MIN_NS, _MIN_NS])
    for name in STEP_VIEWS:
        con.execute(f"CREATE TABLE main.d_{name} AS SELECT * FROM rs_steps.{name} WHERE false")
    for name, text in _views.definitions():
        if name in _FIRST_STEP_KEPT:
            step, kept = _FIRST_STEP_KEPT[name]
            assert step in text, f"{name} no longer groups spans by its key first"
            con.execute(_views.in_schema(text.replace(step, kept), "rs_read"))
        elif name == "completions":
            con.execute(_views.in_schema(text, "rs_read"))  # completions_since reads the events
            con.execute(_COMPLETIONS_MAINTAINED)
        elif name in STEP_VIEWS:
            con.execute(_STEPS_READ[STEP_VIEWS.index(name)])
        elif name in MAINTAINED:
            con.execute(f"CREATE OR REPLACE VIEW rs_read.{name} AS "
                        f"SELECT * FROM main.d_{name} UNION ALL SELECT * FROM rs_tail.{name}")
        else:
            con.execute(_views.in_schema(_reading_kept(text), "rs_read"))
    return True


def _reading_kept(text: str) -> str:
    """A view file's text with its reads of the maintained views named ``rs_read.``'s: a table
    macro binds its names in its caller's schema (a reader's query: ``main``, where they are
    computed over every span), not in the schema it was created in, as a view does."""
    return re.sub(rf"\b(FROM|JOIN)\s+({'|'.join(MAINTAINED)})\b", r"\1 rs_read.\2", text)


def _installed(con: duckdb.DuckDBPyConnection) -> bool:
    have = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'rs_read'"
    ).fetchall()}
    return _views.names() <= have


def available(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this store keeps maintained rows that are this code's (``rs_read`` exists and
    was derived by the current views)."""
    try:
        rows = con.execute("SELECT digest FROM derive_state").fetchall()
    except duckdb.Error:
        return False
    return bool(rows) and rows[0][0] == digest() and _installed(con)


def pending(con: duckdb.DuckDBPyConnection) -> tuple[int, int, int, int]:
    """(spans_done, spans_total, events_done, events_total)."""
    done = con.execute("SELECT spans_done, events_done FROM derive_state").fetchall()[0]
    return (done[0], _row_count(con, "spans"), done[1], _row_count(con, "span_events"))


def _row_count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    # row ids of an append-only table run 0..n-1; count(*) reads the row groups' counts
    return con.execute(f"SELECT count(*) FROM main.{table}").fetchall()[0][0]


def derive(con: duckdb.DuckDBPyConnection, *, keep_steps_now: bool = False,
           held: Held | None = None) -> int:
    """One pass: derive the rows of every span committed since the last pass, in one
    transaction with the watermark, and keep the steps that settled when due (``keep_steps``;
    ``keep_steps_now``: whatever the time since the last). ``held``: the writer's slices since
    its last pass (``Held``). Returns the spans derived."""
    spans_done, spans_total, events_done, events_total = pending(con)
    if spans_total <= spans_done and events_total <= events_done and not keep_steps_now:
        return 0
    con.execute("BEGIN")
    try:
        con.execute("UPDATE derive_state SET spans_upto = ?, events_upto = ?",
                    [spans_total, events_total])
        copied = _pass_input(con, (spans_done, spans_total), (events_done, events_total),
                             held)
        for name in MAINTAINED:
            # the pass's rows, held for the per-second sums where its spans were copied (a
            # store's first write computes them again instead of holding every row)
            if copied:
                con.execute(f"CREATE OR REPLACE TEMP TABLE rs_pass_{name}_rows AS "
                            f"SELECT * FROM rs_new.{name}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW rs_pass_{name} AS SELECT * FROM "
                        + (f"temp.main.rs_pass_{name}_rows" if copied else f"rs_new.{name}"))
            con.execute(f"INSERT INTO main.d_{name} SELECT * FROM temp.main.rs_pass_{name}")
        for stmt in (*_SUMMARY_PASS, _SECONDS_PASS):
            con.execute(stmt)
        for stmt in _MERGED_PASS:
            if spans_done == 0 and events_done == 0:
                # the first pass fills the tables install made empty, one row per exact key:
                # nothing to conflict with (d_completions' 189k executions of a 3M-span run in
                # 1.1 s instead of 1.9, load 7)
                stmt = re.split(r"\s+ON CONFLICT", stmt)[0]
            con.execute(stmt)
        _steps_pass(con, keep_now=keep_steps_now)
        _pass_done(con)
        con.execute("UPDATE derive_state SET spans_done = ?, events_done = ?, "
                    "passes = passes + 1, updated_ns = ?",
                    [spans_total, events_total, time.time_ns()])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        _let_go(con)
        raise
    return spans_total - spans_done


def _steps_pass(con: duckdb.DuckDBPyConnection, *, keep_now: bool) -> None:
    """The pass's part in the kept steps: drop those a late span may change, then keep the
    steps that settled when due."""
    kept_until, floor, seen_end, kept_ns, next_end = con.execute(
        "SELECT kept_until_ns, floor_ns, seen_end_ns, kept_ns, next_end_ns "
        "FROM main.d_steps_state").fetchall()[0]
    # the pass's 99th percentile end, not its latest: a few spans from a node whose clock is
    # ahead move nothing; and the first end of a step among its spans
    first, middle, step_end = con.execute(
        "SELECT least((SELECT min(start_ns) FROM rs_new.spans), "
        "             (SELECT min(ts_ns) FROM rs_new.span_events)), "
        "quantile_disc(coalesce(end_ns, start_ns), 0.99), "
        "min(end_ns) FILTER (WHERE name = 'rl.train_step' OR name LIKE 'rl.%.step') "
        "FROM rs_new.spans").fetchall()[0]
    if middle is not None and middle > seen_end:
        seen_end = middle
    if step_end is not None:
        next_end = min(next_end, step_end)
    # an open marker that started before kept_until and arrived since (a kept step's rows
    # counted the markers then open: d_steps_markers)
    marker = con.execute(
        "SELECT min(o.start_ns) FROM main.open_spans o WHERE o.start_ns < ? AND NOT EXISTS ("
        "SELECT 1 FROM main.d_steps_markers m WHERE m.trace_id = o.trace_id "
        "AND m.span_id = o.span_id AND m.run_id IS NOT DISTINCT FROM o.run_id)",
        [kept_until]).fetchall()[0][0]
    if marker is not None and (first is None or marker < first):
        first = marker
    changed = False
    if first is not None and first < kept_until:
        changed = True
        # the steps that ended after the late span started may count it
        runs = "SELECT count(DISTINCT run_id) FROM main.d_step_ledger"
        before = con.execute(runs).fetchall()[0][0]
        con.execute("DELETE FROM main.d_step_ledger WHERE end_ns >= ?", [first])
        con.execute("DELETE FROM main.d_step_stragglers s WHERE NOT EXISTS ("
                    "SELECT 1 FROM main.d_step_ledger k "
                    "WHERE k.run_id = s.run_id AND k.span_id = s.step_span_id)")
        kept_until = first
        next_end = min(next_end, first)
        # a run left with no kept step reads its first step's wait from its start
        floor = (min(floor, _steps_floor(con, kept_until))
                 if con.execute(runs).fetchall()[0][0] == before else _MIN_NS)
    horizon = seen_end - STEP_SETTLE_NS if seen_end > _MIN_NS + STEP_SETTLE_NS else _MIN_NS
    # due: a step settled (or, with none to wait for, the floor is half a look-back behind),
    # at most every KEEP_STEPS_EVERY_S; on closing, whatever settled
    settled = horizon > kept_until and (
        keep_now or horizon > next_end or horizon - kept_until >= STEP_LOOKBACK_NS // 2)
    due = settled and (keep_now or time.time_ns() - kept_ns >= KEEP_STEPS_EVERY_S * 1e9)
    state = ("UPDATE main.d_steps_state SET kept_until_ns = ?, floor_ns = ?, seen_end_ns = ?, "
             "kept_ns = ?, next_end_ns = ?")
    # rs_steps reads the floor
    con.execute(state, [kept_until, floor, seen_end, kept_ns, next_end])
    if due:
        changed = True
        kept_until, floor, next_end = _keep_steps(con, kept_until, floor, horizon)
        con.execute(state, [kept_until, floor, seen_end, time.time_ns(), next_end])
    if changed:
        con.execute("DELETE FROM main.d_steps_markers")
        con.execute("INSERT INTO main.d_steps_markers SELECT run_id, trace_id, span_id, start_ns "
                    "FROM main.open_spans WHERE start_ns < ?", [kept_until])


def _keep_steps(con: duckdb.DuckDBPyConnection, kept_until: int, floor: int,
                horizon: int) -> tuple[int, int, int]:
    """Keep the rows of the steps that ended in [kept_until, horizon), computed in rs_steps
    (from ``floor``). Returns the new (kept_until, floor, the first end of a step left)."""
    t0 = time.perf_counter()
    con.execute("CREATE OR REPLACE TEMP TABLE rs_steps_computed AS "
                "SELECT * FROM rs_steps.step_ledger")
    con.execute("INSERT INTO main.d_step_ledger SELECT * FROM rs_steps_computed "
                "WHERE end_ns >= ? AND end_ns < ?", [kept_until, horizon])
    con.execute("INSERT INTO main.d_step_stragglers SELECT s.* FROM rs_steps.step_stragglers s "
                "SEMI JOIN rs_steps_computed c ON c.run_id = s.run_id "
                "AND c.span_id = s.step_span_id AND c.end_ns >= ? AND c.end_ns < ?",
                [kept_until, horizon])
    # a run whose steps all run past the horizon has nothing kept to read its first step's
    # wait from: the floor stays
    unkept_runs, next_end = con.execute(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT run_id FROM rs_steps_computed) c "
        "        ANTI JOIN main.d_step_ledger k ON k.run_id = c.run_id), "
        "(SELECT min(end_ns) FROM rs_steps_computed WHERE end_ns >= ?)", [horizon]
    ).fetchall()[0]
    con.execute("DROP TABLE rs_steps_computed")
    if not unkept_runs:
        floor = max(floor, _steps_floor(con, horizon))
    log.debug("kept the steps that ended before %d in %.2f s", horizon, time.perf_counter() - t0)
    return horizon, floor, _MAX_NS if next_end is None else next_end


def _steps_floor(con: duckdb.DuckDBPyConnection, kept_until: int) -> int:
    """The spans rs_steps reads end at or after this: STEP_LOOKBACK_NS before each run's last
    kept step had its batch (the next step's groups commit after that), and before
    kept_until."""
    last = con.execute("SELECT min(s) FROM (SELECT arg_max(ready_ns, end_ns) AS s "
                       "FROM main.d_step_ledger GROUP BY run_id)").fetchall()[0][0]
    bound = kept_until if last is None else min(kept_until, last)
    return max(_MIN_NS, bound - STEP_LOOKBACK_NS)


# -- incidents, kept --------------------------------------------------------------------------
# The incident views run every detector over the model rows (``rs_read.incidents``). Their
# result is kept in ``d_incidents`` (and the step views' whole result, kept steps and latest,
# in ``d_final_step_ledger`` and ``d_final_step_stragglers``) with what it was computed over (the spans and events
# committed, a checksum of the open markers): a reader whose store has not changed since reads
# the kept rows instead of running the detectors (``RunStore.relation("incidents")``), which is
# every read of a finished run. A store of KEEP_INCIDENTS_FROM_SPANS spans or more keeps them
# when it closes. This is a kept result, not incremental detection: a store that changed since
# (a live run) is read by computing the incidents, as before.
# a store closes keeping its incidents from this many spans on: below it the detectors take a
# fraction of a second on every read anyway
KEEP_INCIDENTS_FROM_SPANS = 200_000
_KEPT_DDL = (
    """CREATE TABLE IF NOT EXISTS incidents_state (
        spans BIGINT, events BIGINT, open_sum HUGEINT, computed_ns BIGINT, cost_s DOUBLE)""",
)
_OPEN_SUM = "SELECT coalesce(sum(hash(span_id, trace_id, run_id)), 0) FROM main.open_spans"


def _fingerprint(con: duckdb.DuckDBPyConnection) -> tuple[int, int, int]:
    return (_row_count(con, "spans"), _row_count(con, "span_events"),
            int(con.execute(_OPEN_SUM).fetchall()[0][0]))


def keep_incidents(con: duckdb.DuckDBPyConnection) -> float:
    """Compute the incidents over the maintained rows and keep them with what they were
    computed over, in one transaction. Returns the seconds it took."""
    t0 = time.perf_counter()
    con.execute("BEGIN")
    try:
        for stmt in _KEPT_DDL:
            con.execute(stmt)
        spans, events, open_sum = _fingerprint(con)
        con.execute("DROP TABLE IF EXISTS main.d_incidents")
        con.execute("CREATE TABLE main.d_incidents AS SELECT * FROM rs_read.incidents")
        for name in STEP_VIEWS:  # every step as it stands, the latest and the pending too
            con.execute(f"DROP TABLE IF EXISTS main.d_final_{name}")
            con.execute(f"CREATE TABLE main.d_final_{name} AS SELECT * FROM rs_read.{name}")
        cost = time.perf_counter() - t0
        con.execute("DELETE FROM incidents_state")
        con.execute("INSERT INTO incidents_state VALUES (?, ?, ?, ?, ?)",
                    [spans, events, open_sum, time.time_ns(), cost])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return time.perf_counter() - t0


def incidents_kept_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``d_incidents`` was computed over exactly what the store holds now (no span,
    event or open marker committed or ended since)."""
    try:
        row = con.execute("SELECT spans, events, open_sum FROM incidents_state").fetchall()
    except duckdb.Error:
        return False
    if not row or not available(con):
        return False
    return tuple(int(v) for v in row[0]) == _fingerprint(con)
