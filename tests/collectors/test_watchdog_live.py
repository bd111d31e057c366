"""The watchdog beside a real collector: a built-in scenario replayed live over OTLP into
``rolloutscope serve --on-incident CMD --notify-url URL``, the command a small script that
appends each notice to a file, the webhook a local server that never answers."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from rolloutscope.replay import scenarios
from rolloutscope.store import RunStore
from rolloutscope.replay.run_live import ReplayStopped, replay_live

from .conftest import start_collector

SPEED = 20.0  # the stall is due 737 s into the run: 37 s of wall time
INTERVAL_S = 1.0
# the collector's commit delay (--commit-max-delay-ms, 250 ms by default) and the replay's own
# batching (its BatchSpanProcessor exports every 200 ms; probe ticks every 0.5 s of wall time
# carry the run's clock forward) are well under a second; the rest is room for a busy machine
SLACK_S = 15.0
APPEND = """import json, sys
notice = json.loads(sys.stdin.read())
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(notice) + "\\n")
"""


class _Hanging(BaseHTTPRequestHandler):
    """Reads the POST, then never answers until the test ends."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.got.append(time.time_ns())
        self.server.release.wait(120)

    def log_message(self, *args):  # quiet
        pass


def _notices(path: Path) -> list[dict]:
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def test_a_hung_weight_sync_replayed_live_pages_the_command_once_naming_the_sync(tmp_path):
    scenario = scenarios.get("hung-weight-sync")
    out = tmp_path / "notices.jsonl"
    script = tmp_path / "append.py"
    script.write_text(APPEND)
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Hanging)
    hook.got, hook.release = [], threading.Event()
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    collector = start_collector(
        tmp_path / "run.duckdb", "--on-incident", f"{sys.executable} {script} {out}",
        "--notify-url", f"http://127.0.0.1:{hook.server_address[1]}/hook",
        "--watch-interval-s", str(INTERVAL_S))
    stop = threading.Event()
    replay = threading.Thread(target=_replay, args=(scenario, collector.http, stop))
    try:
        replay.start()
        deadline = time.monotonic() + 150.0
        spans_at_hang = None
        while not [n for n in _notices(out) if n["kind"] == "stall"]:
            assert time.monotonic() < deadline, f"no stall notice: {_notices(out)}"
            if spans_at_hang is None and hook.got:
                spans_at_hang = collector.count()
            time.sleep(0.2)  # a file another process appends to; no event to await
        replay.join(60)  # to the scenario's horizon, the webhook hung all along
        time.sleep(4 * INTERVAL_S)  # later passes see the same stall again
        spans_at_end = collector.count()
        horizon_s = collector.client.query_records(
            "SELECT (max(coalesce(end_ns, start_ns)) - min(start_ns)) / 1e9 AS s "
            "FROM all_spans WHERE run_id = 'live'")[0]["s"]
    finally:
        stop.set()
        replay.join(60)
        hook.release.set()
        collector.stop()
        hook.shutdown()
    notices = _notices(out)
    stalls = [n for n in notices if n["kind"] == "stall"]
    assert [n["event"] for n in stalls] == ["opened"], stalls
    keys = [(n["event"], n["run_id"], n["kind"], n["subject"], n["start_ns"]) for n in notices]
    assert len(keys) == len(set(keys)), keys  # each incident once per event
    stall = stalls[0]
    waiting = stall["waiting_on"]
    assert "weight sync" in waiting["answer"], waiting["answer"]
    assert {g["resource"]["kind"] for g in waiting["groups"]} == {"weight_sync"}
    # the stall's threshold passed in the run's clock at start + stall_timeout_s (a run sent
    # over OTLP records no config, so the detectors use the documented default); at SPEED x
    # the replay reached it (start_s + stall_timeout_s) / SPEED wall seconds after its origin
    with RunStore(tmp_path / "run.duckdb", read_only=True) as store:
        stall_timeout_s = store.query("SELECT stall_timeout_s FROM run_thresholds "
                                      "WHERE run_id = 'live'")[0][0]
    origin_ns = stall["start_ns"] - stall["start_s"] * 1e9
    due_ns = origin_ns + (stall["start_s"] + stall_timeout_s) / SPEED * 1e9
    delay_s = (stall["detected_ns"] - due_ns) / 1e9
    print(f"stall notice {delay_s:.2f} s after its threshold (interval {INTERVAL_S} s)")
    assert -1.0 < delay_s < INTERVAL_S + SLACK_S
    # the webhook hung from its first notice on, and spans kept being stored to the end
    assert hook.got and spans_at_hang, "the webhook was never called during the replay"
    assert spans_at_end > spans_at_hang
    assert horizon_s >= scenario.horizon_s - 10


def _replay(scenario, endpoint: str, stop: threading.Event) -> None:
    try:
        replay_live(scenario, endpoint=endpoint, speed=SPEED, run_id="live", stop=stop)
    except ReplayStopped:
        pass
