"""Commits grouped by size across senders: the writer waits for requests still arriving (up to
its time bound), commits at once when none is, and never past its row or byte bound; every
request is acknowledged only after the commit that holds its rows."""

from __future__ import annotations

import asyncio

from rolloutscope.collectors.otlp.counters import CollectorCounters
from rolloutscope.collectors.otlp.decode import PROTOBUF
from rolloutscope.collectors.otlp.limits import DecodeLimits
from rolloutscope.collectors.otlp.receiver import CommitQueue, OtlpReceiver
from rolloutscope.collectors.otlp.signals import Signal
from rolloutscope.store.rows import RowBatch
from rolloutscope.store.store import RunStore
from tests.collectors.otlp_fixtures import span_request

LONG_MS = 600_000  # a time bound no test waits for: what commits must be something else


def _batch(n: int) -> RowBatch:
    batch = RowBatch()
    for i in range(n):
        batch.add_row("logs", ts_ns=1 + i, body=f"line {i}")
    return batch


def test_a_lone_batch_commits_without_waiting_for_the_time_bound(tmp_path) -> None:
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=LONG_MS)
        writer.group_with(lambda: 0)
        assert writer.submit(_batch(10)).wait(timeout=60)
        assert writer.stats.commits == 1


def test_batches_from_senders_still_arriving_share_one_commit(tmp_path) -> None:
    arriving = [3]
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=LONG_MS)
        writer.group_with(lambda: arriving[0])
        commits = []
        for _ in range(3):
            commits.append(writer.submit(_batch(1_000)))
            arriving[0] -= 1
            writer.wake()
        assert all(c.wait(timeout=60) for c in commits)
        assert writer.stats.commits == 1
        assert writer.stats.committed_rows == 3_000
        assert store.raw_connection().execute("SELECT count(*) FROM logs").fetchall() == [(3000,)]


def test_the_byte_bound_ends_a_group_while_senders_still_arrive(tmp_path) -> None:
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=LONG_MS, max_bytes=1_000)
        writer.group_with(lambda: 1)  # someone is always arriving
        first = writer.submit(_batch(5), nbytes=600)
        second = writer.submit(_batch(5), nbytes=600)
        assert first.wait(timeout=60) and second.wait(timeout=60)
        third = writer.submit(_batch(5), nbytes=1_000)
        assert third.wait(timeout=60)
        assert writer.stats.commits == 2


def test_the_row_bound_ends_a_group_while_senders_still_arrive(tmp_path) -> None:
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=LONG_MS, max_rows=100)
        writer.group_with(lambda: 1)
        assert writer.submit(_batch(100)).wait(timeout=60)


def test_concurrent_requests_are_acknowledged_after_their_one_commit(tmp_path) -> None:
    async def main(store: RunStore) -> list:
        writer = store.writer(max_delay_ms=LONG_MS)
        queue = CommitQueue(writer, retry_after_s=1.0)
        receiver = OtlpReceiver(enqueue=queue.enqueue, limits=DecodeLimits(),
                                counters=CollectorCounters())
        receiver.on_arrived = writer.wake
        writer.group_with(lambda: receiver.arriving)
        arrivals = [receiver.arrive() for _ in range(4)]  # four senders' requests are in

        async def export(i: int):
            await asyncio.sleep(0.01 * i)  # read one after another
            body = span_request(250, run_id="grouped").SerializeToString()
            decoded = receiver.decode(Signal.TRACES, body, PROTOBUF)
            result = await receiver.commit(Signal.TRACES, decoded, arrival=arrivals[i])
            # acknowledged: the rows are in the file
            count = store.raw_connection().cursor().execute(
                "SELECT count(*) FROM spans WHERE run_id = 'grouped'").fetchall()[0][0]
            return result.accepted, count

        try:
            return await asyncio.gather(*(export(i) for i in range(4))), writer.stats.commits
        finally:
            queue.close()

    with RunStore(tmp_path / "run.duckdb") as store:
        results, commits = asyncio.run(main(store))
    assert results == [(250, 1_000)] * 4
    assert commits == 1


def test_a_flush_commits_what_is_gathered_without_waiting_for_the_time_bound(tmp_path) -> None:
    """The in-process exporter gathers for a second; ``force_flush`` must not wait for it."""
    with RunStore(tmp_path / "run.duckdb") as store:
        writer = store.writer(max_delay_ms=LONG_MS)
        commits = [writer.submit(_batch(10)) for _ in range(3)]
        assert writer.flush(timeout=60)
        assert all(c.done for c in commits) and writer.stats.committed_rows == 30
        assert store.query("SELECT count(*) FROM logs")[0][0] == 30
