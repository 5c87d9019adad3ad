"""``GET /metrics``: the Prometheus text exposition (``cogworker.metrics``), an extension like
any other (registered as ``prometheus_exporter``, with no tab). It answers 404 while the
``metrics_enabled`` setting is off, and sits behind the same checks and middleware as every
page."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from cogworker import metrics
from cogworker.web.extensions import SiteRoutes
from cogworker.web.rendering import NO_STORE
from cogworker.web.site import Site

NAME = "prometheus_exporter"


def routes(site: Site) -> Sequence[BaseRoute]:
    async def endpoint(request: Request) -> Response:
        if not site.settings.metrics_enabled:
            return PlainTextResponse("Not Found", status_code=404)
        body = await run_in_threadpool(metrics.render, site.redis())
        return PlainTextResponse(body, media_type=metrics.CONTENT_TYPE, headers=NO_STORE)

    return [Route("/metrics", endpoint, methods=["GET"])]


EXPORTER = SiteRoutes(routes)
