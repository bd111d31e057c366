"""An OpenAI-compatible model for a live Gym deployment in the tests, on loopback.

Run as ``python openai_stub.py`` (rolloutscope's own interpreter: aiohttp is a dependency); it
binds 127.0.0.1 on a free port, prints ``stub listening PORT`` and serves until SIGTERM or
``--max-seconds``. It plays the policy of Gym's ``example_single_tool_call`` task: the first
turn asks for the ``get_weather`` tool, the turn after the tool's answer replies in text. It
answers ``/v1/responses``, ``/v1/chat/completions`` and ``/v1/models`` (Gym's readiness probe),
and ``/_stats`` counts the calls.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import sys
import time

from aiohttp import web

_ids = itertools.count(1)
CALLS = {"responses": 0, "chat": 0}
USAGE = {"input_tokens": 42, "output_tokens": 7, "total_tokens": 49}


def _asks_for_tool(items) -> bool:
    return not any(isinstance(i, dict) and i.get("type") == "function_call_output"
                   for i in items or [])


async def responses(request: web.Request) -> web.Response:
    body = await request.json()
    CALLS["responses"] += 1
    n = next(_ids)
    if _asks_for_tool(body.get("input")):
        output = [{"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                   "name": "get_weather", "arguments": json.dumps({"city": "Paris"}),
                   "status": "completed"}]
    else:
        output = [{"type": "message", "id": f"msg_{n}", "role": "assistant",
                   "status": "completed",
                   "content": [{"type": "output_text", "text": "Bring a jacket.",
                                "annotations": []}]}]
    return web.json_response({
        "id": f"resp_{n}", "object": "response", "created_at": int(time.time()),
        "model": body.get("model", "stub-model"), "status": "completed", "output": output,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
        "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "usage": {**USAGE, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}})


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    CALLS["chat"] += 1
    n = next(_ids)
    tool_answered = any(isinstance(m, dict) and m.get("role") == "tool"
                        for m in body.get("messages") or [])
    message = ({"role": "assistant", "content": "Bring a jacket."} if tool_answered else
               {"role": "assistant", "content": None, "tool_calls": [{
                   "id": f"call_{n}", "type": "function",
                   "function": {"name": "get_weather",
                                "arguments": json.dumps({"city": "Paris"})}}]})
    return web.json_response({
        "id": f"chatcmpl_{n}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "stub-model"),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "stop" if tool_answered else "tool_calls"}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}})


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [
        {"id": "stub-model", "object": "model", "owned_by": "tests"}]})


async def stats(request: web.Request) -> web.Response:
    return web.json_response(CALLS)


async def serve(max_seconds: float) -> None:
    app = web.Application()
    for path, handler in (("/v1/models", models), ("/models", models), ("/_stats", stats)):
        app.router.add_get(path, handler)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"stub listening {site._server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), max_seconds)
    except TimeoutError:
        pass
    finally:
        await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-seconds", type=float, default=600.0)
    asyncio.run(serve(parser.parse_args().max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
