"""One collector per Ray node, all writing one lake: ``place_collectors``.

Each node of the cluster (``ray.init(address=…)``, or a local one) gets a collector actor
pinned to it (a hard node-affinity strategy), running the same ``CollectorService`` as
``rolloutscope serve`` on that node's loopback: the senders of a node export to their own
node's collector, and every collector commits into the one lake (a postgres catalog for a
real cluster, an sqlite one on one machine). Each actor's rows carry its writer id
(``host:pid:start``) as their snapshots' author.

    import ray
    from rolloutscope.collectors.ray import place_collectors, stop_collectors
    ray.init(address="auto")
    placed = place_collectors("ducklake:postgres:dbname=lake host=db", data_path="/shared/lake")
    ...  # placed[i].node_id, placed[i].http, placed[i].grpc
    stop_collectors(placed)  # drains and commits everything each one accepted
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class PlacedCollector:
    node_id: str
    http: str
    grpc: str
    writer_id: str
    actor: Any  # the Ray actor handle


class _CollectorActor:
    """A ``CollectorService`` on its own event loop in a thread of the actor's process."""

    def __init__(self, store: str, data_path: str | None, options: dict[str, Any]) -> None:
        from pathlib import Path

        from rolloutscope.collectors.service import CollectorConfig, CollectorService
        from rolloutscope.store.lake import is_lake, parse

        target = parse(store, data_path=data_path) if is_lake(store) else Path(store)
        self._service = CollectorService(CollectorConfig(db_path=target, **options))
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._endpoints = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        if not self._ready.wait(120) or self._error is not None:
            raise RuntimeError(f"the collector did not start: {self._error}")

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(endpoints) -> None:
                from rolloutscope.collectors.service import freeze_set_up_heap

                freeze_set_up_heap()  # the actor's process is this collector's own
                self._endpoints = endpoints
                self._ready.set()

            await self._service.run(self._stop, on_ready=ready)

        try:
            asyncio.run(serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor
            self._error = exc
            self._ready.set()

    def describe(self) -> dict[str, str]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(),
                "http": self._endpoints.http, "grpc": self._endpoints.grpc,
                "writer_id": getattr(self._service.store, "writer_id", "")}

    def stop(self) -> bool:
        """Drain and commit everything accepted; True once the store is closed."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(120)
        return not self._thread.is_alive()


def place_collectors(store: str, *, data_path: str | None = None, nodes: list[str] | None = None,
                     **options: Any) -> list[PlacedCollector]:
    """A collector actor on each alive node (or on ``nodes``, by Ray node id), writing
    ``store``. ``options`` are ``CollectorConfig`` fields (ports default to free ones)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise RuntimeError("ray.init() first: place_collectors places actors on its nodes")
    options = {"http_port": 0, "grpc_port": 0, **options}
    alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    wanted = alive if nodes is None else list(nodes)
    unknown = sorted(set(wanted) - set(alive))
    if unknown:
        raise ValueError(f"no alive Ray node {', '.join(unknown)}")
    actor_class = ray.remote(num_cpus=0)(_CollectorActor)
    actors = [actor_class.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        max_concurrency=4).remote(str(store), data_path, options) for node in wanted]
    described = ray.get([a.describe.remote() for a in actors])
    return [PlacedCollector(actor=a, **d) for a, d in zip(actors, described, strict=True)]


def stop_collectors(placed: list[PlacedCollector]) -> list[str]:
    """Stop every placed collector, each draining what it accepted into the store. Returns the
    node ids of those that had already ended (a signal sent to the whole process group of a
    local Ray, a node lost): each acknowledged only what it had committed, so nothing they
    acknowledged is lost, but whatever was in flight there was never acknowledged."""
    import ray
    from ray.exceptions import RayActorError

    refs = [p.actor.stop.remote() for p in placed]
    ended: list[str] = []
    for p, ref in zip(placed, refs, strict=True):
        try:
            ray.get(ref)
        except RayActorError:
            ended.append(p.node_id)
    for p in placed:
        ray.kill(p.actor)
    return ended
