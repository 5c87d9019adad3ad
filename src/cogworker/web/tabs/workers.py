"""The Workers tab, and the header's cluster bar and intake buttons.

Routes (relative to the mount): ``GET /workers``; ``GET /workers/summary`` (the cluster bar,
always a fragment); ``POST /workers/quiet | resume | stop`` with ``identity``, which publish
that command to the process (an identity that is not live does nothing); ``POST
/workers/pause_all | resume_all``, which publish ``quiet`` / ``resume`` to every live process
and answer the cluster bar. Stopping a process and pausing intake have a confirmation page
at the same route with GET.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import api
from cogworker.web import notices, urls
from cogworker.web.actions import (
    Confirmation,
    Handler,
    action,
    after_action,
    audit,
    confirm_page,
    missing_page,
    page,
    text_param,
)
from cogworker.web.notices import Notice
from cogworker.web.rendering import is_hx
from cogworker.web.site import Site, Tab
from cogworker.web.tabs.workers_data import summary, workers

COMMAND_NOTICES = {"quiet": "quiet_sent", "resume": "resume_sent", "stop": "stop_sent"}
AFTER = {
    "quiet": "it finishes its running jobs and takes no new ones",
    "resume": "it takes jobs again",
    "stop": "it finishes its running jobs, then exits",
}


class WorkersTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/workers", page(self.show), methods=["GET"]),
            Route("/workers/summary", page(self.cluster_bar), methods=["GET"]),
            Route("/workers/quiet", action(self.command("quiet")), methods=["POST"]),
            Route("/workers/resume", action(self.command("resume")), methods=["POST"]),
            Route("/workers/stop", action(self.command("stop")), methods=["POST"]),
            Route("/workers/stop", page(self.confirm_stop), methods=["GET"]),
            Route("/workers/pause_all", action(self.intake("quiet")), methods=["POST"]),
            Route("/workers/pause_all", page(self.confirm_pause_all), methods=["GET"]),
            Route("/workers/resume_all", action(self.intake("resume")), methods=["POST"]),
        ]

    # -- pages ---------------------------------------------------------------------------------

    def render(self, request: Request, shown: Notice | None) -> Response:
        data = workers(self.site.redis(), self.site.config.heartbeat_interval)
        template = "workers/content.html" if is_hx(request) else "workers/page.html"
        return self.site.renderer.render(request, template, w=data, notice=shown, active="workers")

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        return self.render(request, None if is_hx(request) else notices.take(request))

    def render_bar(self, request: Request, shown: Notice | None) -> Response:
        count, active = summary(self.site.redis())
        return self.site.renderer.render(
            request, "cluster_bar.html", cluster=(count, active), toast=shown
        )

    def cluster_bar(self, request: Request, params: dict[str, Any]) -> Response:
        return self.render_bar(request, None)

    # -- actions -------------------------------------------------------------------------------

    def command(self, name: str) -> Handler:
        def send(request: Request, params: dict[str, Any]) -> Response:
            identity = text_param(params, "identity")
            process = api.ProcessSet(self.site.redis()).find(identity)
            if process is None:
                shown = notices.notice("process_gone")
            elif process.signal(name) == 0:
                shown = notices.notice("not_listening")
                audit(request, f"sent {name} to process {identity!r}, which isn't listening: lost")
            else:
                shown = notices.notice(COMMAND_NOTICES[name])
                audit(request, f"sent {name} to process {identity!r}: {AFTER[name]}")
            return after_action(request, shown, lambda n: self.render(request, n), "workers")

        return send

    def intake(self, name: str) -> Handler:
        def send(request: Request, params: dict[str, Any]) -> Response:
            processes = list(api.ProcessSet(self.site.redis()))
            reached = sum(1 for process in processes if process.signal(name) > 0)
            audit(request, f"sent {name} to {reached} of {len(processes)} live processes")
            if not processes:
                shown = notices.notice("no_processes")
            else:
                key = "intake_paused" if name == "quiet" else "intake_resumed"
                shown = notices.notice(key, reached)
            return after_action(request, shown, lambda n: self.render_bar(request, n), "workers")

        return send

    # -- confirmation pages (no JavaScript) ----------------------------------------------------

    def confirm_stop(self, request: Request, params: dict[str, Any]) -> Response:
        identity = text_param(params, "identity")
        back = urls.url(request, "workers")
        process = api.ProcessSet(self.site.redis()).find(identity)
        if process is None:
            text = f"Process {identity} is no longer reporting in: there is nothing to stop."
            return missing_page(self.site, request, "Process not found", text, back, "workers")
        confirmation = Confirmation(
            title="Stop a process",
            question=f"Stop process {identity}?",
            detail="It takes no new jobs, lets its running jobs finish (up to its shutdown "
            "timeout; unfinished ones go back on their queues) and exits. It starts again only "
            "if a supervisor restarts it.",
            button="Stop process",
            action="workers/stop",
            fields=[urls.carried("identity", identity)],
            cancel=back,
        )
        return confirm_page(self.site, request, confirmation, "workers")

    def confirm_pause_all(self, request: Request, params: dict[str, Any]) -> Response:
        count, _ = summary(self.site.redis())
        confirmation = Confirmation(
            title="Pause intake",
            question=f"Ask all {count} processes to go quiet?",
            detail="Running jobs finish; no process takes a new job until intake is resumed. "
            "Jobs keep arriving on their queues.",
            button="Pause intake",
            action="workers/pause_all",
            fields=[],
            cancel=urls.url(request, "workers"),
            variant="warning",
        )
        return confirm_page(self.site, request, confirmation, "workers")


def routes(site: Site) -> Sequence[BaseRoute]:
    return WorkersTab(site).routes()


TAB = Tab("Workers", "workers", routes)
