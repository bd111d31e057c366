"""Bind and token rules, and the read-only query endpoint."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from urllib.parse import urlsplit

import grpc
import pandas as pd
import pytest

from rolloutscope.store.remote import (
    CollectorClient,
    CollectorUnavailableError,
    QueryError,
    QueryRefusedError,
    QueryTimeoutError,
    UnauthorizedError,
)
from rolloutscope.collectors.service import BindRefusedError, check_bind
from tests.collectors.conftest import serve_command, start_collector
from tests.collectors.otlp_fixtures import span_request

TOKEN = "s3cret-token-for-tests"


def _request(base: str, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> int:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("guarded")
    (directory / "token").write_text(TOKEN + "\n")
    c = start_collector(directory / "run.duckdb", "--token-file", str(directory / "token"),
                        token=TOKEN)
    yield c
    c.stop()


class TestBindRules:
    def test_loopback_addresses_need_no_token(self):
        for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
            check_bind(host, None)

    def test_a_non_loopback_address_without_a_token_is_refused(self):
        for host in ("0.0.0.0", "::", "10.1.2.3"):
            with pytest.raises(BindRefusedError, match="without a token"):
                check_bind(host, None)

    def test_a_non_loopback_address_with_a_token_is_allowed(self):
        check_bind("0.0.0.0", TOKEN)

    def test_serve_refuses_a_wildcard_bind_without_a_token_and_exits_2(self, tmp_path):
        done = subprocess.run(serve_command(tmp_path / "run.duckdb", "--host", "0.0.0.0"),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert "refusing to listen on non-loopback address '0.0.0.0' without a token" in (
            done.stderr)
        assert not (tmp_path / "run.duckdb").exists()

    def test_serve_refuses_an_empty_token_file(self, tmp_path):
        (tmp_path / "token").write_text("\n")
        done = subprocess.run([*serve_command(tmp_path / "run.duckdb"), "--token-file",
                               str(tmp_path / "token")], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2
        assert "is empty" in done.stderr


class TestBearerToken:
    ROUTES = [("POST", "/v1/traces"), ("POST", "/v1/metrics"), ("POST", "/v1/logs"),
              ("POST", "/v1/query"), ("GET", "/v1/query?sql=SELECT+1"), ("GET", "/metrics"),
              ("GET", "/no/such/route")]

    @pytest.mark.parametrize(("method", "path"), ROUTES)
    @pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN])
    def test_every_route_answers_401_without_the_right_token(self, guarded, method, path,
                                                             authorization):
        headers = {"Content-Type": "application/x-protobuf"}
        if authorization:
            headers["Authorization"] = authorization
        body = span_request(1).SerializeToString() if method == "POST" else None
        assert _request(guarded.http, method, path, body, headers) == 401

    def test_the_right_token_is_let_through_on_http_and_grpc(self, guarded):
        body = span_request(2, run_id="authorised").SerializeToString()
        headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"}
        assert _request(guarded.http, "POST", "/v1/traces", body, headers) == 200
        with grpc.insecure_channel(guarded.grpc) as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            export(body, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30)
            with pytest.raises(grpc.RpcError) as info:
                export(body, metadata=(("authorization", "Bearer wrong"),), timeout=30)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as info:
                export(body, timeout=30)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert guarded.client.query_records(
            "SELECT count(*) AS n FROM spans WHERE run_id = 'authorised'") == [{"n": 4}]

    def test_the_client_without_a_token_gets_an_unauthorized_error(self, guarded):
        with pytest.raises(UnauthorizedError):
            CollectorClient(guarded.http).query_df("SELECT 1")


REFUSED = [
    "INSERT INTO spans (span_id) VALUES ('x')",
    "UPDATE spans SET name = 'x'",
    "DELETE FROM spans",
    "TRUNCATE spans",
    "DROP TABLE spans",
    "CREATE TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "CREATE MACRO m() AS 1",
    "ALTER TABLE spans ADD COLUMN x INT",
    "ATTACH '/tmp/other.duckdb' AS other",
    "DETACH memory",
    "COPY spans TO '/tmp/spans.csv'",
    "EXPORT DATABASE '/tmp/exported'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA threads = 1",
    "SET threads = 1",
    "RESET threads",
    "USE memory",
    "CALL checkpoint()",
    "CHECKPOINT",
    "VACUUM",
    "BEGIN TRANSACTION",
    "SELECT * FROM checkpoint()",
    "SELECT 1; DROP TABLE spans",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM glob('/*')",
]


class TestQueryEndpoint:
    @pytest.mark.parametrize("sql", REFUSED)
    def test_a_writing_or_escaping_statement_is_refused(self, collector, sql):
        with pytest.raises(QueryRefusedError):
            collector.client.query_df(sql)
        assert collector.client.query_df("SELECT count(*) AS n FROM spans").shape == (1, 1)

    def test_a_file_path_in_from_is_not_read_as_a_file(self, collector):
        with pytest.raises(QueryError, match="Table with name /etc/passwd does not exist"):
            collector.client.query_df("SELECT * FROM '/etc/passwd'")

    def test_a_select_returns_a_dataframe_and_json_rows(self, collector):
        body = span_request(3, run_id="queried").SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}
        assert _request(collector.http, "POST", "/v1/traces", body, headers) == 200
        df = collector.client.query_df(
            "SELECT run_id, start_ns FROM spans WHERE run_id = 'queried' ORDER BY start_ns")
        assert isinstance(df, pd.DataFrame)
        assert list(df.columns) == ["run_id", "start_ns"]
        assert len(df) == 3 and df["start_ns"].is_monotonic_increasing
        assert collector.client.query_records(
            "SELECT count(*) AS n FROM spans WHERE run_id = 'queried'") == [{"n": 3}]

    def test_views_are_queryable(self, collector):
        assert "rollout_id" in collector.client.query_df("SELECT * FROM rollout_attempts LIMIT 0")

    def test_sql_that_fails_is_a_query_error_naming_the_cause(self, collector):
        with pytest.raises(QueryError, match="no_such_table"):
            collector.client.query_df("SELECT * FROM no_such_table")

    def test_a_query_past_its_time_limit_is_interrupted(self, tmp_path):
        c = start_collector(tmp_path / "run.duckdb", "--query-timeout-s", "0.5")
        try:
            with pytest.raises(QueryTimeoutError, match="time limit of 0.5 s"):
                c.client.query_df("SELECT count(*) FROM range(100000000000) a")
            assert c.client.query_records("SELECT 42 AS n") == [{"n": 42}]
        finally:
            assert c.stop() == 0

    def test_params_bind_the_placeholders_and_no_value_is_spliced_into_sql(self, collector):
        body = span_request(2, run_id="bound").SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}
        assert _request(collector.http, "POST", "/v1/traces", body, headers) == 200
        sql = "SELECT count(*) AS n FROM spans WHERE run_id = ?"
        assert collector.client.query_df(sql, ["bound"])["n"].tolist() == [2]
        # a value that would be SQL if spliced is only a value
        assert collector.client.query_df(sql, ["x' OR '1'='1"])["n"].tolist() == [0]
        assert collector.client.query_df(
            "SELECT count(*) AS n FROM spans WHERE run_id IN (SELECT unnest(?))",
            [["bound", "other"]])["n"].tolist() == [2]
        assert collector.client.query_df(  # named: $run twice, one value
            "SELECT count(*) AS n FROM spans WHERE run_id = $run OR $run IS NULL",
            {"run": "bound"})["n"].tolist() == [2]

    @pytest.mark.parametrize(("params", "named"), [
        ("a", "params must be a JSON list or object, got str"),
        ([{"a": 1}], "params[0] is a dict"),
        (["ok", [1, {"b": 2}]], "params[1] is a list"),
        ({"run": {"b": 2}}, "params['run'] is a dict"),
    ])
    def test_params_that_are_not_scalars_are_refused_by_name(self, collector, params, named):
        with pytest.raises(QueryError, match=re.escape(named)) as caught:
            collector.client._post("/v1/query", {"sql": "SELECT ?", "params": params})
        assert caught.value.status == 400 and caught.value.problem == "bad_params"

    def test_the_stores_own_table_macros_are_allowed_and_others_are_not(self, collector):
        macros = set(collector.client.query_arrow(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_type = 'table_macro' AND NOT internal").column(0).to_pylist())
        assert "model_calls_of" in macros
        got = collector.client.query_df("SELECT count(*) AS n FROM model_calls_of(?, NULL)",
                                        ["no-such-run"])
        assert got["n"].tolist() == [0]
        with pytest.raises(QueryRefusedError, match="table function read_parquet"):
            collector.client.query_df("SELECT * FROM read_parquet('/tmp/x.parquet')")

    def test_a_readers_shorter_time_limit_stops_the_query_at_the_collector(self, collector):
        with pytest.raises(QueryTimeoutError, match="time limit of 0.5 s") as caught:
            collector.client.query_arrow("SELECT count(*) FROM range(100000000000) a",
                                         timeout_s=0.5)
        assert caught.value.status == 408  # the collector's answer, not the socket's
        assert collector.client.query_records("SELECT 42 AS n") == [{"n": 42}]

    def test_the_client_names_an_unreachable_collector(self):
        with pytest.raises(CollectorUnavailableError, match="no collector at"):
            CollectorClient("http://127.0.0.1:9", timeout_s=5).query_df("SELECT 1")


def test_the_serve_command_is_registered():
    done = subprocess.run([sys.executable, "-m", "rolloutscope", "serve", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "--token-file" in done.stdout and "--otlp-grpc-port" in done.stdout
