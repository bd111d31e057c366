"""A FastAPI Gym server speaking both checkpoint protocol generations, for tests.

The protocol: docs/domain/checkpoint-protocol.md.

Replies are the protocol's shapes; which reply a route gives is set per test through ``state``.
"""

from __future__ import annotations

import asyncio
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

CK = "/ng-control/v1/checkpoint"
AGENT = "/ng-control/v1/agent-checkpoint"
MODEL = "/ng-control/v1/model-admission"
SSE_CHUNKS = (b": keep-alive\n\n", b'data: {"delta": "caf\xc3\xa9 \\u00e9"}\n\n',
              b"data: " + bytes(range(256)) + b"\n\n", b"data: [DONE]\n\n")


def error(code: str, detail: str, status: int = 409) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "detail": detail}}, status_code=status)


def status_reply(checkpoint_id: str | None, phase: str, *, ready: bool,
                 blockers: list[str]) -> dict:
    return {
        "kind": "model", "instance": "policy-0", "phase": phase, "checkpoint_id": checkpoint_id,
        "lease_expires_at": 1_800_000_900.0, "retired_rollouts": {},
        "report": {"ready": ready, "blockers": blockers, "blocker_count": len(blockers),
                   "counts": {"inflight": 3, "held": 1, "cut": 2, "cut_failed": 0,
                              "cut_skipped": 1},
                   "restarts": []},
    }


class GymState:
    def __init__(self) -> None:
        self.admission_open = True
        self.retired: dict[str, int] = {}
        self.stream_gate = threading.Event()  # the second chunk waits on this
        self.stream_gate_timed_out = False  # the second chunk went without the gate
        self.sent: list[bytes] = []


def build_app(state: GymState) -> FastAPI:
    app = FastAPI()

    # -- second generation (draft stack): one participant, kind model -------------------------
    @app.post(CK + "/prepare")
    async def prepare(request: Request):
        body = await request.json()
        state.admission_open = False
        return status_reply(body["checkpoint_id"], "preparing", ready=False,
                            blockers=["roll-1-a1", "roll-2"])

    @app.post(CK + "/commit")
    async def commit(request: Request):
        body = await request.json()
        return error("invalid_phase", f"cannot commit {body['checkpoint_id']} in phase preparing")

    @app.post(CK + "/resume")
    async def resume(request: Request):
        state.admission_open = True
        return {"phase": "idle", "idempotent": False}

    @app.post(CK + "/retire")
    async def retire(request: Request):
        body = await request.json()
        for episode in body["episode_ids"]:
            state.retired[episode["rollout_id"]] = episode["attempt"]
        return {"phase": "idle", "checkpoint_id": None}

    @app.get(CK + "/status")
    async def status():
        return status_reply("ck-7", "prepared", ready=True, blockers=[])

    @app.post(CK + "/restore")
    async def restore(request: Request):
        # reads the raw body itself: a malformed or huge body reaches the app unchanged
        raw = await request.body()
        return JSONResponse({"received_bytes": len(raw)}, status_code=400)

    # -- first generation: agent and model-admission routes -----------------------------------
    @app.post(AGENT + "/prepare")
    async def agent_prepare(request: Request):
        await request.json()
        return error("agent_prepare_incomplete", "agent prepare is incomplete: running=2, "
                     "parked_without_boundary=1, completed_unacknowledged=1")

    @app.get(AGENT + "/status")
    async def agent_status(checkpoint_id: str):
        return {"state": "preparing", "ready_to_commit": False, "running": 2, "parked": 3,
                "parked_with_boundary": 2, "parked_without_boundary": 1,
                "completed_unacknowledged": 1, "acknowledged_completed": 4, "active": 6,
                "blocking_attempts": [{"rollout_id": "roll-3", "attempt_index": 0},
                                      {"rollout_id": "roll-4", "attempt_index": 2}],
                "completed_unacknowledged_attempts": [], "selected_boundaries": [],
                "executions": []}

    @app.post(AGENT + "/acknowledge-completed")
    async def acknowledge(request: Request):
        body = await request.json()
        return {"acknowledged": len(body["executions"])}

    @app.post(MODEL + "/pause")
    async def pause(request: Request):
        await request.json()
        state.admission_open = False
        return {"state": "paused", "inflight": 0}

    # -- the rollout data plane ---------------------------------------------------------------
    @app.post("/ng-rollout/{capture_key}/v1/responses")
    async def responses(capture_key: str):
        rollout, _, attempt = capture_key.rpartition("-a")
        if rollout and attempt.isdigit() and state.retired.get(rollout, -1) >= int(attempt):
            return error("stale_attempt", f"attempt {attempt} of {rollout} was retired")
        if not state.admission_open:
            return error("admission_closed", "checkpoint in progress")
        return {"id": "resp-1", "output": [{"type": "message", "content": "ok"}]}

    @app.post("/ng-rollout/{capture_key}/v1/chat/completions")
    async def too_long(capture_key: str):
        # an OpenAI-style error: its code is not a checkpoint refusal
        return JSONResponse({"error": {"message": "This model's maximum context length is 4096",
                                       "code": "context_length_exceeded"}}, status_code=400)

    @app.get("/ng-rollout/{capture_key}/v1/stream")
    async def stream(capture_key: str):
        async def chunks():
            yield SSE_CHUNKS[0]
            if not await asyncio.to_thread(state.stream_gate.wait, 10):
                state.stream_gate_timed_out = True
            for chunk in SSE_CHUNKS[1:]:
                yield chunk

        return StreamingResponse(chunks(), media_type="text/event-stream")

    @app.get("/ng-rollout/{capture_key}/v1/refused-stream")
    async def refused_stream(capture_key: str):
        async def chunks():
            yield b'{"error": {"code": "checkpoint_parked", '
            yield b'"detail": "admission is closed"}}'

        return StreamingResponse(chunks(), status_code=409, media_type="application/json")

    @app.get("/health")
    async def health():
        return Response(b"ok")

    return app
