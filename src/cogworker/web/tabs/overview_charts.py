"""The Overview's two charts: jobs per hour over the last 24 hours (the hourly throughput
counters every worker writes) and runs per day over a period (the daily counters the history
recorder writes), both in UTC.

Routes (relative to the mount): ``GET /overview/throughput`` and ``GET /overview/runs``
(``period``), each chart as a fragment, which the page refreshes on its own; and
``GET /overview/throughput_data`` and ``GET /overview/runs_data`` (``period``), the same
figures as JSON: ``{labels, fullDates, processed, failed}`` and
``{labels, fullDates, success, failed}``, oldest first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from cogworker import api, history, wire
from cogworker.web import urls
from cogworker.web.actions import page
from cogworker.web.charts import Chart, Series, line_chart
from cogworker.web.rendering import NO_STORE
from cogworker.web.site import Site

HOURS = 24
PERIODS = {"week": 7, "month": 30, "3months": 90, "6months": 182}
PERIOD_LABELS = {"week": "Week", "month": "Month", "3months": "3 Months", "6months": "6 Months"}
DEFAULT_PERIOD = "month"
EMPTY_NOTE = "nothing counted in this time"  # what chart.html says of an empty chart


def period_of(params: dict[str, Any]) -> str:
    period = str(params.get("period") or DEFAULT_PERIOD)
    if period not in PERIODS:
        raise urls.BadParameter(f"period must be week, month, 3months or 6months (got {period!r})")
    return period


def throughput_series(client: redis.Redis, now: float | None = None) -> dict[str, list[Any]]:
    """The last 24 hours ending with this one, oldest first, as the JSON endpoint gives it."""
    hours = api.throughput(client, HOURS, now)
    stamps = [datetime.fromtimestamp(hour["time"], UTC) for hour in hours]
    return {
        "labels": [stamp.strftime("%H:%M") for stamp in stamps],
        "fullDates": [stamp.strftime("%Y-%m-%d %H:00 UTC") for stamp in stamps],
        "processed": [hour["processed"] for hour in hours],
        "failed": [hour["failed"] for hour in hours],
    }


def runs_series(client: redis.Redis, period: str, now: float | None = None) -> dict[str, list[Any]]:
    """The period's UTC days ending today, oldest first (a day with no runs counts 0)."""
    days = PERIODS[period]
    counts = history.daily_counts(client, days, now)
    today = datetime.fromtimestamp(wire.now() if now is None else now, UTC).date()
    dates = [today - timedelta(days=offset) for offset in range(days - 1, -1, -1)]
    found = [counts.get(date.isoformat(), {}) for date in dates]
    return {
        "labels": [date.strftime("%m-%d") for date in dates],
        "fullDates": [date.isoformat() for date in dates],
        "success": [int(day.get("success", 0)) for day in found],
        "failed": [int(day.get("failed", 0)) for day in found],
    }


def throughput_chart(client: redis.Redis) -> Chart:
    data = throughput_series(client)
    return line_chart(
        "throughput",
        data["labels"],
        data["fullDates"],
        [
            Series("Processed", "processed", data["processed"]),
            Series("Failed", "failed", data["failed"]),
        ],
        height=180,
    )


def runs_chart(client: redis.Redis, period: str) -> Chart:
    data = runs_series(client, period)
    return line_chart(
        "runs",
        data["labels"],
        data["fullDates"],
        [
            Series("Succeeded", "success", data["success"]),
            Series("Failed", "failed", data["failed"]),
        ],
        height=180,
    )


def routes(site: Site) -> list[BaseRoute]:
    def throughput(request: Request, params: dict[str, Any]) -> Response:
        chart = throughput_chart(site.redis())
        return site.renderer.render(
            request, "chart.html", chart=chart, unit="hour", value_unit="", empty_note=EMPTY_NOTE
        )

    def runs(request: Request, params: dict[str, Any]) -> Response:
        chart = runs_chart(site.redis(), period_of(params))
        return site.renderer.render(
            request, "chart.html", chart=chart, unit="day", value_unit="", empty_note=EMPTY_NOTE
        )

    def throughput_data(request: Request, params: dict[str, Any]) -> Response:
        return JSONResponse(throughput_series(site.redis()), headers=NO_STORE)

    def runs_data(request: Request, params: dict[str, Any]) -> Response:
        return JSONResponse(runs_series(site.redis(), period_of(params)), headers=NO_STORE)

    return [
        Route("/overview/throughput", page(throughput), methods=["GET"]),
        Route("/overview/runs", page(runs), methods=["GET"]),
        Route("/overview/throughput_data", page(throughput_data), methods=["GET"]),
        Route("/overview/runs_data", page(runs_data), methods=["GET"]),
    ]
