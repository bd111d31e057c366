"""The watchdog's parts: the dedupe rule, delivery to a real local webhook that fails first, a
command that fails, and the flags ``rolloutscope serve`` checks. The incidents are a built-in
scenario's, replayed into a real run file."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rolloutscope.cli import main
from rolloutscope.collectors.watchdog import IncidentBook, Watchdog, WatchdogConfig
from rolloutscope.replay import scenarios
from rolloutscope.replay.run_scenario import replay_into_store
from rolloutscope.store import RunStore


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    """hung-weight-sync on the virtual clock: a quarantine (which ends) and a stall (open)."""
    path = tmp_path_factory.mktemp("watch") / "run.duckdb"
    with RunStore(path) as store:
        replay_into_store(scenarios.get("hung-weight-sync"), store, run_id="r")
    return path


def _row(**kw) -> dict:
    return {"run_id": "r", "kind": "stall", "subject": "controller", "start_ns": 10,
            "end_ns": None, "summary": "idle 400 s", **kw}


class TestTheDedupeRule:
    def test_an_incident_is_delivered_once_however_often_it_is_seen(self):
        book = IncidentBook()
        assert [e for e, _ in book.news([_row()])] == ["opened"]
        assert book.news([_row(summary="idle 500 s"), _row()]) == []

    def test_its_end_is_delivered_once_as_resolved(self):
        book = IncidentBook()
        book.news([_row()])
        assert [e for e, _ in book.news([_row(end_ns=99)])] == ["resolved"]
        assert book.news([_row(end_ns=99)]) == []

    def test_one_first_seen_ended_is_delivered_opened_then_resolved(self):
        assert [e for e, _ in IncidentBook().news([_row(end_ns=99)])] == ["opened", "resolved"]

    def test_another_start_or_subject_is_another_incident(self):
        book = IncidentBook()
        book.news([_row()])
        assert len(book.news([_row(start_ns=11), _row(subject="shard 1")])) == 2

    def test_the_window_reaches_back_to_the_oldest_incident_not_yet_resolved(self):
        book = IncidentBook()
        book.news([_row(start_ns=5), _row(start_ns=7, kind="quarantine", end_ns=8)])
        assert book.unresolved_since() == 5


class _FailsFirst(BaseHTTPRequestHandler):
    """Answers 500 to the first POST, 200 to every later one; keeps what it was sent."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            status = 500 if not self.server.seen else 200
            self.server.seen.append((status, json.loads(body)))
            if status == 200:
                self.server.ok.release()
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FailsFirst)
    server.seen, server.lock, server.ok = [], threading.Lock(), threading.Semaphore(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_a_webhook_that_answers_500_first_is_retried_and_gets_each_notice_once(run_file, hook):
    url = f"http://127.0.0.1:{hook.server_address[1]}/page"
    with RunStore(run_file, read_only=True) as store:
        dog = Watchdog(store, WatchdogConfig(notify_url=url, backoff_s=0.05))
        notices = dog.evaluate()
        assert dog.evaluate() == []  # seen again: nothing new
        for _ in notices:
            assert hook.ok.acquire(timeout=60), hook.seen
        dog.stop()
    assert {n["kind"] for n in notices} == {"quarantine", "stall"}
    assert [s for s, _ in hook.seen] == [500] + [200] * len(notices)
    assert hook.seen[0][1] == hook.seen[1][1]  # the refused notice, sent again
    delivered = [(b["event"], b["kind"], b["start_ns"]) for s, b in hook.seen if s == 200]
    assert sorted(delivered) == sorted((n["event"], n["kind"], n["start_ns"]) for n in notices)
    stall = next(b for s, b in hook.seen if s == 200 and b["kind"] == "stall")
    assert stall["event"] == "opened" and "weight sync" in stall["waiting_on"]["answer"]
    assert dog.channels[0].delivered == len(notices) and dog.channels[0].failed == 0


def test_only_the_kinds_asked_for_are_delivered(run_file, tmp_path):
    out = tmp_path / "out.jsonl"
    with RunStore(run_file, read_only=True) as store:
        dog = Watchdog(store, WatchdogConfig(on_incident=f"cat >> {out}; echo >> {out}",
                                             kinds=frozenset({"stall"})))
        notices = dog.evaluate()
        dog.stop()
    assert [n["kind"] for n in notices] == ["stall"]
    lines = [line for line in out.read_text().splitlines() if line]
    assert [json.loads(line)["kind"] for line in lines] == ["stall"]


def test_a_pass_over_a_store_that_received_nothing_is_skipped(run_file):
    with RunStore(run_file, read_only=True) as store:
        dog = Watchdog(store, WatchdogConfig(on_incident="true"))
        assert dog.changed() and not dog.changed()
        dog.stop()


def test_a_command_that_fails_is_counted_and_the_watchdog_carries_on(run_file):
    with RunStore(run_file, read_only=True) as store:
        dog = Watchdog(store, WatchdogConfig(on_incident="exit 3"))
        notices = dog.evaluate()
        dog.stop()
        assert dog.evaluate() == []  # a failed delivery is not tried again by the next pass
    assert dog.channels[0].failed == len(notices) > 0
    assert dog.channels[0].delivered == 0


class TestServeFlags:
    def test_an_unknown_kind_is_refused_naming_the_known_ones(self, tmp_path, capsys):
        assert main(["serve", "--db", str(tmp_path / "x.duckdb"), "--on-incident", "true",
                     "--notify-kinds", "stall,stal"]) == 2
        err = capsys.readouterr().err
        assert "unknown incident kind(s) stal" in err and "quarantine" in err

    def test_kinds_without_a_channel_are_refused(self, tmp_path, capsys):
        assert main(["serve", "--db", str(tmp_path / "x.duckdb"), "--notify-kinds",
                     "stall"]) == 2
        assert "needs --on-incident" in capsys.readouterr().err

    def test_a_notify_url_must_be_http(self, tmp_path, capsys):
        assert main(["serve", "--db", str(tmp_path / "x.duckdb"), "--notify-url",
                     "ftp://x"]) == 2
        assert "http:// or https://" in capsys.readouterr().err
