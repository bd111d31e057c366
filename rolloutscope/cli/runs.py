"""``rolloutscope info`` and ``rolloutscope incidents``: what a run store holds."""

from __future__ import annotations

import argparse
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
        runs = store.query(
            """SELECT k.run_id, r.source, r.scenario, r.parent_run_id,
                      coalesce(s.n, 0), s.first_ns, s.last_ns
               FROM (SELECT run_id FROM runs UNION SELECT DISTINCT run_id FROM spans) k
               LEFT JOIN runs r USING (run_id)
               LEFT JOIN (SELECT run_id, count(*) AS n, min(start_ns) AS first_ns,
                                 max(coalesce(end_ns, start_ns)) AS last_ns
                          FROM spans GROUP BY run_id) s USING (run_id)
               WHERE k.run_id IS NOT NULL
               ORDER BY k.run_id""")
        print(f"{store.path}")
        unnamed = store.query("SELECT count(*) FROM spans WHERE run_id IS NULL")[0][0]
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
            print(f"  run id: {_derivation(store, run_id, source, n)}")
            print(f"  spans {n:,}  from {_fmt_ns(first)} to {_fmt_ns(last)} ({span:,.1f} s)")
            for line in _processes(store, run_id):
                print(f"  {line}")
            print(f"  model views: {_model_view_counts(store, run_id)}")
            counts = store.query(
                "SELECT name, count(*) AS n FROM spans WHERE run_id = ? "
                "GROUP BY name ORDER BY n DESC, name", [run_id])
            width = max((len(name) for name, _ in counts), default=0)
            for name, count in counts:
                print(f"    {name:<{width}}  {count:>10,}")
            open_count = store.query("SELECT count(*) FROM open_spans WHERE run_id = ?",
                                     [run_id])[0][0]
            if open_count:
                print(f"  open intervals {open_count:,}")
    return 0


def _derivation(store, run_id: str, source: str | None, spans: int) -> str:
    """How the run's id was found (the rule in rolloutscope.store.rows.RUN_RULE)."""
    if not spans:
        return f"registered by {source or 'a writer'} (no spans)"
    # a text test per distinct resource and per span: no JSON parsing of every span
    by_resource = store.query(
        "SELECT resource LIKE '%\"nemo.run.id\"%', count(*) FROM spans WHERE run_id = ? "
        "GROUP BY 1", [run_id])
    named = sum(n for has, n in by_resource if has)
    on_span = store.query(
        "SELECT count(*) FROM spans WHERE run_id = ? AND attributes LIKE '%\"nemo.run.id\"%'",
        [run_id])[0][0]
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
        "SELECT service, pid, gym_server_type, gym_version, spans FROM services "
        "WHERE run_id = ? ORDER BY service, pid", [run_id])
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


def _model_view_counts(store, run_id: str) -> str:
    parts = []
    for view in MODEL_VIEWS:  # names from the tuple above, not from input
        n = store.query(f"SELECT count(*) FROM {view} WHERE run_id = ?", [run_id])[0][0]
        if view == "rollout_attempts" and n:
            by = store.query("SELECT dialect, count(*) FROM rollout_attempts WHERE run_id = ? "
                             "GROUP BY dialect ORDER BY dialect", [run_id])
            parts.append(f"{view} {n:,} (" + ", ".join(f"{d} {c:,}" for d, c in by) + ")")
        else:
            parts.append(f"{view} {n:,}")
    return ", ".join(parts)


INCIDENT_KINDS: tuple[str, ...] = tuple(k.value for k in IncidentKind)  # from the vocabulary


def cmd_incidents(args: argparse.Namespace) -> int:
    import json

    from rolloutscope.store import RunStore

    unknown = sorted(set(args.kind) - set(INCIDENT_KINDS))
    if unknown:
        raise UsageError(f"unknown incident kind(s) {', '.join(unknown)}; "
                         f"known: {', '.join(INCIDENT_KINDS)}")
    sql = ("SELECT i.*, (i.start_ns - t.start_ns) / 1e9 AS start_s FROM incidents i "
           "LEFT JOIN run_thresholds t USING (run_id) WHERE 1 = 1")
    params: list[object] = []
    if args.kind:
        sql += f" AND i.kind IN ({', '.join('?' for _ in args.kind)})"
        params.extend(args.kind)
    if args.run_id:
        sql += " AND i.run_id = ?"
        params.append(args.run_id)
    sql += " ORDER BY i.run_id, i.start_ns, i.kind"
    with RunStore(args.run, read_only=True) as store:
        df = store.query_df(sql, params)
    records = []
    for row in df.itertuples(index=False):
        records.append({
            "run_id": row.run_id, "incident_id": row.incident_id, "kind": row.kind,
            "severity": row.severity, "start_ns": _int(row.start_ns), "end_ns": _int(row.end_ns),
            "start_s": None if _missing(row.start_s) else round(float(row.start_s), 3),
            "subject": row.subject, "summary": row.summary,
            "evidence": [str(x) for x in (row.evidence if row.evidence is not None else [])],
            "caused_by": None if _missing(row.caused_by) else row.caused_by,
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
    for n, (run_id, in_run) in enumerate(by_run.items()):
        if len(by_run) > 1:  # several runs: a block each, under its run id
            print(("\n" if n else "") + f"run {run_id}: {len(in_run)} incident(s)")
        for rec in in_run:
            _print_incident(rec)
    return 0


def _print_incident(rec: dict) -> None:
    start = "-" if rec["start_s"] is None else f"{rec['start_s']:.1f}s"
    cause = f"  (caused by {rec['caused_by']})" if rec["caused_by"] else ""
    print(f"{rec['incident_id']:<15} {rec['severity']:<8} {start:>9}  {rec['kind']:<28} "
          f"{rec['subject']}{cause}")
    print(f"{'':<15} {rec['summary']}")


def _missing(value: object) -> bool:
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _int(value: object) -> int | None:
    return None if _missing(value) else int(value)


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
    inc.set_defaults(handler=cmd_incidents)


