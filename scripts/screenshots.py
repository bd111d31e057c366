"""The README's screenshots: every dashboard tab on the demo run, in Debian's Chromium.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--gym DIR] [--demo-db F]

Runs ``rolloutscope demo --exit-after-replay`` at 100x into a temporary run file (the live run
and the fix replays the demo writes beside it), serves that file read-only on 127.0.0.1 (a free
port) and photographs each tab at 1600x1000, the Incident tab on the run's stall and the Replay
tab on the first fix replay. With ``--gym DIR`` it also photographs every tab of the real
NeMo-Gym 0.7.0 capture (tests/fixtures/gym-0.7.0-otlp-http/, posted to an in-process collector
over loopback) into DIR. Each wait polls the page with a deadline; nothing sleeps.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
GYM_CAPTURE = ROOT / "tests" / "fixtures" / "gym-0.7.0-otlp-http"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1600, "height": 1000}
TIMEOUT_MS = 60_000
NO_PLOT_TIMEOUT_MS = 15_000  # before a tab is taken as one with nothing to draw
TABS = ("Overview", "Timeline", "Checkpoints", "Fleet", "Rollouts", "Traces", "Incident",
        "Replay", "Diff")
# coloured pixels on the page's visible canvases (through Bokeh's shadow roots): a plot drew
DRAWN_JS = """
() => {
  let n = 0;
  const walk = (root) => root.querySelectorAll('*').forEach((el) => {
    if (el.tagName === 'CANVAS' && el.width && el.height && el.offsetParent
        && getComputedStyle(el).visibility === 'visible') {  // not on a tab hidden by Bokeh's Tabs
      const d = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
      for (let i = 0; i < d.length; i += 64)
        if (d[i + 3] > 0 && Math.abs(d[i] - d[i + 1]) + Math.abs(d[i + 1] - d[i + 2]) > 30) n++;
    }
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  return n;
}
"""


def demo_run(db: Path) -> None:
    """The demo's run file, with its fix replays."""
    print(f"running rolloutscope demo at 100x into {db} ...", flush=True)
    subprocess.run([sys.executable, "-m", "rolloutscope", "demo", "--port", "0", "--no-browser",
                    "--speed", "100", "--exit-after-replay", "--db", str(db)],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def gym_run(db: Path) -> None:
    """The real Gym capture posted, body by body, to a collector writing ``db``."""
    from rolloutscope.cli.demo import CollectorThread
    from rolloutscope.collectors.service import CollectorConfig

    collector = CollectorThread(CollectorConfig(db_path=db, http_port=0, grpc_port=0))
    collector.start()
    try:
        for body in sorted(GYM_CAPTURE.glob("*-pb.bin")):
            signal = body.name.split("-")[1]
            req = urllib.request.Request(f"{collector.endpoints.http}/v1/{signal}",
                                         data=body.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
    finally:
        collector.stop()


def wait_drawn(page, timeout_ms: float = TIMEOUT_MS) -> None:
    page.wait_for_function(f"() => ({DRAWN_JS})() > 50", timeout=timeout_ms)


def photograph(db: Path, out: Path, *, prefix: str = "") -> list[Path]:
    from playwright.sync_api import sync_playwright

    from rolloutscope.dashboard.app import start_dashboard
    from rolloutscope.store import RunStore

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with RunStore(db, read_only=True) as store:
        run_id = store.run_ids()[0] if store.run_ids() else None
        stall = store.query("SELECT incident_id FROM incidents WHERE kind = 'stall' "
                            "ORDER BY start_ns LIMIT 1") if run_id else []
        server = start_dashboard(store, live=False)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page(viewport=VIEWPORT)
                page.set_default_timeout(TIMEOUT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                for tab in TABS:
                    query = {"tab": tab.lower()}
                    if tab == "Incident" and stall:
                        query["incident"] = stall[0][0]
                    page.goto(server.url + "?" + urlencode(query))
                    page.wait_for_function("() => window.Bokeh && window.Bokeh.documents.length")
                    page.locator(".bk-tab.bk-active", has_text=tab).first.wait_for()
                    if tab not in ("Overview",):
                        try:  # a tab with nothing to draw shows its note at once
                            wait_drawn(page, TIMEOUT_MS if tab in ("Timeline", "Traces")
                                       else NO_PLOT_TIMEOUT_MS)
                        except Exception:  # a tab with nothing to draw on this run says so
                            print(f"  {tab}: no plot drawn", flush=True)
                    path = out / f"{prefix}{tab.lower()}.png"
                    page.screenshot(path=str(path), full_page=True)
                    written.append(path)
                    print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
                          flush=True)
                browser.close()
                if errors:
                    raise SystemExit("page errors: " + "; ".join(errors))
        finally:
            server.stop()
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--gym", type=Path, help="also photograph the Gym capture's tabs here")
    ap.add_argument("--demo-db", type=Path,
                    help="a run file `rolloutscope demo --exit-after-replay` wrote (default: "
                         "run the demo now)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rolloutscope-shots-"))
    try:
        db = args.demo_db
        if db is None:
            db = tmp / "demo.duckdb"
            demo_run(db)
        photograph(db, args.out)
        if args.gym:
            gym_run(tmp / "gym.duckdb")
            photograph(tmp / "gym.duckdb", args.gym, prefix="gym-")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
