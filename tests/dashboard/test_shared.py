"""The dashboard server's shared reads (``dashboard.shared``): the cache, the read time limit,
admission and the settings, on real DuckDB stores."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from rolloutscope.dashboard import shared as sh
from rolloutscope.dashboard.app import build_app
from rolloutscope.dashboard.datastore import VIEWS, DataStore
from tests.dashboard.conftest import RUN


def frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"a": range(n), "b": [float(i) for i in range(n)]})


class TestFrameCache:
    def test_one_read_per_key_however_many_ask_at_once(self):
        cache = sh.FrameCache(64 * sh.MiB)
        calls, gate = [], threading.Event()

        def read():
            calls.append(1)
            gate.wait(10)
            return frame(10)

        got = []
        threads = [threading.Thread(target=lambda: got.append(cache.get("k", read)))
                   for _ in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while cache.stats.waits < 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()
        for t in threads:
            t.join(10)
        assert len(calls) == 1 and len(got) == 8
        assert all(g is got[0] for g in got)  # the same frame, not copies
        assert cache.get("k", read) is got[0] and len(calls) == 1

    def test_a_failed_read_fails_its_waiters_and_is_not_kept(self):
        cache = sh.FrameCache(sh.MiB)

        def boom():
            raise sh.ReadTimeout("view x", 1.0)

        with pytest.raises(sh.ReadTimeout):
            cache.get("k", boom)
        assert len(cache) == 0
        assert cache.get("k", lambda: frame(3)).shape == (3, 2)

    def test_the_byte_budget_holds_least_recently_used_out(self):
        one = sh.value_bytes(frame(10_000))
        cache = sh.FrameCache(int(one * 2.5))
        for key in "abc":
            cache.get(key, lambda: frame(10_000))
        assert len(cache) == 2 and cache.bytes <= cache.budget_bytes
        assert cache.peek("a") is None and cache.peek("c") is not None
        big = sh.FrameCache(one // 2)
        assert len(big.get("x", lambda: frame(10_000))) == 10_000  # handed over, not kept
        assert len(big) == 0 and big.stats.too_large == 1


class TestReadTimeLimit:
    def test_a_read_that_cannot_finish_is_interrupted_within_its_limit(self, p1_store):
        started = time.monotonic()
        with pytest.raises(sh.ReadTimeout, match="did not finish within 0.5 s"):
            # billions of rows: it cannot finish in any test's time
            sh.timed_frame(p1_store, "SELECT sum(i * i) AS s FROM range(100000000000) t(i)",
                           [], 0.5, what="a sum")
        assert time.monotonic() - started < 30
        # the store reads on afterwards
        assert len(sh.timed_frame(p1_store, "SELECT 1 AS one", [], 5.0)) == 1

    def test_a_live_tick_that_runs_out_of_time_is_a_problem_on_the_page(self, p1_store,
                                                                         monkeypatch):
        data = DataStore(p1_store, live=True, shared=sh.SharedReads())
        monkeypatch.setattr(sh, "timed_frame", _always_late)
        monkeypatch.setattr("rolloutscope.dashboard.datastore.timed_frame", _always_late)
        version = data.version
        data.tick()  # no exception reaches the periodic callback
        assert any("did not finish" in p for p in data.problems)
        assert data.version > version


def _always_late(store, sql, params, timeout_s, **kw):
    raise sh.ReadTimeout("view x", timeout_s)


class TestSessionsShare:
    def test_a_second_datastore_holds_the_first_ones_frames(self, p1_store):
        # a lake may change under its reader: its reads are shared for live_ttl_s (here one
        # version for good: a 1 h version changed between the two reads at 60 min uptime)
        reads = sh.SharedReads(sh.DashboardLimits(live_ttl_s=1e12))
        a = DataStore(p1_store, shared=reads)
        b = DataStore(p1_store, shared=reads)
        for name in VIEWS:
            if len(a.frames[name]):
                assert b.frames[name] is a.frames[name], name
        assert reads.cache.stats.hits > 0
        lanes = a.rollout_lanes()
        assert b.rollout_lanes() == lanes
        # selections stay the session's own
        b.rollout_filter = "failed"
        assert a.rollout_filter != "failed" and b.rollout_lanes() != lanes

    def test_without_the_server_a_datastore_reads_for_itself(self, p1_store):
        a, b = DataStore(p1_store), DataStore(p1_store)
        assert a.run_id == b.run_id == RUN
        assert a.frames["rollout_attempts"] is not b.frames["rollout_attempts"]

    def test_a_session_builds_only_the_tabs_it_shows(self, p1_store):
        app = build_app(p1_store, live=False, shared=sh.SharedReads())
        lazy = app.dashboard.lazy
        assert [v.built for v in lazy] == [True] + [False] * (len(lazy) - 1)
        app[1].active = 4
        assert lazy[4].built and lazy[4].view.shown and not lazy[0].view.shown


class TestAdmission:
    def test_sessions_past_the_limit_are_refused(self):
        adm = sh.Admission(sh.DashboardLimits(max_sessions=2), rss=lambda: 0)
        assert adm.refusal() is None and adm.enter()
        adm.built()
        assert adm.enter()
        adm.built()
        assert "2 sessions are open" in adm.refusal()
        adm.leave()
        assert adm.refusal() is None

    def test_memory_near_the_bound_and_a_long_wait_are_refused(self):
        lim = sh.DashboardLimits(memory_mib=1024)
        assert "of its 1,024 MiB bound" in sh.Admission(lim, rss=lambda: 900 * sh.MiB).refusal()
        assert sh.Admission(lim, rss=lambda: 500 * sh.MiB).refusal() is None
        assert "waited" in sh.Admission(lim, rss=lambda: 0).refusal(waited_s=60)

    def test_the_settings_come_from_flags_then_the_environment(self):
        env = {sh.MEMORY_ENV: "2048", sh.SESSIONS_ENV: "5", sh.READ_TIMEOUT_ENV: "7.5"}
        lim = sh.DashboardLimits.from_env(env)
        assert (lim.memory_mib, lim.max_sessions, lim.read_timeout_s) == (2048, 5, 7.5)
        assert lim.cache_bytes == 1024 * sh.MiB and lim.duckdb_mib == 512
        assert sh.DashboardLimits.from_env(env, memory_mib=3000).memory_mib == 3000
        with pytest.raises(ValueError):
            sh.DashboardLimits.from_env({sh.MEMORY_ENV: "lots"})
        with pytest.raises(ValueError):
            sh.DashboardLimits(memory_mib=10)


def test_the_cli_takes_the_bound(capsys):
    from rolloutscope.cli import main

    with pytest.raises(SystemExit):
        main(["dashboard", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--memory-mib" in out and sh.MEMORY_ENV in out and "--read-timeout-s" in out


def test_a_changing_stores_older_reads_are_dropped_when_its_version_moves():
    class Live:  # a store others write: read_only False
        read_only, is_lake = False, False

    reads = sh.SharedReads(sh.DashboardLimits(live_ttl_s=0.05))
    v1 = reads.data_version(Live())
    reads.cache.get(("read", 1, "q", v1), lambda: frame(10))
    reads.cache.get(("derived", 1, ("x",), "run", ("read", 1, "q", v1)), lambda: frame(5))
    reads.cache.get(("read", 1, "fixed", ("fixed",)), lambda: frame(3))
    time.sleep(0.12)
    v2 = reads.data_version(Live())
    assert v2 != v1
    assert len(reads.cache) == 1 and reads.cache.peek(("read", 1, "fixed", ("fixed",))) is not None
    assert sh.shareable(("read", 1)) and sh.shareable(("empty", "x")) and not sh.shareable(7)
