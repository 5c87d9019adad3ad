"""The dashboard in a small web app: mounted at ``/cogworker``, ``/`` redirecting there, a
placeholder auth layer added with ``use``, and an extension tab (Job status) that looks up a
job's status by jid.

    python -m examples.web                  # http://127.0.0.1:9394/cogworker/
    uvicorn examples.web:site --port 9394   # the same, served by uvicorn's own command

Redis is ``$REDIS_URL``, else ``redis://localhost:6379/0``.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route

import cogworker
from cogworker import status
from cogworker.web import WebSettings, app
from cogworker.web.application import Dashboard
from cogworker.web.extensions import Action, Routes
from examples import app as example_app

PREFIX = "/cogworker"
PORT = 9394


class DemoAuthMiddleware:
    """Where real authentication goes (SSO, a reverse proxy's header...): this one lets every
    request through and shows how a layer added with ``use`` wraps every dashboard route."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["user"] = "demo"  # a real one checks a session here
        await self.app(scope, receive, send)


STATUS_PAGE = """
<div class="page-head"><h1>Job status</h1></div>
<section class="panel">
  <form class="search" method="get" action="{{ url('status') }}">
    <input class="search-input" type="search" name="jid" value="{{ jid }}" placeholder="jid">
    <button class="btn btn-secondary btn-sm" type="submit">Look up</button>
  </form>
  {% if jid and fields %}
  <dl class="facts">{% for key, value in fields|dictsort %}
    <div><dt>{{ key }}</dt><dd>{{ value }}</dd></div>
  {% endfor %}</dl>
  {% elif jid %}
  <p class="empty">No status for {{ jid }}: it expired, or the job never had one.</p>
  {% else %}
  <p class="empty">Enter the jid of a job whose status is recorded (jobs pushed here have one).</p>
  {% endif %}
</section>
"""


class JobStatusTab:
    """An extension: ``GET /status?jid=...`` and ``GET /status/<jid>`` show a job's status."""

    def __init__(self, config: cogworker.Config) -> None:
        self.config = config

    def registered(self, routes: Routes) -> None:
        routes.add("GET", "/status", self.show)
        routes.add("GET", "/status/{jid}", self.show)

    def show(self, action: Action) -> Response:
        jid = (action.param("jid") or "").strip()
        fields = status.get(jid, config=self.config) if jid else None
        return action.page("Job status", STATUS_PAGE, jid=jid, fields=fields or {})


def dashboard(config: cogworker.Config) -> Dashboard:
    panel = app(config, WebSettings(time_format="%d.%m.%Y %H:%M:%S", live_update_interval=5))
    panel.use(DemoAuthMiddleware)
    panel.register(JobStatusTab(config), name="job_status", tab="Job status", index="status")
    return panel


def make_site(config: cogworker.Config) -> Starlette:
    async def home(request: Any) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=302)

    return Starlette(routes=[Route("/", home), Mount(PREFIX, dashboard(config))])


site = make_site(example_app.config)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the example's dashboard.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=PORT)
    options = parser.parse_args()
    print(f"examples.web: http://{options.host}:{options.port}{PREFIX}/ (Ctrl-C stops it)")
    uvicorn.run(site, host=options.host, port=options.port, log_level="warning")


if __name__ == "__main__":
    main()
