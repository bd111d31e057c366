"""Every built-in scenario replays to the same spans, byte for byte, as the committed table says.

``span_digests.json`` pins ``run_digest`` (every span's ids, times, status and attributes, and
every event) and a digest of the watchdog's gauges for each built-in scenario with its own
fixes, and for each other switch setting that changes what it emits: a variant added, a fix
taken away, all variants on. A refactor of the simulation must leave the table alone; a change
that means to alter what a replay emits rewrites it, on purpose, with

    python -m tests.replay.test_span_digests --write

which also prints the settings it left out because they emit what another pinned one does.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from rolloutscope.replay.replay_capture import run_digest
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.replay.scenarios import get, names
from rolloutscope.replay.variants import Variant
from rolloutscope.store import RunStore

TABLE = Path(__file__).with_name("span_digests.json")
RUN_ID = "pinned"


def _settings(name: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(case, variants added, fixes taken away) for every single switch and all of them."""
    fixes = set(get(name).fixes)
    out = [(name, (), ())]
    for v in Variant:
        if v in fixes:
            out.append((f"{name} -{v.value}", (), (v.value,)))
        else:
            out.append((f"{name} +{v.value}", (v.value,), ()))
    out.append((f"{name} +all", tuple(v.value for v in Variant), ()))
    return out


def _digests(path: Path, name: str, added: tuple[str, ...], removed: tuple[str, ...]
             ) -> dict[str, object]:
    with RunStore(path) as store:
        result = replay_into_store(get(name), store, variants=added, without=removed,
                                   run_id=RUN_ID)
        h = hashlib.sha256()
        for row in store.query("SELECT service, name, ts_ns, step, value FROM metrics "
                               "WHERE run_id = ? ORDER BY ts_ns, service, name", [RUN_ID]):
            h.update(repr(row).encode())
        return {"spans": run_digest(store, RUN_ID), "gauges": h.hexdigest()[:16],
                "span_count": result.spans, "raised": result.raised}


def _pinned() -> dict[str, dict[str, object]]:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def _setting(case: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    name = case.split(" ")[0]
    for c, added, removed in _settings(name):
        if c == case:
            return name, added, removed
    raise KeyError(case)


def test_the_table_pins_every_built_in_scenario():
    pinned = {case.split(" ")[0] for case in _pinned()}
    assert pinned == set(names())
    assert all(name in _pinned() for name in names())  # each with its own fixes


# read when collected; a missing table fails the test above rather than the collection
@pytest.mark.parametrize("case", sorted(_pinned()) if TABLE.exists() else [])
def test_the_scenario_emits_exactly_its_pinned_spans(tmp_path, case):
    name, added, removed = _setting(case)
    assert _digests(tmp_path / "run.duckdb", name, added, removed) == _pinned()[case]


def write_table(tmp: Path) -> None:
    table: dict[str, dict[str, object]] = {}
    for name in names():
        seen: dict[str, str] = {}
        for case, added, removed in _settings(name):
            path = tmp / f"{len(table)}-{len(seen)}.duckdb"
            got = _digests(path, name, added, removed)
            path.unlink()
            first = seen.setdefault(str(got["spans"]) + str(got["gauges"]), case)
            if first == case:
                table[case] = got
            else:
                print(f"left out {case}: emits what {first} does")
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(table)} pinned settings to {TABLE}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python -m {__spec__.name if __spec__ else __file__} --write")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_table(Path(d))
