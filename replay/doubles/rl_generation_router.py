"""Stand-in for ``GenerationRouterImpl`` of NVIDIA-NeMo/RL
``nemo_rl/models/generation/generation_router.py`` at 7ea279a (the routing logic; the HTTP
server and the Ray actor are left out).

Least-outstanding over the serving backends (ties by URL); no serving backend is answered with
``no_healthy_backend_status``; a backend that raises ``TimeoutError`` or an aiohttp
``ClientError`` is counted for ``drain_backend_failures`` and answered 500 (or the
no-healthy status once none is left), and, when ``health_managed``, dropped from the serving set
until the next ``set_serving_backends`` push. Membership pushes replace the set in full and
ignore URLs the router does not serve.
"""

from __future__ import annotations

from typing import Any, Optional


class GenerationRouterImpl:
    def __init__(self, *, backend_urls: list[str], host: str, port: int,
                 backend_timeout_s: float, connect_timeout_s: float,
                 no_healthy_backend_status: int, health_managed: bool = False) -> None:
        if not backend_urls:
            raise ValueError("GenerationRouter requires at least one backend URL")
        self._all_backends = list(backend_urls)
        self._serving = list(backend_urls)
        self._inflight = dict.fromkeys(backend_urls, 0)
        self._backend_failures = dict.fromkeys(backend_urls, 0)
        self._host, self._port = host, port
        self._backend_timeout_s = backend_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._no_healthy_backend_status = no_healthy_backend_status
        self._health_managed = health_managed
        self._requests_total = self._no_backend_total = self._backend_error_total = 0

    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}/v1"

    def set_serving_backends(self, urls: list[str]) -> None:
        unknown = [u for u in urls if u not in self._inflight]
        if unknown:
            print(f"policy router: ignoring {len(unknown)} pushed URL(s) it does not serve: "
                  f"{unknown}", flush=True)
        self._serving = [u for u in urls if u in self._inflight]

    def drain_backend_failures(self) -> dict[str, int]:
        drained = {u: n for u, n in self._backend_failures.items() if n}
        for url in drained:
            self._backend_failures[url] = 0
        return drained

    def metrics(self) -> dict[str, float]:
        return {"router/requests_total": float(self._requests_total),
                "router/no_healthy_backend_total": float(self._no_backend_total),
                "router/backend_error_total": float(self._backend_error_total),
                "router/serving_backends": float(len(self._serving))}

    def _pick_backend(self) -> Optional[str]:
        if not self._serving:
            return None
        return min(self._serving, key=lambda url: (self._inflight.get(url, 0), url))

    @staticmethod
    def _target_url(backend: str, path_qs: str) -> str:
        return backend.removesuffix("/v1") + path_qs

    async def _handle(self, request: Any) -> Any:
        from aiohttp import ClientError, web

        self._requests_total += 1
        backend = self._pick_backend()
        if backend is None:
            self._no_backend_total += 1
            return web.json_response({"error": "no healthy generation backend"},
                                     status=self._no_healthy_backend_status)
        self._inflight[backend] = self._inflight.get(backend, 0) + 1
        try:
            return await self._forward(request, backend)
        except (TimeoutError, ClientError) as error:
            return self._on_backend_error(backend, error)
        finally:
            self._inflight[backend] = max(0, self._inflight.get(backend, 0) - 1)

    def _on_backend_error(self, backend: str, error: BaseException) -> Any:
        from aiohttp import web

        self._backend_error_total += 1
        self._backend_failures[backend] = self._backend_failures.get(backend, 0) + 1
        if self._health_managed:
            self._serving = [u for u in self._serving if u != backend]
        status = 500 if self._serving else self._no_healthy_backend_status
        return web.json_response({"error": f"backend failed: {type(error).__name__}: {error}"},
                                 status=status)

    async def _forward(self, request: Any, backend: str) -> Any:
        raise NotImplementedError("the stand-in does no HTTP; the replay supplies _forward")
