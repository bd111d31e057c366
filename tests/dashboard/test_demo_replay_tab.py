"""The Replay tab through the tab tours a user makes while ``rolloutscope demo`` switches from
its live run to its fix replays, and after: every visit draws both sides and the verdicts.

The demo registers each fix replay before writing its spans, so a Replay tab on screen during
the switch first sees a replay with nothing in it; it must read it again as it grows (it had
kept the empty read, and a tab opened then stayed blank or half drawn). Every wait polls with a
deadline; nothing sleeps.
"""

from __future__ import annotations

from .test_browser import launched_browser, new_page, open_tab, wait_for_every_plot
from .test_demo_browser import (  # noqa: F401 - the fixture
    FIX_REPLAYS_TIMEOUT_S,
    INCIDENT_TIMEOUT_MS,
    START_TIMEOUT_S,
    demo,
)

TOUR = ("Overview", "Timeline", "Checkpoints", "Fleet", "Rollouts", "Incident", "Replay")


def _replay_drawn(page, where: str, tmp_path) -> None:
    """The Replay tab shows a replay beside the capture: the note naming both, the two
    timelines drawn, and the verdicts with the incidents the fix made vanish."""
    try:
        page.get_by_text("rollout lanes").first.wait_for()
        page.locator(".tabulator-cell", has_text="vanished").first.wait_for()
        page.locator(".tabulator-cell", has_text="deadline_fired_while_parked").first \
            .wait_for()
        wait_for_every_plot(page, 2)  # before and after
    except Exception:
        page.screenshot(path=str(tmp_path / f"replay_{where}.png"), full_page=True)
        raise AssertionError(f"the Replay tab did not draw {where} "
                             f"(screenshot replay_{where}.png)") from None


def test_the_replay_tab_draws_in_every_tour_during_and_after_the_switch_to_replays(
        demo, tmp_path):
    url = demo.wait_for(r"dashboard at (http://\S+)", START_TIMEOUT_S).group(1)
    with launched_browser() as browser:
        ctx, page = new_page(browser)
        try:
            page.set_default_timeout(INCIDENT_TIMEOUT_MS)
            page.goto(url)
            page.get_by_text("rollouts committed").wait_for()
            # the live run has ended and the first fix replay is being written: the user opens
            # the Replay tab and stays on it
            demo.wait_for(r"replaying the run with the fix", FIX_REPLAYS_TIMEOUT_S)
            open_tab(page, "Replay")
            _replay_drawn(page, "during the switch", tmp_path)
            # then tours every tab, during the rest of the switch and after it
            for tour in range(3):
                if tour == 1:
                    demo.wait_for(r"fix replays written", FIX_REPLAYS_TIMEOUT_S)
                for name in TOUR:
                    open_tab(page, name)
                _replay_drawn(page, f"in tour {tour + 1}", tmp_path)
            assert page.errors == []
        finally:
            ctx.close()
