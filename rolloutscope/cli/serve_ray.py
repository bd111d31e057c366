"""``rolloutscope serve --ray``: one collector actor per Ray node, all writing one lake.

The actors are ``rolloutscope.collectors.ray``'s (each runs the collector ``serve`` runs, on
its own node, with the options given here); this process is their driver. It prints every
actor's endpoints, one ready line each, runs the lake's upkeep itself when asked (one pass for
the whole cluster, not one per node), reads the engines ``--scrape`` names into the lake itself
(each engine once for the cluster, not once per node), and on SIGTERM or Ctrl-C stops every
actor, each draining what it accepted into the lake, before it exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading

from rolloutscope.cli import UsageError
from rolloutscope.cli.serve import READY_PREFIX
from rolloutscope.collectors.service import CollectorConfig
from rolloutscope.store.lake import LakeSpec

ALL_READY_PREFIX = "rolloutscope ray collectors ready "


def _start_ray(address: str | None) -> None:
    import ray

    if address is None:  # a new cluster of this machine, on loopback, without Ray's dashboard
        ray.init(address="local", include_dashboard=False, log_to_driver=False,
                 configure_logging=False, _node_ip_address="127.0.0.1")
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)


def serve_on_ray(config: CollectorConfig, *, address: str | None, upkeep: dict | None,
                 dashboard_wanted: bool) -> int:
    if address is None:
        # read when Ray is imported: it makes a Ray started here take 127.0.0.1 as its node
        # address (and so its listeners), where it would otherwise take the machine's
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray  # noqa: F401 - the ray extra
    except ImportError:
        raise UsageError("serve --ray needs Ray: pip install 'rolloutscope[ray]'") from None
    from rolloutscope.collectors.ray import place_collectors, stop_collectors
    from rolloutscope.store import RunStore

    lake = config.db_path
    if not isinstance(lake, LakeSpec):
        raise UsageError(f"serve --ray writes one store from every node, so it needs a lake "
                         f"(--db ducklake:…), not the DuckDB file {lake}")
    options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
               if f.name not in ("db_path", "scrape")}
    stop = threading.Event()
    # the lake is made (or checked) once here, not raced by every actor at once; the driver
    # keeps it open only for upkeep and the engines' reads
    store = RunStore(lake)
    maintenance = scraper = None
    try:
        if upkeep is not None:
            from rolloutscope.store.lake_ops import Maintenance

            maintenance = Maintenance(store, **upkeep)
        if config.scrape is not None:
            from rolloutscope.collectors.scrape import EngineScraper

            writer = store.writer(max_queued_rows=config.max_queued_rows)
            scraper = EngineScraper(config.scrape, submit=writer.submit).start()
        _start_ray(address)
        # after ray.init, which installs handlers of its own that would end this process
        # before the actors drain
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            placed = place_collectors(str(lake), data_path=lake.data_path, **options)
            try:
                for p in placed:
                    print(f"{READY_PREFIX}node={p.node_id} http={p.http} grpc={p.grpc} "
                          f"writer={p.writer_id} db={lake}", flush=True)
                print(f"{ALL_READY_PREFIX}{len(placed)} node(s)", flush=True)
                if dashboard_wanted:
                    print(f"rolloutscope serve --ray starts no dashboard; run "
                          f"rolloutscope dashboard {lake} beside the collectors",
                          file=sys.stderr, flush=True)
                stop.wait()
            finally:
                ended = stop_collectors(placed)
        finally:
            import ray

            ray.shutdown()
    finally:
        if scraper is not None:
            scraper.stop()
        if maintenance is not None:
            maintenance.stop()
        store.close()  # commits what the scraper gave its writer
    if ended:
        # a terminal's Ctrl-C, or a signal to the process group, reaches a local Ray's actors
        # too: they end before the driver stops them
        print(f"rolloutscope serve --ray: the collector(s) on node {', '.join(ended)} had "
              f"already ended; what they acknowledged is committed, what they held "
              f"unacknowledged was not (stop the driver alone: kill PID, not its group)",
              file=sys.stderr, flush=True)
        return 1
    print("rolloutscope collectors stopped; everything received is committed", flush=True)
    return 0


def add_ray_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", action="store_true",
                   help="one collector actor per Ray node instead of this process, all "
                        "writing the lake --db names; each binds --host and the ports on its "
                        "own node")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="the Ray cluster to join (ray.init's address, e.g. auto or "
                        "HOST:6379); default: start one on this machine, on loopback")
