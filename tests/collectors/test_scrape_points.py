"""The scraper's pure parts: what a page of Prometheus text becomes (``points``), which URLs it
takes (``engine_target``), how a failing engine backs off (``next_backoff``), and one read of
an engine whose answers go wrong (``EngineScraper.scrape_once`` with a given fetch), then
``rolloutscope serve`` refusing bad ``--scrape`` flags with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rolloutscope.collectors.scrape import (
    EngineScraper,
    ScrapeConfig,
    ScrapeTargetError,
    engine_target,
    next_backoff,
    points,
)
from rolloutscope.store.errors import QueueFullError
from tests.engine_metrics import EngineModel, saturated

TARGET = engine_target("http://10.0.0.9:8000/metrics")


def _rows(text: str) -> list[dict]:
    return points(text, target=TARGET, ts_ns=5).arrow("metrics").to_pylist()


class TestPoints:
    def test_a_vllm_page_is_one_row_per_series_under_the_declared_names(self):
        rows = {r["name"]: r for r in _rows(EngineModel(saturated).step().decode())}
        assert set(rows) == {
            "vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:num_preemptions",
            "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
            "vllm:request_inference_time_seconds", "vllm:time_to_first_token_seconds"}
        assert rows["vllm:num_requests_waiting"]["value"] == 1.0
        assert rows["vllm:num_preemptions"]["kind"] == "sum"  # from its _total sample
        queued = rows["vllm:request_queue_time_seconds"]
        assert (queued["kind"], queued["count"], queued["sum"]) == ("histogram", 2, 16.0)
        for row in rows.values():
            assert row["ts_ns"] == 5 and row["service"] == "10.0.0.9:8000"
            assert json.loads(row["attributes"]) == {"engine": "0",
                                                     "model_name": "Qwen/Qwen3-0.6B"}
            assert json.loads(row["resource"]) == {
                "url.full": "http://10.0.0.9:8000/metrics", "server.address": "10.0.0.9",
                "server.port": 8000}
            assert row["run_id"] is None  # the writer's default run

    def test_untyped_summary_and_timestamped_samples(self):
        rows = _rows('up 1\n# TYPE rpc summary\nrpc{quantile="0.5"} 0.2\nrpc_count 3\n'
                     'rpc_sum 0.9\nlate_gauge 7 1700000000000\n')
        by = {r["name"]: r for r in rows}
        assert by["up"]["kind"] == "gauge" and by["up"]["value"] == 1.0
        assert (by["rpc"]["kind"], by["rpc"]["count"], by["rpc"]["sum"]) == ("summary", 3, 0.9)
        assert by["late_gauge"]["ts_ns"] == 1_700_000_000 * 10**9  # its own timestamp (ms)

    @pytest.mark.parametrize("text", ["<html><body>502</body></html>\n",
                                      "vllm:num_requests_running{engine=0} 1\n",
                                      "ok 1\nbroken line here\n"])
    def test_text_that_is_not_prometheus_keeps_nothing(self, text):
        from rolloutscope.collectors.scrape import GarbageError

        with pytest.raises(GarbageError, match="not Prometheus text"):
            points(text, target=TARGET, ts_ns=5)


class TestTargets:
    def test_a_url_without_a_path_reads_metrics(self):
        t = engine_target("http://Engine-7:8000")
        assert (t.url, t.authority) == ("http://Engine-7:8000/metrics", "engine-7:8000")
        assert engine_target("https://h/x/metrics").authority == "h:443"
        assert engine_target("http://[::1]:9/metrics").authority == "[::1]:9"

    @pytest.mark.parametrize("url, what", [("ftp://h/metrics", "http:// or https://"),
                                           ("10.0.0.1:8000/metrics", "http:// or https://"),
                                           ("http://:8000/metrics", "names no host"),
                                           ("http://h:port/metrics", "scrape URL")])
    def test_a_url_that_cannot_be_read_is_refused_by_name(self, url, what):
        with pytest.raises(ScrapeTargetError, match=what) as err:
            engine_target(url)
        assert url in str(err.value)

    def test_the_same_engine_twice_is_refused(self):
        with pytest.raises(ValueError, match="given twice"):
            ScrapeConfig(targets=(TARGET, engine_target("http://10.0.0.9:8000")))


class TestBackoff:
    def test_a_failing_engine_waits_twice_as_long_each_time_up_to_the_bound(self):
        cfg = ScrapeConfig(targets=(TARGET,), interval_s=2.0, max_backoff_s=10.0)
        waits, b = [], 0.0
        for _ in range(5):
            b = next_backoff(cfg, b, ok=False)
            waits.append(b)
        assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
        assert next_backoff(cfg, b, ok=True) == 0.0  # back to the interval


class TestOneRead:
    def _scraper(self, answers, submit):
        def fetch(url, timeout_s):
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        scraper = EngineScraper(ScrapeConfig(targets=(TARGET,)), submit=submit, fetch=fetch,
                                clock=lambda: 42)
        return scraper, scraper._engines[0]

    def test_failures_garbage_and_a_full_queue_are_counted_and_the_good_reads_submitted(self):
        submitted = []

        def submit(batch):
            if len(submitted) == 1:
                submitted.append(None)
                raise QueueFullError(batch.rows, 10, 10)
            submitted.append(batch)

        page = EngineModel(saturated).step()
        scraper, engine = self._scraper(
            [ConnectionRefusedError("refused"), b"\xff\xfe", b"<html>", page, page, page],
            submit)
        assert [scraper.scrape_once(engine) for _ in range(6)] == \
            [False, False, False, True, True, True]
        st = scraper.stats()[TARGET.url]
        assert (st["failures"], st["garbage"], st["dropped"], st["scrapes"]) == (1, 2, 1, 2)
        assert st["consecutive_failures"] == 0 and st["last_ok_ns"] == 42
        assert st["points"] == 2 * submitted[0].rows


    def test_an_unexpected_error_is_counted_and_the_engine_read_again(self):
        import threading

        page = EngineModel(saturated).step()
        calls, again = [], threading.Event()

        def fetch(url, timeout_s):
            calls.append(url)
            if len(calls) >= 3:
                again.set()
            return page

        def submit(batch):
            raise RuntimeError("a bug in the writer")

        scraper = EngineScraper(ScrapeConfig(targets=(TARGET,), interval_s=0.01,
                                             max_backoff_s=0.01), submit=submit, fetch=fetch)
        scraper.start()
        try:
            assert again.wait(60), "the engine was not read again"
        finally:
            scraper.stop()
        st = scraper.stats()[TARGET.url]
        assert st["failures"] >= 2 and "a bug in the writer" in st["last_error"]


class TestServeFlags:
    @pytest.mark.parametrize("flags, message", [
        (["--scrape", "ftp://h/metrics"], "must start with http:// or https://"),
        (["--scrape-interval-s", "2"], "--scrape-interval-s needs --scrape URL"),
        (["--scrape", "http://h:1/metrics", "--scrape-interval-s", "0"],
         "interval_s must be positive")])
    def test_serve_refuses_bad_scrape_flags_saying_what_was_wrong(self, tmp_path, flags,
                                                                  message):
        out = subprocess.run([sys.executable, "-m", "rolloutscope", "serve", "--db",
                              str(tmp_path / "r.duckdb"), "--no-dashboard", *flags],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
        assert not (tmp_path / "r.duckdb").exists()  # refused before anything was opened
