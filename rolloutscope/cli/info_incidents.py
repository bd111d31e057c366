"""``rolloutscope info`` and ``rolloutscope incidents``: what a run store holds."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from rolloutscope.cli import UsageError
from rolloutscope.cli.stores import STORE_HELP, store_arg
from rolloutscope.vocabulary import IncidentKind


def _fmt_ns(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def cmd_info(args: argparse.Namespace) -> int:
    from rolloutscope.store import RunStore

    with RunStore(args.run, read_only=True) as store:
        src = _InfoSource(store)
        runs = store.query(
            f"""SELECT k.run_id, r.source, r.scenario, r.parent_run_id,
                      coalesce(s.n, 0), s.first_ns, s.last_ns
               FROM (SELECT run_id FROM runs UNION SELECT run_id FROM ({src.by_run})) k
               LEFT JOIN runs r USING (run_id)
               LEFT JOIN ({src.by_run}) s USING (run_id)
               WHERE k.run_id IS NOT NULL
               ORDER BY k.run_id""")
        print(f"{store.path}")
        unnamed = store.query(f"SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM ({src.by_run}) "
                              "WHERE run_id IS NULL")[0][0]
        if unnamed:
            print(f"  {unnamed:,} span(s) name no run: written by a version that did not yet "
                  f"file them under the store's default run; no view shows them")
        if not runs:
            print("  no runs")
            return 0
        for run_id, source, scenario, parent, n, first, last in runs:
            span = (last - first) / 1e9 if first is not None and last is not None else 0.0
            extra = f" scenario={scenario}" if scenario else ""
            extra += f" parent={parent}" if parent else ""
            print(f"run {run_id}  source={source or 'live (spans only, no runs row)'}{extra}")
            print(f"  run id: {_derivation(store, src, run_id, source, n)}")
            print(f"  spans {n:,}  from {_fmt_ns(first)} to {_fmt_ns(last)} ({span:,.1f} s)")
            for line in _processes(store, run_id):
                print(f"  {line}")
            print(f"  model views: {_model_view_counts(store, run_id, n)}")
            counts = store.query(
                f"SELECT name, CAST(sum(n) AS BIGINT) AS n FROM ({src.by_name}) "
                f"WHERE run_id = {_lit(run_id)} "
                "GROUP BY name ORDER BY n DESC, name")
            width = max((len(name) for name, _ in counts), default=0)
            for name, count in counts:
                print(f"    {name:<{width}}  {count:>10,}")
            open_count = store.query(
                f"SELECT count(*) FROM open_spans WHERE run_id = {_lit(run_id)}")[0][0]
            if open_count:
                print(f"  open intervals {open_count:,}")
        if not store.maintained:
            print("  (this store keeps no maintained rows, so these counts read every span: "
                  "opening it once for writing, e.g. `rolloutscope info` after any write, "
                  "derives them)")
    return 0


def _lit(text: str) -> str:
    """``text`` as an SQL string literal. ``info`` binds no parameters: DuckDB imports pandas
    to look at any bound value, 0.4 s of a command that otherwise needs none of it."""
    return "'" + str(text).replace("'", "''") + "'"


class _InfoSource:
    """Where ``info`` counts spans: the summaries a store maintains as spans arrive
    (``derived.py``: by run, name and minute, and by run and resource) plus the spans not
    derived yet, else every span."""

    def __init__(self, store) -> None:
        if store.maintained:
            self.by_name = (
                "SELECT nullif(run_id, '') AS run_id, nullif(name, '') AS name, spans AS n, "
                "run_id_on_span AS on_span, first_ns, last_ns FROM d_span_buckets "
                "UNION ALL SELECT run_id, name, count(*), "
                "count(*) FILTER (attributes LIKE '%\"nemo.run.id\"%'), min(start_ns), "
                "max(coalesce(end_ns, start_ns)) FROM rs_tail.spans GROUP BY ALL")
            self.by_resource = (
                "SELECT nullif(run_id, '') AS run_id, nullif(resource, '') AS resource, "
                "spans AS n FROM d_resources "
                "UNION ALL SELECT run_id, resource, count(*) FROM rs_tail.spans GROUP BY ALL")
        else:
            self.by_name = (
                "SELECT run_id, name, 1 AS n, "
                "CAST(attributes LIKE '%\"nemo.run.id\"%' AS INTEGER) AS on_span, "
                "start_ns AS first_ns, coalesce(end_ns, start_ns) AS last_ns FROM spans")
            self.by_resource = "SELECT run_id, resource, 1 AS n FROM spans"
        self.by_run = (f"SELECT run_id, CAST(sum(n) AS BIGINT) AS n, min(first_ns) AS first_ns, "
                       f"max(last_ns) AS last_ns FROM ({self.by_name}) GROUP BY run_id")


def _derivation(store, src: _InfoSource, run_id: str, source: str | None, spans: int) -> str:
    """How the run's id was found (the rule in rolloutscope.store.rows.RUN_RULE)."""
    if not spans:
        return f"registered by {source or 'a writer'} (no spans)"
    # a text test per distinct resource and per span: no JSON parsing of every span
    by_resource = store.query(
        f"SELECT resource LIKE '%\"nemo.run.id\"%', CAST(sum(n) AS BIGINT) FROM ({src.by_resource}) "
        f"WHERE run_id = {_lit(run_id)} GROUP BY 1")
    named = sum(n for has, n in by_resource if has)
    on_span = store.query(f"SELECT CAST(coalesce(sum(on_span), 0) AS BIGINT) FROM ({src.by_name}) "
                          f"WHERE run_id = {_lit(run_id)}")[0][0]
    parts = []
    if named:
        parts.append(f"nemo.run.id on the resource of {named:,} span(s)")
    if on_span:
        parts.append(f"nemo.run.id on {on_span:,} span(s) themselves")
    derived = spans - max(named, on_span)
    if derived > 0:
        whose = ("the import's run (rolloutscope import)" if source == "import" else
                 "the store's default run, named after its file"
                 if run_id == store.default_run_id else "the run their writer was given")
        parts.append(f"{derived:,} span(s) carried no nemo.run.id and belong to {whose}")
    return "; ".join(parts)


def _processes(store, run_id: str) -> list[str]:
    rows = store.query(
        f"SELECT service, pid, gym_server_type, gym_version, spans FROM {store.relation('services')} "
        f"WHERE run_id = {_lit(run_id)} ORDER BY service, pid")
    if not rows:
        return []
    out = [f"processes {len(rows)}:"]
    for service, pid, gym_type, gym_version, spans in rows:
        what = f" (Gym {gym_version} {gym_type})" if gym_type else ""
        out.append(f"  {service or '-'}{f' pid {pid}' if pid is not None else ''}{what}: "
                   f"{spans:,} span(s)")
    return out


# The model views a reader draws, in the order info lists them.
MODEL_VIEWS = ("rollout_attempts", "gym_rollouts", "model_calls", "checkpoint_ops",
               "checkpoint_windows", "shard_states", "deadlines", "parked_intervals",
               "completions", "incidents")


# A run of more spans than this has only its maintained views counted by ``info``
COUNT_EVERY_VIEW_UP_TO = 1_000_000


def _model_view_counts(store, run_id: str, spans: int) -> str:
    """Each model view's rows of the run. On a store that maintains its rows, the views it
    keeps (``derived.MAINTAINED``) are counted from them; in a run of more than
    ``COUNT_EVERY_VIEW_UP_TO`` spans the others, which would be computed over every span, are
    named, not counted (``rolloutscope incidents`` and the views read them)."""
    from rolloutscope.store.derived import MAINTAINED

    parts, computed = [], []
    for view in MODEL_VIEWS:  # names from the tuple above, not from input
        if store.maintained and view not in MAINTAINED and spans > COUNT_EVERY_VIEW_UP_TO:
            computed.append(view)
            if view == "rollout_attempts":  # its RL tries are kept: counted, as rl_attempts
                n = store.query(f"SELECT count(*) FROM {store.relation('rl_attempts')} "
                                f"WHERE run_id = {_lit(run_id)}")[0][0]
                parts.append(f"rl_attempts {n:,}")
            continue
        n = store.query(f"SELECT count(*) FROM {store.relation(view)} "
                        f"WHERE run_id = {_lit(run_id)}")[0][0]
        if view == "rollout_attempts" and n:
            by = store.query("SELECT dialect, count(*) FROM rollout_attempts "
                             f"WHERE run_id = {_lit(run_id)} "
                             "GROUP BY dialect ORDER BY dialect")
            parts.append(f"{view} {n:,} (" + ", ".join(f"{d} {c:,}" for d, c in by) + ")")
        else:
            parts.append(f"{view} {n:,}")
    if computed:
        parts.append("computed when read: " + ", ".join(computed))
    return ", ".join(parts)


INCIDENT_KINDS: tuple[str, ...] = tuple(k.value for k in IncidentKind)  # from the vocabulary


def cmd_incidents(args: argparse.Namespace) -> int:
    import json

    from rolloutscope.store import RunStore

    unknown = sorted(set(args.kind) - set(INCIDENT_KINDS))
    if unknown:
        raise UsageError(f"unknown incident kind(s) {', '.join(unknown)}; "
                         f"known: {', '.join(INCIDENT_KINDS)}")
    since_s = _duration_s(args.since) if args.since else None
    if args.step is not None and not args.run_id:
        raise UsageError("--step N needs --run-id RUN: steps are counted per run")
    with RunStore(args.run, read_only=True) as store:
        # the maintained rows where the store keeps them (store.relation): the incident views
        # then read typed rows instead of every span's attributes. Values are written into the
        # statement as literals: DuckDB imports pandas to look at any bound parameter, and
        # this command needs none of it (0.4-1 s of its time). The evidence lists only for
        # --json: the text does not print them, and fetching them is a third of the query
        evidence = "i.evidence" if args.json else "[]"
        sql = (f"SELECT i.run_id, i.incident_id, i.kind, i.severity, i.start_ns, i.end_ns, "
               f"(i.start_ns - t.start_ns) / 1e9 AS start_s, i.subject, i.summary, "
               f"{evidence}, i.caused_by FROM {store.relation('incidents')} i "
               f"LEFT JOIN {store.relation('run_thresholds')} t USING (run_id) WHERE 1 = 1")
        if args.kind:
            sql += f" AND i.kind IN ({', '.join(_lit(k) for k in args.kind)})"
        if args.run_id:
            sql += f" AND i.run_id = {_lit(args.run_id)}"
        if since_s is not None:
            # what overlaps each run's last `since` seconds (its last seen instant: now for a
            # live run, its end for a finished one); an incident still open overlaps it
            sql += (" AND (i.end_ns IS NULL OR i.end_ns >= (SELECT max(last_seen_ns) FROM runs r "
                    f"WHERE r.run_id = i.run_id) - {int(since_s * 1e9)})")
        if args.step is not None:
            lo, hi = _step_window(store, args.run_id, args.step)
            sql += f" AND i.start_ns <= {int(hi)} AND (i.end_ns IS NULL OR i.end_ns >= {int(lo)})"
        sql += " ORDER BY i.run_id, i.start_ns, i.kind"
        rows = store.query(sql)
    records = []
    for (run_id, incident_id, kind, severity, start_ns, end_ns, start_s, subject, summary,
         evidence, caused_by) in rows:
        records.append({
            "run_id": run_id, "incident_id": incident_id, "kind": kind,
            "severity": severity, "start_ns": start_ns, "end_ns": end_ns,
            "start_s": None if start_s is None else round(float(start_s), 3),
            "subject": subject, "summary": summary,
            "evidence": [str(x) for x in (evidence or [])],
            "caused_by": caused_by,
        })
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    if not records:
        print("no incidents")
        return 0
    by_run: dict[str, list[dict]] = {}
    for rec in records:
        by_run.setdefault(rec["run_id"], []).append(rec)
    lines: list[str] = []
    for n, (run_id, in_run) in enumerate(by_run.items()):
        if len(by_run) > 1:  # several runs: a block each, under its run id
            lines.append(("\n" if n else "") + f"run {run_id}: {len(in_run)} incident(s)")
        for rec in in_run:
            lines += _incident_lines(rec)
    # one write: a print per line cost ~0.15 s for a large run's 13,000 incidents
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _incident_lines(rec: dict) -> tuple[str, str]:
    start = "-" if rec["start_s"] is None else f"{rec['start_s']:.1f}s"
    cause = f"  (caused by {rec['caused_by']})" if rec["caused_by"] else ""
    return (f"{rec['incident_id']:<15} {rec['severity']:<8} {start:>9}  {rec['kind']:<28} "
            f"{rec['subject']}{cause}", f"{'':<15} {rec['summary']}")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_s(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``2d`` or plain seconds, as seconds."""
    t = text.strip().lower()
    try:
        if t and t[-1] in _UNITS:
            value = float(t[:-1]) * _UNITS[t[-1]]
        else:
            value = float(t)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"--since {text!r}: give a positive duration such as 90s, 15m, 1h, 2d")
    return value


def _step_window(store, run_id: str, step: int) -> tuple[int, int]:
    """Train step ``step``'s stretch of ``run_id``: from the end of the step before (or the
    run's start) to the end of its own training (rolloutscope.store.steps)."""
    from rolloutscope.store.run_reads import require_run
    from rolloutscope.store.steps import _boundaries

    require_run(store, run_id)
    bounds = _boundaries(store, run_id)
    if not len(bounds):
        raise UsageError(f"run {run_id} records no train steps (no rl.train_step spans and no "
                         f"rollout/train_steps metric), so --step has nothing to select")
    match = bounds.index[bounds.step == step]
    if not len(match):
        raise UsageError(f"run {run_id} has no train step {step}; its steps run "
                         f"{int(bounds.step.min())}..{int(bounds.step.max())}")
    i = bounds.index.get_loc(match[0])
    first = store.query("SELECT first_seen_ns FROM runs WHERE run_id = ?", [run_id])
    lo = (int(bounds.end_ns.iloc[i - 1]) if i > 0
          else int(first[0][0]) if first and first[0][0] is not None else 0)
    return lo, int(bounds.end_ns.iloc[i])


def register(sub: argparse._SubParsersAction) -> None:
    info = sub.add_parser("info", help="summarise a run store: runs, span counts, time range")
    info.add_argument("run", type=store_arg, help=STORE_HELP)
    info.set_defaults(handler=cmd_info)

    inc = sub.add_parser("incidents", help="list the incidents detected in a run store")
    inc.add_argument("run", type=store_arg, help=STORE_HELP)
    inc.add_argument("--json", action="store_true", help="print a JSON array of incident rows")
    inc.add_argument("--kind", action="append", default=[], metavar="KIND",
                     help="only this kind (repeatable): " + ", ".join(INCIDENT_KINDS))
    inc.add_argument("--run-id", help="only this run of the store")
    inc.add_argument("--since", metavar="DURATION",
                     help="only incidents overlapping each run's last DURATION (90s, 15m, 1h, "
                          "2d), counted back from the last instant the run was seen")
    inc.add_argument("--step", type=int, metavar="N",
                     help="only incidents overlapping train step N of --run-id (from the end "
                          "of step N-1's training to the end of step N's)")
    inc.set_defaults(handler=cmd_incidents)


