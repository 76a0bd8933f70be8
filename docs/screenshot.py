"""Makes docs/screenshot.svg: the real dashboard running the real demo, saved by the app itself.

    python docs/screenshot.py            # about a minute; writes docs/screenshot.svg

Runs hosts.example.yaml as shipped (state in a temporary directory), waits until the loss
curves have some length, saves the screen, and stops the run.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from ddptui.config import load_config
from ddptui.tui.app import DashboardApp
from ddptui.tui.screens.confirm import ConfirmScreen

ROOT = Path(__file__).resolve().parents[1]
STEPS_SHOWN = 120


async def shoot(app: DashboardApp, out: Path) -> None:
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("l")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            await pilot.pause(1.0)
            ranks = app.store.rank_views()
            if len(ranks) == 4 and all((r.last_step or 0) >= STEPS_SHOWN for r in ranks):
                break
        else:
            raise SystemExit("the demo did not reach the wanted step in time")
        await pilot.pause(1.0)
        app.save_screenshot(filename=out.name, path=str(out.parent))
        await pilot.press("x")
        await pilot.pause(0.5)
        if isinstance(app.screen, ConfirmScreen):
            await pilot.press("y")
        end = time.monotonic() + 60
        while app.session is not None and not app.session.done:
            if time.monotonic() > end:
                break
            await pilot.pause(0.5)


def main() -> int:
    out = ROOT / "docs" / "screenshot.svg"
    with tempfile.TemporaryDirectory() as state:
        app = DashboardApp(load_config(ROOT / "hosts.example.yaml"), state_root=Path(state))
        asyncio.run(shoot(app, out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
