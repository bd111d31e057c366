"""A verdict only where it is earned: for every built-in scenario, the window of every incident
replayed as captured reproduces each incident in it, and replayed with each fix variant keeps
every incident that variant does not declare it changes (``Variant.changes``).

The captures come from the session's ``capture_path`` (one run per scenario, shared with the
other replay-runner tests); windows that several incidents share are replayed once, into one
store per scenario.
"""

from __future__ import annotations

from collections import Counter

import pytest

from rolloutscope.replay.fixes import FIXES
from rolloutscope.replay.replay_capture import ReplayOptions, capture_from_store, replay_run
from rolloutscope.replay.scenarios import get, names
from rolloutscope.replay.variants import Variant
from rolloutscope.store import RunStore

# the built-in scenarios that capture no incident at all (checked, so a scenario that gains or
# loses its incidents is not passed over in silence)
INCIDENT_FREE = {"healthy-baseline", "scale-16k"}


def _windows(path):
    """One capture per distinct window, with the incident ids whose window it is."""
    with RunStore(path, read_only=True) as store:
        ids = [r[0] for r in store.query("SELECT incident_id FROM incidents ORDER BY start_ns, "
                                         "incident_id")]
    windows: dict[tuple[float, float], tuple[object, list[str]]] = {}
    for incident_id in ids:
        capture = capture_from_store(path, incident_id=incident_id)
        windows.setdefault(capture.extraction.window, (capture, []))[1].append(incident_id)
    return ids, windows


@pytest.mark.parametrize("name", names())
def test_every_incident_window_reproduces_as_captured_and_with_each_fix_keeps_the_rest(
        name, capture_path, tmp_path):
    path = capture_path(name)
    ids, windows = _windows(path)
    if not ids:
        assert name in INCIDENT_FREE, f"{name} captured no incident"
        return
    assert name not in INCIDENT_FREE, f"{name} captured incidents {ids}"
    had = {str(v) for v in get(name).fixes}
    problems = []
    with RunStore(tmp_path / "windows.duckdb") as out:
        for (ws, we), (capture, incident_ids) in windows.items():
            where = f"{name} window {ws:g}-{we:g} s (incidents {', '.join(incident_ids)})"
            assert capture.incidents, f"{where}: the window holds its own incident"
            plain = replay_run(capture, out=out, fail_on_divergence=False,
                               options=ReplayOptions(check_determinism=False))
            if plain.vanished:  # (a)
                problems.append(f"{where}: as captured, {plain.vanished} did not reproduce")
            for variant in Variant:
                if variant.value in had:
                    continue  # the captured system has it: on is the replay above
                kept = Counter(k for k in capture.incidents if k[0] not in variant.changes)
                if not kept:
                    continue  # every incident here is one the variant may change
                fixed = replay_run(capture, out=out, variants=[variant.value],
                                   fail_on_divergence=False,
                                   options=ReplayOptions(check_determinism=False))
                lost = sorted((kept - Counter(fixed.reproduced)).elements())
                if lost:  # (b)
                    problems.append(f"{where}: with {variant.value}, {lost} not reproduced "
                                    f"although the variant does not change them")
    assert not problems, "\n".join(problems)


def test_each_fix_declares_the_kinds_it_is_the_fix_for():
    for kind, variants in FIXES.items():
        for variant in variants:
            assert kind in variant.changes, (kind, variant)
