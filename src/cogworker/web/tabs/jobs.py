"""The Jobs tab, for now a count of jobs in each state with ways to reach them.

The unified, server-paged job table (search, detail panel, retry / reschedule / delete)
replaces this page; it keeps the route (``GET /jobs``) and the refreshing container
(``#jobs-content``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import api
from cogworker.web.actions import page
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site, Tab


def routes(site: Site) -> Sequence[BaseRoute]:
    def show(request: Request, params: dict[str, Any]) -> Response:
        client = site.redis()
        stats = api.stats(client)
        running = api.WorkSet(client).size()
        counts = [
            ("Enqueued", stats.enqueued, "neutral"),
            ("Running", running, "accent"),
            ("Scheduled", stats.scheduled_size, "accent-2"),
            ("Retrying", stats.retry_size, "warning"),
            ("Dead", stats.dead_size, "danger"),
        ]
        template = "jobs/content.html" if is_hx(request) else "jobs/page.html"
        return site.renderer.render(request, template, counts=counts, notice=None, active="jobs")

    return [Route("/jobs", page(show), methods=["GET"])]


TAB = Tab("Jobs", "jobs", routes)
