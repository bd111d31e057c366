"""The query endpoint cannot stall collection: a query's execution, fetch and serialisation run
off the event loop, under one deadline, so OTLP is answered while a large result renders, and a
result that takes longer to render than the time limit is a 408 within it."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.collectors import hostile
from tests.collectors.conftest import start_collector
from tests.collectors.otlp_fixtures import span_request

LIMIT_S = 2


@pytest.fixture(scope="module")
def roomy(tmp_path_factory):
    """Results up to 4 GiB and 1e9 rows, so that only the time limit bounds them. DuckDB's
    memory is hostile.HOSTILE_ARGS' (the RSS ceiling assumes it): a result is made in a
    temporary table first (collectors/query.py), which spills to disk past it."""
    c = start_collector(tmp_path_factory.mktemp("roomy") / "run.duckdb",
                        "--query-timeout-s", str(LIMIT_S), "--query-max-result-mib", "4096",
                        "--query-max-rows", "1000000000", "--store-memory-mib", "256")
    hostile.accept_the_before_data(c)
    yield c
    c.stop()


def _query(c, sql: str, fmt: str) -> tuple[int, bytes]:
    status, body, _ = hostile.post(c.http, "/v1/query",
                                   json.dumps({"sql": sql, "format": fmt}).encode(), hostile.JS)
    return status, body


def test_a_result_that_renders_past_the_time_limit_is_408_within_it(roomy):
    # 60 million rows of JSON take many times the limit to render on any machine (about 19 s on
    # a 2-core machine at rest)
    started = time.monotonic()
    status, body = _query(roomy, "SELECT range AS n FROM range(60000000)", "json")
    took = time.monotonic() - started
    assert status == 408
    assert f"query exceeded its time limit of {LIMIT_S} s" in json.loads(body)["error"]["message"]
    assert took < LIMIT_S + 20  # answered at the deadline's next check, not when done
    hostile.assert_sound(roomy)


def test_otlp_is_answered_while_a_large_result_renders(roomy):
    answered_during: list[int] = []
    done = threading.Event()
    outcome: dict = {}

    def run_query() -> None:
        outcome["status"], _ = _query(roomy, "SELECT range AS n, range::VARCHAR AS s "
                                             "FROM range(60000000)", "json")
        done.set()

    query = threading.Thread(target=run_query)
    query.start()
    body = span_request(1, run_id="during-a-query").SerializeToString()
    sent = 0
    while not done.is_set():
        status, _, _ = hostile.post(roomy.http, "/v1/traces", body)
        sent += 1
        if not done.is_set():
            answered_during.append(status)
    query.join(60)
    assert outcome["status"] == 408  # it ran its whole time limit
    assert len(answered_during) >= 3 and set(answered_during) == {200}
    assert roomy.client.query_records(
        "SELECT count(*) AS n FROM spans WHERE run_id = 'during-a-query'") == [{"n": sent}]
    hostile.assert_sound(roomy)
