"""Pure DataFrame -> DataFrame builders of the tables the views show for any run's data: what a
run holds (span catalogue, processes), released Gym's rollouts, model calls and counters, and
the steps inside checkpoint operations. Each takes a view's frame (and the run's time zero where
it shows times) and returns the table's rows; text columns are typed as text even when empty (a
table picks its formatters from the first value it is given, and a live tab is often built
before its first row)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rolloutscope.dashboard.timeline_plot import participant_label

S = 1e9


def catalog_rows(catalog: pd.DataFrame) -> pd.DataFrame:
    c = catalog.sort_values(["spans", "name"], ascending=[False, True])
    return pd.DataFrame({
        "span": c.name.astype(str).to_numpy(), "kind": c.kind.astype(str).to_numpy(),
        "service": c.service.fillna("-").astype(str).to_numpy(),
        "dialect": c.dialect.astype(str).to_numpy(),
        "spans": c.spans.astype("int64").to_numpy(),
        "errors": c.errors.astype("int64").to_numpy(),
        "open": c.open.astype("int64").to_numpy(),
        "median (ms)": (pd.to_numeric(c.median_s) * 1e3).round(2).to_numpy(),
        "max (ms)": (pd.to_numeric(c.max_s) * 1e3).round(2).to_numpy()})


def service_rows(services: pd.DataFrame) -> pd.DataFrame:
    v = services.sort_values(["service", "pid"])
    return pd.DataFrame({
        "service": v.service.fillna("-").astype(str).to_numpy(),
        "pid": _texts("" if pd.isna(p) else str(int(p)) for p in v.pid),
        "Gym server": v.gym_server_name.fillna("").astype(str).to_numpy(),
        "Gym server type": v.gym_server_type.fillna("").astype(str).to_numpy(),
        "Gym version": v.gym_version.fillna("").astype(str).to_numpy(),
        "host": v.host.fillna("").astype(str).to_numpy(),
        "sdk": v.sdk.fillna("").astype(str).to_numpy(),
        "names its run": v.names_run.astype(bool).to_numpy(),
        "spans": v.spans.astype("int64").to_numpy()})


def gym_rollout_rows(rollouts: pd.DataFrame, t0: int) -> pd.DataFrame:
    g = rollouts.sort_values("start_ns")
    ms = lambda col: (pd.to_numeric(g[col]) * 1e3).round(2).to_numpy()  # noqa: E731
    return pd.DataFrame({
        "rollout": g.capture_key.fillna(g.rollout_id).astype(str).to_numpy(),
        "rollout_id": g.rollout_id.astype(str).to_numpy(),
        "Gym attempt": g.gym_attempt.astype("Int64").to_numpy(),
        "server": g.server_name.fillna("").astype(str).to_numpy(),
        "start (s)": ((g.start_ns - t0) / S).round(3).to_numpy(),
        "duration (ms)": ms("duration_s"), "outcome": g.outcome.astype(str).to_numpy(),
        "HTTP": g.http_status.astype("Int64").to_numpy(),
        "model calls": g.model_calls.astype("Int64").to_numpy(),
        "model (ms)": ms("model_s"), "agent (ms)": ms("agent_s"),
        "verify (ms)": ms("verify_s"),
        "tokens in/out": _texts(_tokens(i, o) for i, o in zip(g.input_tokens,
                                                               g.output_tokens)),
        "reward": pd.to_numeric(g.reward).to_numpy(),
        "trace_id": g.trace_id.astype(str).to_numpy()})


def model_call_rows(calls: pd.DataFrame, t0: int) -> pd.DataFrame:
    c = calls.sort_values("start_ns")
    return pd.DataFrame({
        "rollout": c.capture_key.fillna("").astype(str).to_numpy(),
        "call": c.name.astype(str).to_numpy(),
        "server": c.server_name.fillna(c.service).fillna("").astype(str).to_numpy(),
        "backend": c.backend_url.fillna("").astype(str).to_numpy(),
        "HTTP": c.http_status.astype("Int64").to_numpy(),
        "tries": c.tries.astype("Int64").to_numpy(),
        "start (s)": ((c.start_ns - t0) / S).round(3).to_numpy(),
        "latency (ms)": (pd.to_numeric(c.duration_s) * 1e3).round(2).to_numpy(),
        "backend (ms)": (pd.to_numeric(c.backend_s) * 1e3).round(2).to_numpy(),
        "outcome": c.outcome.astype(str).to_numpy(),
        "tokens in/out": _texts(_tokens(i, o) for i, o in zip(c.input_tokens,
                                                               c.output_tokens)),
        "trace_id": c.trace_id.astype(str).to_numpy()})


def counter_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    m = metrics.sort_values(["name", "service"])
    return pd.DataFrame({
        "metric": m.name.astype(str).to_numpy(),
        "service": m.service.fillna("").astype(str).to_numpy(),
        "attributes": m.attributes.fillna("").astype(str).to_numpy(),
        "count": m["count"].astype("Int64").to_numpy(),
        "mean": pd.to_numeric(m["mean"]).round(3).to_numpy(),
        "min": pd.to_numeric(m["min"]).round(3).to_numpy(),
        "max": pd.to_numeric(m["max"]).round(3).to_numpy(),
        "latest": pd.to_numeric(m.value).to_numpy(),
        "range": _texts(_range(lo, hi) for lo, hi in zip(m.low, m.high)),
        "unit": m.unit.fillna("").astype(str).to_numpy()})


def step_rows(steps: pd.DataFrame, t0: int) -> pd.DataFrame:
    st = steps.sort_values("start_ns")
    return pd.DataFrame({
        "checkpoint_id": st.checkpoint_id.fillna("").astype(str).to_numpy(),
        "participant": _texts(participant_label(k, i) for k, i in
                              zip(st.participant_kind, st.instance)),
        "operation": st.op.fillna("").astype(str).to_numpy(),
        "step": st.step.astype(str).to_numpy(),
        "start (s)": ((st.start_ns - t0) / S).round(3).to_numpy(),
        "duration (s)": pd.to_numeric(st.duration_s).round(4).to_numpy(),
        "outcome": st.outcome.fillna("open").astype(str).to_numpy(),
        "bytes": st.bytes.astype("Int64").to_numpy(),
        "records": st.records.astype("Int64").to_numpy()})


def _texts(values) -> np.ndarray:
    """A text column, typed as text even when empty: a table picks its formatters from the
    first value it is given, and a live tab is often built before its first row."""
    return pd.Series(list(values), dtype="object").to_numpy()


def _tokens(i, o) -> str:
    if (i is None or pd.isna(i)) and (o is None or pd.isna(o)):
        return ""
    return f"{'-' if pd.isna(i) else int(i)} / {'-' if pd.isna(o) else int(o)}"


def _range(lo, hi) -> str:
    if lo is None or pd.isna(lo):
        return ""
    return f"{lo:g}" if lo == hi else f"{lo:g} .. {hi:g}"
