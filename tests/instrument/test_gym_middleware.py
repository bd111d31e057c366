"""The Gym checkpoint middleware on a real FastAPI server, over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from rolloutscope.collectors.instrument import GymCheckpointMiddleware
from rolloutscope.vocabulary import Attr, EventName, SpanName

from .gym_app import AGENT, CK, MODEL, SSE_CHUNKS, GymState, build_app

DEADLINE_TS = 1_800_000_300.0


class Server:
    """uvicorn on 127.0.0.1 in a thread; the socket listens before the server starts, so a
    client may connect at once (the kernel queues it) and no test waits for start-up."""

    def __init__(self, app) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def gym(run):
    state = GymState()
    middleware = GymCheckpointMiddleware(build_app(state), tracer=run.tracer,
                                         max_body_bytes=64 * 1024)
    server = Server(middleware)
    client = httpx.Client(base_url=server.url, timeout=10)
    try:
        yield state, middleware, client
    finally:
        state.stream_gate.set()
        client.close()
        server.close()


def _asgi_client(app) -> httpx.AsyncClient:
    """Straight into the ASGI app, where a socket adds nothing (and would turn an app exception
    into a 500 before the test could see it)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gym")


def _ops(run):
    return run.view("checkpoint_ops")


def _attrs(run, span_id: str) -> dict:
    assert run.inst.flush()
    rows = run.inst.store.query("SELECT attributes FROM spans WHERE span_id = ?", [span_id])
    return json.loads(rows[0][0])


class TestControlRoutes:
    def test_a_prepare_is_a_checkpoint_op_with_its_blockers_and_report_counts(self, run, gym):
        _, middleware, client = gym
        reply = client.post(CK + "/prepare", json={"checkpoint_id": "ck-7",
                                                   "deadline_ts": DEADLINE_TS})
        assert reply.status_code == 200 and reply.json()["report"]["blocker_count"] == 2
        op = _ops(run).iloc[0]
        assert (op.checkpoint_id, op.participant_kind, op.instance, op.op, op.outcome) == (
            "ck-7", "model", "policy-0", "prepare", "ok")
        assert op.blockers == 2 and json.loads(op.blocker_keys) == ["roll-1-a1", "roll-2"]
        assert (op.held, op.cut_failed, op.cut_skipped) == (1, 0, 1)
        attrs = _attrs(run, op.span_id)
        assert attrs[Attr.CK_DEADLINE_TS] == DEADLINE_TS and attrs[Attr.CK_READY] is False
        assert attrs[Attr.CK_COUNT_INFLIGHT] == 3 and attrs[Attr.CK_PHASE] == "preparing"
        assert attrs[Attr.HTTP_ROUTE] == CK + "/prepare" and attrs[Attr.HTTP_STATUS] == 200
        assert middleware.failures.count == 0

    def test_a_protocol_error_is_an_error_op_with_its_code_and_a_refused_event(self, run, gym):
        _, _, client = gym
        reply = client.post(CK + "/commit", json={
            "checkpoint_id": "ck-8", "deadline_ts": DEADLINE_TS, "checkpoint_dir": "/ck/8",
            "episode_ids": [{"rollout_id": "roll-1", "attempt": 1}], "stop": False})
        assert reply.status_code == 409
        op = _ops(run).iloc[0]
        assert (op.op, op.outcome, op.code, op.checkpoint_id) == (
            "commit", "error", "invalid_phase", "ck-8")
        assert _attrs(run, op.span_id)[Attr.CK_EPISODES] == 1
        refused = run.events(EventName.CK_REFUSED)
        assert list(refused.span_id) == [op.span_id]
        assert json.loads(refused.attributes.iloc[0]) == {
            Attr.CK_CODE: "invalid_phase",
            Attr.CK_DETAIL: "cannot commit ck-8 in phase preparing"}

    def test_status_polls_are_status_spans_outside_the_operations(self, run, gym):
        _, _, client = gym
        assert client.get(CK + "/status").json()["phase"] == "prepared"
        assert _ops(run).empty
        assert run.inst.flush()
        row = run.inst.store.query_df("SELECT * FROM spans WHERE name = ?",
                                      [SpanName.CK_STATUS]).iloc[0]
        assert (row.checkpoint_id, row.participant_kind) == ("ck-7", "model")
        attrs = json.loads(row.attributes)
        assert attrs[Attr.CK_READY] is True and attrs[Attr.CK_BLOCKER_COUNT] == 0
        assert attrs[Attr.CK_LEASE_EXPIRES_AT] == 1_800_000_900.0

    def test_the_first_generations_agent_and_model_routes_map_onto_the_same_ops(self, run, gym):
        _, _, client = gym
        assert client.post(AGENT + "/prepare", json={"checkpoint_id": "ck-1"}).status_code == 409
        assert client.get(AGENT + "/status", params={"checkpoint_id": "ck-1"}).status_code == 200
        assert client.post(MODEL + "/pause", json={"checkpoint_id": "ck-1"}).status_code == 200
        ops = _ops(run)
        assert list(zip(ops.participant_kind, ops.op, ops.outcome, ops.code.fillna("-"))) == [
            ("agent", "prepare", "error", "agent_prepare_incomplete"),
            ("model", "prepare", "ok", "-")]
        status = run.inst.store.query_df("SELECT * FROM spans WHERE name = ?",
                                         [SpanName.CK_STATUS]).iloc[0]
        attrs = json.loads(status.attributes)
        assert (status.checkpoint_id, status.participant_kind) == ("ck-1", "agent")
        assert attrs[Attr.CK_BLOCKER_KEYS] == ["roll-3", "roll-4-a2"]
        assert (attrs[Attr.CK_COUNT_RUNNING], attrs[Attr.CK_COUNT_PARKED_WITHOUT_BOUNDARY],
                attrs[Attr.CK_COUNT_COMPLETED_UNACKED], attrs[Attr.CK_READY]) == (2, 1, 1, False)

    def test_an_acknowledgement_records_each_receipt_it_accepted(self, run, gym):
        _, _, client = gym
        receipts = [{"rollout_id": "roll-5", "attempt_index": a, "execution_generation": 1,
                     "result_id": f"res-{a}", "result_digest": "ab" * 32} for a in (0, 1)]
        reply = client.post(AGENT + "/acknowledge-completed",
                            json={"schema_version": 1, "executions": receipts})
        assert reply.json() == {"acknowledged": 2}
        acks = run.events(EventName.AGENT_ACKNOWLEDGED)
        assert list(zip(acks.rollout_id, acks.attempt)) == [("roll-5", 0), ("roll-5-a1", 1)]

    def test_a_batch_past_the_sdks_event_limit_keeps_every_receipt(self, run, gym):
        _, _, client = gym
        receipts = [{"rollout_id": f"roll-{i}", "attempt_index": 0, "execution_generation": 1,
                     "result_id": f"res-{i}", "result_digest": "ab" * 32} for i in range(300)]
        client.post(AGENT + "/acknowledge-completed",
                    json={"schema_version": 1, "executions": receipts})
        acks = run.events(EventName.AGENT_ACKNOWLEDGED)
        assert sorted(acks.rollout_id) == sorted(f"roll-{i}" for i in range(300))
        assert acks.span_id.nunique() == 3  # 128 + 128 + 44

    def test_a_control_call_joins_the_coordinators_trace(self, run, gym):
        _, _, client = gym
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        client.post(CK + "/resume", json={"checkpoint_id": "ck-9", "deadline_ts": DEADLINE_TS},
                    headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
        op = _ops(run).iloc[0]
        assert (op.op, op.outcome, op.trace_id) == ("resume", "ok", trace_id)


class TestBodiesTheMiddlewareIgnores:
    def test_a_malformed_body_reaches_the_app_unchanged_and_is_ignored(self, run, gym):
        _, middleware, client = gym
        reply = client.post(CK + "/restore", content=b'{"checkpoint_id": "ck-1", ',
                            headers={"content-type": "application/json"})
        assert reply.json() == {"received_bytes": 26}
        op = _ops(run).iloc[0]
        assert (op.op, op.outcome, op.checkpoint_id) == ("restore", "error", None)
        assert middleware.failures.count == 0

    def test_a_body_over_the_cap_reaches_the_app_whole_and_is_not_read(self, run, gym):
        _, middleware, client = gym
        huge = json.dumps({"checkpoint_id": "ck-huge", "episode_ids": ["x" * 100] * 2000})
        reply = client.post(CK + "/restore", content=huge,
                            headers={"content-type": "application/json"})
        assert reply.json() == {"received_bytes": len(huge)} and len(huge) > 64 * 1024
        op = _ops(run).iloc[0]
        assert op.checkpoint_id is None and Attr.CK_EPISODES not in _attrs(run, op.span_id)
        assert middleware.failures.count == 0


class TestDataPlane:
    def test_calls_refused_while_admission_is_closed_are_refusal_events(self, run, gym):
        _, _, client = gym
        assert client.post("/ng-rollout/roll-1/v1/responses", json={}).status_code == 200
        client.post(CK + "/prepare", json={"checkpoint_id": "ck-7", "deadline_ts": DEADLINE_TS})
        refused = client.post("/ng-rollout/roll-2-a3/v1/responses", json={"input": "hi"})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "admission_closed"
        events = run.events(EventName.CK_REFUSED)
        events = events[events.span_name == SpanName.CK_REFUSED_REQUEST]
        assert list(zip(events.rollout_id, events.attempt)) == [("roll-2-a3", 3)]
        attrs = json.loads(events.attributes.iloc[0])
        assert (attrs[Attr.CK_CODE], attrs[Attr.CK_EPISODE]) == ("admission_closed", "roll-2-a3")
        span = _attrs(run, events.span_id.iloc[0])
        assert span[Attr.EPISODE_ROLLOUT_ID] == "roll-2" and span[Attr.HTTP_STATUS] == 409
        assert span[Attr.HTTP_ROUTE] == "/ng-rollout/{rollout_id}/v1/responses"
        assert span[Attr.CK_PARTICIPANT_KIND] == "model"  # learned from the prepare reply

    def test_a_retired_attempt_refused_with_stale_attempt_is_a_late_retired_attempt(self, run,
                                                                                     gym):
        _, _, client = gym
        run.inst.store.register_run("run-1", config={})
        client.post(CK + "/retire", json={"checkpoint_id": "ck-7", "deadline_ts": DEADLINE_TS,
                                          "episode_ids": [{"rollout_id": "roll-6",
                                                           "attempt": 1}]})
        for _ in range(2):
            assert client.post("/ng-rollout/roll-6-a1/v1/responses", json={}).status_code == 409
        incident = run.view("late_retired_attempt").iloc[0]
        assert (incident.subject, incident.severity) == ("roll-6-a1 try 1", "info")
        assert "2 request(s) of retired roll-6-a1 refused with stale_attempt" in incident.summary

    def test_an_error_with_a_code_outside_the_protocol_is_not_a_refusal(self, run, gym):
        _, _, client = gym
        assert client.post("/ng-rollout/roll-1/v1/chat/completions", json={}).status_code == 400
        assert run.events(EventName.CK_REFUSED).empty

    def test_a_streamed_refusal_is_read_across_its_chunks(self, run, gym):
        _, _, client = gym
        assert client.get("/ng-rollout/roll-8/v1/refused-stream").status_code == 409
        events = run.events(EventName.CK_REFUSED)
        assert list(zip(events.rollout_id, json.loads(events.attributes.iloc[0])[Attr.CK_CODE]
                        .split())) == [("roll-8", "checkpoint_parked")]


class TestStreaming:
    def test_a_stream_passes_through_byte_identical_and_its_first_byte_is_not_held(self, run,
                                                                                     gym):
        state, middleware, client = gym
        with client.stream("GET", "/ng-rollout/roll-1/v1/stream") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            chunks = response.iter_raw()
            first = next(chunks)  # arrives while the app is still waiting on the gate
            assert first == SSE_CHUNKS[0] and not state.stream_gate.is_set()
            state.stream_gate.set()
            rest = b"".join(chunks)
        assert first + rest == b"".join(SSE_CHUNKS)
        # a buffered stream would have reached us only once the app gave up on the gate (the
        # test opens it only after the first chunk): the app's second chunk waited for the test
        assert not state.stream_gate_timed_out
        assert middleware.failures.count == 0


class TestNeverRaisesIntoTheServer:
    def test_a_broken_tracer_leaves_every_reply_as_the_app_made_it(self, gym):
        class BrokenTracer:
            def start_span(self, *a, **kw):
                raise RuntimeError("tracer is gone")

        state, _, _ = gym
        app = GymCheckpointMiddleware(build_app(state), tracer=BrokenTracer())

        async def calls():
            async with _asgi_client(app) as client:
                reply = await client.post(CK + "/prepare", json={"checkpoint_id": "ck-7",
                                                                 "deadline_ts": DEADLINE_TS})
                refused = await client.post("/ng-rollout/roll-2/v1/responses", json={})
                return reply, refused

        reply, refused = asyncio.run(calls())
        assert reply.status_code == 200 and reply.json()["checkpoint_id"] == "ck-7"
        assert refused.status_code == 409
        assert app.failures.count == 2 and "tracer is gone" in app.failures.last

    def test_an_app_exception_reaches_the_server_unchanged_and_ends_the_op_as_an_error(
            self, run):
        from fastapi import FastAPI

        class ParticipantBug(Exception):
            pass

        bug = FastAPI()

        @bug.post(CK + "/forget")
        async def forget():
            raise ParticipantBug("forget while restored")

        bug.add_middleware(GymCheckpointMiddleware, tracer=run.tracer, participant_kind="agent")

        async def call():
            async with _asgi_client(bug) as client:
                await client.post(CK + "/forget", json={"checkpoint_id": "ck-3",
                                                        "rollout_ids": ["r"]})

        with pytest.raises(ParticipantBug, match="forget while restored"):
            asyncio.run(call())
        op = _ops(run).iloc[0]
        assert (op.op, op.participant_kind, op.outcome) == ("forget", "agent", "error")
        assert _attrs(run, op.span_id)[Attr.ERROR_TYPE] == "ParticipantBug"


class TestTheSpanIsMadeWhenTheOperationEnds:
    """The control span is built once, at the end, from the start time and parent read when the
    request arrived; an operation still running past the open-marker delay gets it earlier."""

    @staticmethod
    def _waiting_prepare():
        app = FastAPI()
        release = asyncio.Event()

        @app.post(CK + "/prepare")
        async def prepare(request: Request):
            body = await request.json()
            await release.wait()  # readiness arrives when the test says so
            return {"kind": "model", "instance": "policy-0", "phase": "prepared",
                    "checkpoint_id": body["checkpoint_id"],
                    "report": {"ready": True, "blockers": [], "blocker_count": 0}}

        return app, release

    def test_a_prepare_that_waits_is_open_while_it_waits_and_ends_with_its_reply(self, run):
        app, release = self._waiting_prepare()
        middleware = GymCheckpointMiddleware(app, tracer=run.tracer, open_marker_after_s=0.05)

        async def calls():
            async with _asgi_client(middleware) as client:
                pending = asyncio.create_task(client.post(
                    CK + "/prepare", json={"checkpoint_id": "ck-4", "deadline_ts": DEADLINE_TS}))
                for _ in range(400):  # until the marker is written, however busy the machine
                    await asyncio.sleep(0.025)
                    live = await asyncio.to_thread(_ops, run)
                    if len(live):
                        break
                release.set()
                return live, await pending

        live, reply = asyncio.run(calls())
        assert reply.status_code == 200
        assert list(zip(live.op, live.checkpoint_id)) == [("prepare", "ck-4")]
        assert live.is_open.all() and live.end_ns.isna().all() and live.outcome.isna().all()
        ended = _ops(run)
        assert list(zip(ended.op, ended.outcome, ended.is_open)) == [("prepare", "ok", False)]
        assert ended.span_id.iloc[0] == live.span_id.iloc[0]  # the same span, now ended
        assert ended.start_ns.iloc[0] == live.start_ns.iloc[0]
        attrs = _attrs(run, ended.span_id.iloc[0])
        assert attrs[Attr.CK_READY] is True and attrs[Attr.CK_DEADLINE_TS] == DEADLINE_TS
        assert (attrs[Attr.CK_PARTICIPANT_KIND], attrs[Attr.CK_INSTANCE]) == ("model", "policy-0")
        assert middleware.failures.count == 0

    def test_among_many_quick_operations_only_those_still_running_are_shown_open(self, run):
        app = FastAPI()
        release = asyncio.Event()

        @app.post(CK + "/prepare")
        async def prepare(request: Request):
            body = await request.json()
            if body["checkpoint_id"].startswith("slow"):
                await release.wait()
            return {"phase": "prepared", "checkpoint_id": body["checkpoint_id"]}

        middleware = GymCheckpointMiddleware(app, tracer=run.tracer, open_marker_after_s=0.05)

        async def calls():
            async with _asgi_client(middleware) as client:
                def post(ck):
                    return client.post(CK + "/prepare", json={"checkpoint_id": ck})

                quick = [await post(f"quick-{i}") for i in range(20)]
                slow = [asyncio.create_task(post(f"slow-{i}")) for i in range(2)]
                quick += [await post(f"quick-{i}") for i in range(20, 40)]
                for _ in range(400):  # until both markers are written, however busy
                    await asyncio.sleep(0.025)
                    live = await asyncio.to_thread(_ops, run)
                    if live.is_open.sum() == 2:
                        break
                release.set()
                return quick, await asyncio.gather(*slow), live

        quick, slow, live = asyncio.run(calls())
        assert all(r.status_code == 200 for r in quick + slow)
        assert sorted(live[live.is_open].checkpoint_id) == ["slow-0", "slow-1"]
        ended = _ops(run)
        assert len(ended) == 42 and not ended.is_open.any() and set(ended.outcome) == {"ok"}
        assert middleware.failures.count == 0

    def test_a_quick_operation_is_one_span_from_request_arrival_with_no_open_marker(self, run):
        app, release = self._waiting_prepare()
        release.set()
        wall = run.wall()
        middleware = GymCheckpointMiddleware(app, tracer=run.tracer, time_ns=wall)

        async def call():
            async with _asgi_client(middleware) as client:
                return await client.post(CK + "/prepare", json={"checkpoint_id": "ck-5"})

        assert asyncio.run(call()).status_code == 200
        assert run.inst.flush()
        rows = run.inst.store.query("SELECT count(*) FROM open_spans")
        assert rows == [(0,)]
        op = _ops(run).iloc[0]
        assert (op.op, op.outcome, op.start_ns, op.end_ns) == ("prepare", "ok", wall.t, wall.t)

    def test_the_span_is_a_child_of_the_span_current_when_the_request_arrived(self, run):
        app, release = self._waiting_prepare()
        release.set()
        middleware = GymCheckpointMiddleware(app, tracer=run.tracer)

        async def call():
            with run.tracer.start_as_current_span("outer server span") as outer:
                async with _asgi_client(middleware) as client:
                    await client.post(CK + "/prepare", json={"checkpoint_id": "ck-6"})
            return outer.get_span_context()

        outer = asyncio.run(call())
        op = _ops(run).iloc[0]
        assert op.trace_id == format(outer.trace_id, "032x")
        assert run.inst.flush()
        parent = run.inst.store.query("SELECT parent_span_id FROM spans WHERE span_id = ?",
                                      [op.span_id])
        assert parent == [(format(outer.span_id, "016x"),)]
