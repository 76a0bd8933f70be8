"""The metrics chart is built once, where the run is: the dashboard shows what the run's
handle built, and when the handle is slow to answer it keeps its last drawing and asks again,
rather than building a second chart of its own from its replica (Pilot, stand-in handle)."""

from __future__ import annotations

from test_tui_app import FakeController, make_app, settle, sync, until

from ddptui.chart.rows import BOLD
from ddptui.chart.view import ChartView, Drawn

CHART_BY_THE_RUN = Drawn([[("the run's chart", BOLD)]], {7: 1})


class SlowChart(FakeController):
    """A run whose engine builds a chart of its own (rank 7: not one the store knows), and
    is too slow to answer while ``slow``."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = True
        self.asked = 0

    def chart(self, view: ChartView, width: int, height: int) -> Drawn:
        self.asked += 1
        if self.slow:
            raise TimeoutError("the engine took too long to build the chart")
        return CHART_BY_THE_RUN


@sync
async def test_a_slow_handle_keeps_the_last_chart_and_is_asked_again() -> None:
    app = make_app(session_factory=lambda config, root: SlowChart())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("l")
        await settle(pilot, app)
        run = FakeController.instances[-1]
        assert isinstance(run, SlowChart)
        await until(pilot, lambda: run.asked >= 3, "the chart asked for again")
        # nothing was built here meanwhile, though the replica holds every rank's series
        assert app.chart.plotted == {} and run.store.metric_names()
        run.slow = False
        await until(pilot, lambda: app.chart.plotted == {7: 1}, "the run's chart shown")
        assert "the run's chart" in app.chart.text
