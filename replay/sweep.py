"""Sweeps: one scenario replayed over a grid of config values, a run file per grid point.

Rule: the grid is data before it is work. ``parse_grid`` turns ``KEY=v1,v2,...`` options into
named axes, ``grid_points`` into points, ``apply_point`` into a validated scenario per point; a
key that names no scenario field is refused before anything runs. ``run_point`` is the unit of
work: it replays one point into its own run file and returns one table row, failures included
(a grid point that fails is a row with ``error`` set, never the end of the sweep). ``run_sweep``
runs the points serially (``ray="none"``) or as Ray tasks (``"local"`` starts a local Ray and
shuts it down afterwards; an address joins a cluster; an already initialised Ray is used as it
is and left running).

A point is one small run file, so it runs on one core: its DuckDB gets one thread (a pool of
more only adds hand-offs on a file this size), and a sweep's parallelism is across points, one
Ray task of ``num_cpus=1`` each. A local Ray started here runs its workers at the driver's
priority: Ray's default (niceness 15) hands every other process on the machine the CPU first,
which on a shared machine made a local sweep slower than the same points run serially.

Grid keys are dotted scenario paths (``config.rollout.rollout_timeout_s``), a field name that is
unique among the config blocks (``rollout_timeout_s``), a top-level field (``seed``,
``horizon_s``), or ``snapshot_duration_s``: how long every snapshot attempt holds admission once
prepared (each attempt's ``commit_s``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rolloutscope.replay.errors import ReplayError
from rolloutscope.replay.scenario import Config, Scenario

SNAPSHOT_DURATION_KEY = "snapshot_duration_s"
TOP_LEVEL_KEYS = ("seed", "horizon_s")
# the DuckDB threads of one point's run file; see the module docstring
POINT_THREADS = 1
# Ray's own default is 15 (workers yield to everything else on the node)
LOCAL_WORKER_NICENESS = 0
OUTCOME_COLUMNS = ("committed", "timed_out", "stranded", "redispatched", "quarantined",
                   "snapshots_ok", "snapshots_failed")


class SweepError(ReplayError):
    """A sweep that cannot start: a bad grid option or an unknown key."""


class UnknownGridKeyError(SweepError):
    def __init__(self, key: str, known: Iterable[str]) -> None:
        self.key = key
        super().__init__(f"grid key {key!r} names no scenario field; use a dotted path such as "
                         f"config.rollout.rollout_timeout_s or one of: {', '.join(known)}")


# -- the grid -----------------------------------------------------------------------------------
def _config_leaves() -> dict[str, str]:
    """Field name -> dotted path, for names unique across the config blocks."""
    seen: dict[str, list[str]] = {}
    for block in dataclasses.fields(Config):
        for f in dataclasses.fields(block.default_factory()):  # type: ignore[misc]
            seen.setdefault(f.name, []).append(f"config.{block.name}.{f.name}")
    return {name: paths[0] for name, paths in seen.items() if len(paths) == 1}


def short_keys() -> tuple[str, ...]:
    return tuple(sorted([*_config_leaves(), *TOP_LEVEL_KEYS, SNAPSHOT_DURATION_KEY]))


def resolve_key(key: str, scenario: Scenario) -> str:
    """The dotted path a grid key sets (``snapshot_duration_s`` stays itself)."""
    if key == SNAPSHOT_DURATION_KEY or key in TOP_LEVEL_KEYS:
        return key
    leaves = _config_leaves()
    if key in leaves:
        return leaves[key]
    node: Any = scenario.to_dict()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UnknownGridKeyError(key, short_keys())
        node = node[part]
    if isinstance(node, dict | list):
        raise SweepError(f"grid key {key!r} names a block, not a value")
    return key


def _value(token: str) -> Any:
    try:
        return json.loads(token)
    except json.JSONDecodeError:
        return token  # an enum value such as "abort"


def parse_grid(options: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["rollout_timeout_s=120,180", ...]`` -> ``{"rollout_timeout_s": (120, 180), ...}``."""
    grid: dict[str, tuple[Any, ...]] = {}
    for text in options:
        key, sep, values = text.partition("=")
        key = key.strip()
        tokens = [t.strip() for t in values.split(",") if t.strip()]
        if not sep or not key or not tokens:
            raise SweepError(f"--grid {text!r}: expected KEY=v1,v2,...")
        if key in grid:
            raise SweepError(f"--grid {key} given twice")
        grid[key] = tuple(_value(t) for t in tokens)
    if not grid:
        raise SweepError("a sweep needs at least one --grid KEY=v1,v2,...")
    return grid


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination, the last key varying fastest."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def apply_point(scenario: Scenario, point: Mapping[str, Any]) -> Scenario:
    """The scenario with the point's values set; invalid combinations raise ``ScenarioError``."""
    doc = scenario.to_dict()
    for key, value in point.items():
        path = resolve_key(key, scenario)
        if path == SNAPSHOT_DURATION_KEY:
            for attempt in doc["control"]["snapshots"]:
                attempt["commit_s"] = value
            continue
        node = doc
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    labels = ",".join(f"{k}={v}" for k, v in point.items())
    doc["description"] = f"{scenario.name} at {labels}"
    return Scenario.from_dict(doc)


# -- one grid point -----------------------------------------------------------------------------
def run_point(scenario_doc: Mapping[str, Any], point: Mapping[str, Any], index: int,
              variants: Sequence[str], run_path: str) -> dict[str, Any]:
    """Replay one grid point into its own run file; one table row, failures as data."""
    from rolloutscope.store import RunStore
    from rolloutscope.replay import compare
    from rolloutscope.replay.run_scenario import replay_into_store

    row: dict[str, Any] = {"point": index, **point, "run_file": run_path, "error": None}
    started = time.perf_counter()
    try:
        scenario = apply_point(Scenario.from_dict(scenario_doc), point)
        run_id = f"{scenario.name}.p{index:03d}"
        with RunStore(run_path, threads=POINT_THREADS) as store:
            result = replay_into_store(scenario, store, variants=variants, run_id=run_id)
            counts = compare.outcome_counts(store, run_id)
            kinds = sorted(kind for (kind,) in store.query(
                "SELECT DISTINCT kind FROM incidents WHERE run_id = ?", [run_id]))
        row.update(counts.as_dict())
        row["incidents"] = ";".join(kinds)
        row["raised"] = result.raised
    except (ReplayError, ValueError, OSError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


# -- the sweep ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SweepResult:
    table: pd.DataFrame
    keys: tuple[str, ...]
    out_dir: Path
    wall_s: float
    executor: str

    @property
    def failures(self) -> pd.DataFrame:
        return self.table[self.table.error.notna()]


Progress = Callable[[dict[str, Any]], None]


def _serial(jobs: list[tuple[Any, ...]], progress: Progress) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        row = run_point(*job)
        progress(row)
        rows.append(row)
    return rows


def _on_ray(jobs: list[tuple[Any, ...]], progress: Progress) -> list[dict[str, Any]]:
    import ray
    from ray.exceptions import RayError

    task = ray.remote(num_cpus=1, max_retries=0)(run_point)
    # every job replays the same scenario: it goes into the object store once, not pickled
    # into each task
    doc = ray.put(jobs[0][0]) if jobs else None
    pending = {task.remote(doc, *job[1:]): job for job in jobs}
    rows = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        ref = done[0]
        job = pending.pop(ref)
        try:
            row = ray.get(ref)
        except RayError as exc:  # the task's worker died: the point failed, the sweep goes on
            _, point, index, _, run_path = job
            row = {"point": index, **point, "run_file": run_path,
                   "error": f"{type(exc).__name__}: {exc}"}
        progress(row)
        rows.append(row)
    return rows


LOCAL_RAY_SYSTEM_CONFIG = {"worker_niceness": LOCAL_WORKER_NICENESS}


def start_ray(address: str, *, num_cpus: int | None = None) -> bool:
    """Connect to or start Ray; True if this call started it (and so must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    if address == "local":
        # a new local instance, not one a `ray start` on this machine left running (Ray's
        # default without an address), which refuses num_cpus
        ray.init(address="local", include_dashboard=False, num_cpus=num_cpus,
                 log_to_driver=False, configure_logging=False,
                 _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    return True


def run_sweep(scenario: Scenario, grid: Mapping[str, Sequence[Any]], *,
              out_dir: str | Path, variants: Sequence[str] = (), ray: str = "local",
              num_cpus: int | None = None, progress: bool | Progress = False) -> SweepResult:
    """Replay ``scenario`` at every grid point; ``ray`` is ``none``, ``local`` or an address."""
    for key in grid:
        resolve_key(key, scenario)
    points = grid_points(grid)
    out = Path(out_dir)
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    doc = scenario.to_dict()
    jobs = [(doc, point, i, tuple(variants), str(runs / f"point-{i:03d}.duckdb"))
            for i, point in enumerate(points)]
    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=f"sweep {scenario.name}", unit="point",
                   file=sys.stderr)
        report: Progress = lambda row: bar.update(1)  # noqa: E731
    elif callable(progress):
        report = progress
    else:
        report = lambda row: None  # noqa: E731
    started = time.perf_counter()
    owned = False
    try:
        if ray == "none":
            rows = _serial(jobs, report)
        else:
            owned = start_ray(ray, num_cpus=num_cpus)
            started = time.perf_counter()  # the sweep, not the cluster's start
            rows = _on_ray(jobs, report)
    finally:
        wall = time.perf_counter() - started
        if bar is not None:
            bar.close()
        if owned:
            import ray as ray_module

            ray_module.shutdown()
    table = pd.DataFrame(rows).sort_values("point", ignore_index=True)
    for col in (*OUTCOME_COLUMNS, "incidents", "raised", "seconds"):
        if col not in table:
            table[col] = None
    table = table[["point", *grid, *OUTCOME_COLUMNS, "incidents", "raised", "error",
                   "seconds", "run_file"]]
    return SweepResult(table=table, keys=tuple(grid), out_dir=out, wall_s=round(wall, 3),
                       executor="serial" if ray == "none" else f"ray:{ray}")


def write_table(result: SweepResult) -> tuple[Path, Path]:
    csv = result.out_dir / "sweep.csv"
    parquet = result.out_dir / "sweep.parquet"
    result.table.to_csv(csv, index=False)
    result.table.astype({"incidents": "string", "raised": "string", "error": "string"}
                        ).to_parquet(parquet, index=False)
    return csv, parquet


# -- the heatmap --------------------------------------------------------------------------------
def heatmap_grid(result: SweepResult, metric: str) -> tuple[pd.DataFrame, str]:
    """``metric`` over the first two grid keys (y rows, x columns); further keys are folded
    by their maximum, and the returned note says so. A failed point is NaN."""
    if metric not in result.table:
        raise SweepError(f"unknown metric {metric!r}; one of {', '.join(OUTCOME_COLUMNS)}")
    keys = list(result.keys)
    x = keys[0]
    y = keys[1] if len(keys) > 1 else None
    table = result.table.assign(_v=pd.to_numeric(result.table[metric], errors="coerce"))
    note = ""
    if len(keys) > 2:
        note = f"max over {', '.join(keys[2:])}"
    if y is None:
        frame = table.groupby(x, sort=False)["_v"].max().to_frame().T
        frame.index = [metric]
    else:
        frame = table.pivot_table(index=y, columns=x, values="_v", aggfunc="max",
                                  dropna=False, sort=False)
    return frame, note


def heatmap_png(result: SweepResult, metric: str, path: str | Path) -> Path:
    """Draw the heatmap with Pillow: one cell per (x, y), white at 0, deepening red with the
    value, grey for failed points, the value written in each cell."""
    from PIL import Image, ImageDraw, ImageFont

    frame, note = heatmap_grid(result, metric)
    font = ImageFont.load_default()
    cell_w, cell_h, left, top = 140, 44, 150, 70
    width = left + cell_w * len(frame.columns) + 20
    height = top + cell_h * len(frame.index) + 40
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    keys = result.keys
    title = f"{metric} by {keys[0]}" + (f" (columns) and {keys[1]} (rows)" if len(keys) > 1
                                         else "") + (f"; {note}" if note else "")
    draw.text((10, 10), title, fill="black", font=font)
    peak = float(pd.to_numeric(frame.stack(), errors="coerce").max() or 0) or 1.0
    for j, col in enumerate(frame.columns):
        draw.text((left + j * cell_w + 8, top - 18), f"{keys[0]}={col}", fill="black", font=font)
    for i, row_label in enumerate(frame.index):
        label = f"{keys[1]}={row_label}" if len(keys) > 1 else str(row_label)
        draw.text((10, top + i * cell_h + cell_h // 2 - 6), label, fill="black", font=font)
        for j, col in enumerate(frame.columns):
            value = frame.loc[row_label, col]
            x0, y0 = left + j * cell_w, top + i * cell_h
            if pd.isna(value):
                fill, text = (190, 190, 190), "failed"
            else:
                share = max(0.0, min(1.0, float(value) / peak))
                fill = (255, int(255 * (1 - 0.75 * share)), int(255 * (1 - 0.85 * share)))
                text = f"{value:g}"
            draw.rectangle([x0, y0, x0 + cell_w - 2, y0 + cell_h - 2], fill=fill,
                           outline=(120, 120, 120))
            draw.text((x0 + 8, y0 + cell_h // 2 - 6), text, fill="black", font=font)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out, format="PNG")
    return out
