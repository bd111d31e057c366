"""``openai``: every policy call served by an OpenAI-compatible server (vLLM, SGLang,
``transformers serve``, ...), one base URL per generation shard.

Requests go to ``POST {url}/completions`` with a text prompt of the captured prompt's length (see
``prompt_text``) and ``max_tokens`` set to the captured completion's length. The forced-length
fields ``ignore_eos`` and ``min_tokens`` (vLLM, SGLang) are sent when the server takes them:
``start`` asks each endpoint once and leaves them out where the server refuses unknown fields,
and the run then records how many completions came back short. The calls run concurrently on
one asyncio loop in a thread of their own (aiohttp), so hundreds can be in flight.

A shard the scenario kills is made unreachable by the driver: its calls fail at once with
``EngineUnreachable``, as a refused connection would; a server that is down, refuses or resets
gives the same error, an error status gives ``EngineHTTPError`` and a request past
``request_timeout_s`` gives ``EngineTimeout``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import aiohttp

from rolloutscope.replay.backends.base import (
    BackendError,
    BackendInfo,
    EngineHTTPError,
    EngineTimeout,
    EngineUnreachable,
    GenerationError,
    GenerationRequest,
    GenerationResult,
    OnFirstToken,
    OnResult,
    prompt_text,
)

FORCED_LENGTH_FIELDS = ("ignore_eos", "min_tokens")


class _Handle:
    __slots__ = ("future", "loop")

    def __init__(self, future: Future[None], loop: asyncio.AbstractEventLoop) -> None:
        self.future = future
        self.loop = loop

    def cancel(self) -> None:
        self.future.cancel()  # cancels the coroutine on its loop; the connection is dropped


class OpenAIBackend:
    name = "openai"

    def __init__(self, urls: Sequence[str], *, model: str | None = None,
                 request_timeout_s: float | None = None, connect_timeout_s: float = 5.0,
                 max_connections: int = 1024) -> None:
        if not urls:
            raise BackendError("the openai backend needs --backend-url (one per shard)")
        self.urls = tuple(u.rstrip("/") for u in urls)
        self.model = model
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_connections = max_connections
        self.forced_length = dict.fromkeys(self.urls, True)
        self._unreachable: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> BackendInfo:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="rolloutscope-openai",
                                        daemon=True)
        self._thread.start()
        info = asyncio.run_coroutine_threadsafe(self._start(), loop).result()
        return info

    async def _start(self) -> BackendInfo:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_connections),
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s,
                                          sock_connect=self.connect_timeout_s))
        versions: dict[str, str] = {}
        for url in self.urls:
            model = await self._model_of(url)
            if self.model is None:
                self.model = model
            self.forced_length[url] = await self._takes_forced_length(url)
            versions[f"model@{url}"] = model or ""
            versions[f"forced_length@{url}"] = "yes" if self.forced_length[url] else \
                "no (the server refuses ignore_eos/min_tokens)"
        return BackendInfo(backend=self.name, device="remote", model=self.model,
                           endpoints=self.urls,
                           engine={"aiohttp": aiohttp.__version__, **versions})

    async def _model_of(self, url: str) -> str | None:
        assert self._session is not None
        try:
            async with self._session.get(f"{url}/models") as resp:
                if resp.status != 200:
                    raise BackendError(f"{url}/models answered HTTP {resp.status}")
                doc = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise BackendError(f"cannot reach the OpenAI-compatible server at {url}: "
                               f"{type(exc).__name__}: {exc}") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        return str(data[0].get("id")) if data else None

    async def _takes_forced_length(self, url: str) -> bool:
        assert self._session is not None
        body = {"model": self.model, "prompt": "the", "max_tokens": 1, "min_tokens": 1,
                "ignore_eos": True}
        async with self._session.post(f"{url}/completions", json=body) as resp:
            if resp.status == 200:
                return True
            text = await resp.text()
        if resp.status in (400, 422) and any(f in text for f in FORCED_LENGTH_FIELDS):
            return False
        raise BackendError(f"{url}/completions answered HTTP {resp.status}: {text[:200]}")

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._session is not None:
            asyncio.run_coroutine_threadsafe(self._session.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join()
        loop.close()
        self._loop = None

    # -- calls --------------------------------------------------------------------------------
    def set_reachable(self, shard: int, reachable: bool) -> None:
        if reachable:
            self._unreachable.discard(shard)
        else:
            self._unreachable.add(shard)

    def url_for(self, shard: int | None) -> str:
        idx = shard or 0
        if idx >= len(self.urls):
            raise BackendError(f"shard {idx} has no --backend-url ({len(self.urls)} given; "
                               f"give one per shard)")
        return self.urls[idx]

    def submit(self, request: GenerationRequest, on_first_token: OnFirstToken,
               on_result: OnResult) -> _Handle:
        assert self._loop is not None, "start() first"
        url = self.url_for(request.shard)
        unreachable = (request.shard or 0) in self._unreachable
        future = asyncio.run_coroutine_threadsafe(
            self._call(url, request, unreachable, on_first_token, on_result), self._loop)
        return _Handle(future, self._loop)

    async def _call(self, url: str, request: GenerationRequest, unreachable: bool,
                    on_first_token: OnFirstToken, on_result: OnResult) -> None:
        t0 = time.monotonic()
        if unreachable:
            on_result(GenerationResult(
                request=request, latency_s=0.0,
                error=EngineUnreachable(f"{url}: the shard's engine was killed by the replay")))
            return
        body: dict[str, Any] = {"model": self.model,
                                "prompt": prompt_text(request.call_id, request.input_tokens),
                                "max_tokens": request.output_tokens, "temperature": 0.0,
                                "stream": request.stream}
        if self.forced_length[url]:
            body.update(ignore_eos=True, min_tokens=request.output_tokens)
        if request.stream:
            body["stream_options"] = {"include_usage": True}
        try:
            result = await self._post(url, body, request, t0, on_first_token)
        except asyncio.CancelledError:
            raise
        except GenerationError as exc:
            result = GenerationResult(request=request, latency_s=time.monotonic() - t0,
                                      error=exc)
        except asyncio.TimeoutError:
            result = GenerationResult(
                request=request, latency_s=time.monotonic() - t0,
                error=EngineTimeout(f"{url}: no answer in {self.request_timeout_s:g} s"))
        except aiohttp.ClientError as exc:
            result = GenerationResult(request=request, latency_s=time.monotonic() - t0,
                                      error=EngineUnreachable(f"{url}: {type(exc).__name__}: "
                                                              f"{exc}"))
        on_result(result)

    async def _post(self, url: str, body: dict[str, Any], request: GenerationRequest,
                    t0: float, on_first_token: OnFirstToken) -> GenerationResult:
        assert self._session is not None
        async with self._session.post(f"{url}/completions", json=body) as resp:
            if resp.status != 200:
                raise EngineHTTPError(resp.status, (await resp.text())[:200])
            if not request.stream:
                doc = await resp.json(content_type=None)
                usage = doc.get("usage") or {}
                return GenerationResult(
                    request=request, latency_s=time.monotonic() - t0,
                    prompt_tokens=int(usage.get("prompt_tokens", 0)),
                    completion_tokens=int(usage.get("completion_tokens", 0)))
            first: float | None = None
            chunks = 0
            usage = {}
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                doc = json.loads(data)
                if doc.get("usage"):
                    usage = doc["usage"]
                if doc.get("choices"):
                    chunks += 1
                    if first is None:
                        first = time.monotonic() - t0
                        on_first_token(first)
            return GenerationResult(
                request=request, latency_s=time.monotonic() - t0, first_token_s=first,
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", chunks)))
