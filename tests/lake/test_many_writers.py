"""Many ``rolloutscope serve`` processes writing one lake: kill -9 of one loses nothing it
acknowledged, every row is attributable to the writer that committed it, and a reader in
another process sees every commit made before its query began."""

from __future__ import annotations

import signal
import time

from rolloutscope.store import RunStore
from rolloutscope.store.lake import writer_rows
from tests.collectors.conftest import acked, start_collector, start_sender, wait_for_acks

BATCH = 100
DEADLINE_S = 120.0



def test_three_writers_share_a_lake_and_kill_9_of_one_loses_nothing_acknowledged(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    names = ["a", "b", "c"]
    collectors = [start_collector(lake, "--commit-max-delay-ms", "20") for _ in names]
    senders, acks = [], []
    for name, c in zip(names, collectors, strict=True):
        acks.append(tmp_path / f"{name}.acks")
        senders.append(start_sender("batches", "http-protobuf", c.http, name, "100000",
                                    str(BATCH), str(acks[-1])))
    try:
        wait_for_acks(acks, at_least=4, deadline_s=DEADLINE_S)
        collectors[0].process.send_signal(signal.SIGKILL)
        collectors[0].process.wait(30)
        wait_for_acks(acks[1:], at_least=len(acked(acks[1])) + 3, deadline_s=DEADLINE_S)
        for c in collectors[1:]:
            assert c.stop(signal.SIGTERM) == 0
    finally:
        for p in senders:
            p.kill()
            p.wait(30)
        for c in collectors:
            c.stop(signal.SIGKILL)
    with RunStore(lake, read_only=True) as store:
        stored = {(r, b): n for r, b, n in store.query(
            "SELECT run_id, prompt_idx, count(*) FROM spans GROUP BY ALL")}
        by_writer = dict(writer_rows(store.raw_connection()))
        # each sender talked to one collector: its spans carry one writer's snapshots
        authors = store.query(
            "SELECT t.run_id, count(DISTINCT s.author) FROM spans t "
            "JOIN ducklake_snapshots('lake') s USING (snapshot_id) GROUP BY 1")
    for name, ack in zip(names, acks, strict=True):
        acked_batches = acked(ack)
        assert len(acked_batches) >= 4
        missing = [b for b in acked_batches if stored.get((name, b)) != BATCH]
        assert not missing, f"{name}: acknowledged batches missing or partial: {missing[:10]}"
    assert len(by_writer) == 3, by_writer  # three writers, three authors
    assert dict(authors) == {name: 1 for name in names}
    pids = {c.process.pid for c in collectors}
    assert {int(author.split(":")[1]) for author in by_writer} == pids


def test_a_reader_in_another_process_sees_every_commit_made_before_its_query(tmp_path):
    lake = f"ducklake:sqlite:{tmp_path / 'catalog.sqlite'}"
    collectors = [start_collector(lake, "--commit-max-delay-ms", "20") for _ in range(2)]
    acks = [tmp_path / "x.acks", tmp_path / "y.acks"]
    senders = [start_sender("batches", "http-protobuf", c.http, name, "100000", str(BATCH),
                            str(ack)) for c, name, ack in zip(collectors, "xy", acks,
                                                              strict=True)]
    # this test process is the other process: a read-only open while both collectors write
    reads = 0
    try:
        wait_for_acks(acks, at_least=1, deadline_s=DEADLINE_S)
        with RunStore(lake, read_only=True) as reader:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and reads < 8:
                acked_by = {name: set(acked(ack)) for name, ack in zip("xy", acks, strict=True)}
                seen: dict[str, set[int]] = {"x": set(), "y": set()}
                for run_id, batch, n in reader.query(
                        "SELECT run_id, prompt_idx, count(*) FROM spans GROUP BY ALL"):
                    if n == BATCH:
                        seen[run_id].add(batch)
                for name in "xy":
                    assert acked_by[name] <= seen[name], (
                        f"{name}: acknowledged before the read, not seen by it: "
                        f"{sorted(acked_by[name] - seen[name])[:10]}")
                # the views read the same snapshot machinery
                assert reader.query("SELECT count(*) FROM all_spans")[0][0] >= sum(
                    len(a) for a in acked_by.values()) * BATCH
                reads += 1
    finally:
        for p in senders:
            p.kill()
            p.wait(30)
        for c in collectors:
            c.stop()
    assert reads >= 2


def test_writers_that_open_a_new_lake_together_all_open_it(tmp_path):
    # collectors placed on every node at once each find the catalog file another has just
    # created, before DuckLake has made the lake in it: each must still take it for new
    import subprocess
    import sys

    code = ("import sys; from rolloutscope.store import RunStore\n"
            "with RunStore(sys.argv[1]) as s: print(s.query('SELECT count(*) FROM spans')[0][0])")
    for round_ in range(2):
        lake = f"ducklake:sqlite:{tmp_path / str(round_) / 'catalog.sqlite'}"
        procs = [subprocess.Popen([sys.executable, "-c", code, lake], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, outs, strict=True)] \
            == [(0, "0")] * 4, [err[-800:] for _, err in outs]


def test_a_lost_race_for_a_new_lakes_inlined_rows_is_retried_and_other_errors_are_not():
    # seen once in CI among four writers making one lake: one read a table's inlined rows while
    # another wrote the catalog, before the table holding them was made
    import duckdb

    from rolloutscope.store import lake

    lost = duckdb.CatalogException(
        'Catalog Error: Table with name ducklake_inlined_data_22_1 does not exist!\n'
        'LINE 3: FROM "__ducklake_metadata_lake"."main".ducklake_inlined_data_22_1')
    assert lake.as_conflict(lost) is not None
    for other in (duckdb.CatalogException("Catalog Error: Table with name spanz does not exist!"),
                  duckdb.BinderException("Binder Error: column ducklake_inlined_data not found")):
        assert lake.as_conflict(other) is None, other
