"""The Metrics tab: executions, failures and execution times per job class, recorded by the
workers per minute and per hour (``cogworker.metrics.by_class``).

Routes (relative to the mount; ``/metrics`` is the Prometheus exposition):
``GET /class_metrics`` (``period``: ``hour``, the default, or ``day``; ``sort``: ``class``,
``executions``, ``failures``, ``p50``, ``p95``, ``max`` or ``total``, the default), a row per
class; ``GET /class_metrics/class`` (``class`` or ``class_b64``, ``period``), one class's
totals, its executions and failures per minute (or hour), its p50 and p95 per point and its
histogram's buckets. A bad parameter is a 400 naming it. A Live refresh asks for the page's
content alone (one pipeline: 60 or 24 hash reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker.web.actions import page, text_param
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site, Tab
from cogworker.web.tabs.metrics_data import (
    ERROR_TEXT,
    PERIOD_LABELS,
    SORTS,
    class_page,
    overview,
    period_of,
    sort_of,
    took,
)

PATH = "class_metrics"


class MetricsTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        return [
            Route(f"/{PATH}", page(self.show), methods=["GET"]),
            Route(f"/{PATH}/class", page(self.show_class), methods=["GET"]),
        ]

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        period, sort = period_of(params.get("period")), sort_of(params.get("sort"))
        data = overview(self.site.redis(), period, sort)
        template = "metrics/content.html" if is_hx(request) else "metrics/page.html"
        return self.site.renderer.render(
            request,
            template,
            o=data,
            periods=PERIOD_LABELS,
            sorts=SORTS,
            took=took,
            error_text=ERROR_TEXT,
            active=PATH,
            notice=None,
        )

    def show_class(self, request: Request, params: dict[str, Any]) -> Response:
        job_class = text_param(params, "class")
        data = class_page(self.site.redis(), job_class, period_of(params.get("period")))
        template = "metrics/class_content.html" if is_hx(request) else "metrics/class_page.html"
        return self.site.renderer.render(
            request,
            template,
            c=data,
            periods=PERIOD_LABELS,
            took=took,
            error_text=ERROR_TEXT,
            active=PATH,
            notice=None,
        )


def routes(site: Site) -> Sequence[BaseRoute]:
    return MetricsTab(site).routes()


TAB = Tab("Metrics", PATH, routes)
