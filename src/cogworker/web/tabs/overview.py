"""The Overview tab: counters, queues and Redis (layout A), or one queue's jobs (layout B).

Routes (relative to the mount): ``GET /`` and ``GET /overview`` (``layout`` ``a`` or ``b``,
``period`` of the runs chart for a, ``queue`` and ``page`` for b), ``GET /overview/redis`` (the
Redis figures, always a fragment), the charts' fragments and JSON (``overview_charts``), and
the queue actions ``POST /overview/<name>/delete | delete_all | pause | resume |
retry_all``. An action answers layout A when its form sent ``layout=a``, else layout B of its
queue. Deleting (one job or all) has a confirmation page at the same route with GET.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import api
from cogworker.web import notices, queue_actions, urls
from cogworker.web.actions import (
    Confirmation,
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
from cogworker.web.tabs import overview_charts
from cogworker.web.tabs.overview_charts import DEFAULT_PERIOD, PERIOD_LABELS, period_of
from cogworker.web.tabs.overview_data import overview


@dataclass(frozen=True)
class View:
    """Which layout, queue and page (layout B) or chart period (layout A): the parameters
    every link, poll and redirect keeps."""

    layout_b: bool
    queue: str = ""
    page: int = 1
    period: str = DEFAULT_PERIOD

    @classmethod
    def of(cls, params: dict[str, Any]) -> View:
        if params.get("layout") != "b":
            return cls(False, period=period_of(params))
        return cls(True, urls.read_carried(params, "queue") or "", page_number(params))

    def with_period(self, period: str) -> View:
        return replace(self, period=period)

    def kept(self) -> list[tuple[str, str]]:
        """Layout A's parameters besides the layout (for its action forms)."""
        return [] if self.period == DEFAULT_PERIOD else [("period", self.period)]

    def pairs(self) -> list[tuple[str, str]]:
        if not self.layout_b:
            return [("layout", "a"), *self.kept()]
        pairs = [("layout", "b")]
        if self.queue:
            pairs.append(urls.carried("queue", self.queue))
        if self.page > 1:
            pairs.append(("page", str(self.page)))
        return pairs


def page_number(params: dict[str, Any]) -> int:
    text = params.get("page") or "1"
    if not str(text).isdigit() or int(text) < 1:
        raise urls.BadParameter(f"page must be a whole number from 1 (got {text!r})")
    return int(text)


def queue_of(params: dict[str, Any]) -> str:
    """The queue an action names: its ``queue`` field, else the path segment."""
    name = urls.read_carried(params, "queue")
    if name is None:
        name = str(params.get("name", ""))
    if not name:
        raise urls.BadParameter("missing queue name")
    return name


def after_view(params: dict[str, Any], queue: str) -> View:
    if params.get("layout") == "a":
        return View(False, period=period_of(params))
    return View(True, queue, page_number(params))


class OverviewTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        show = page(self.show)
        queue_route = "/overview/{name:path}/"
        return [
            Route("/", show, methods=["GET"]),
            Route("/overview", show, methods=["GET"]),
            Route("/overview/redis", page(self.redis_section), methods=["GET"]),
            Route(queue_route + "delete", action(self.delete), methods=["POST"]),
            Route(queue_route + "delete", page(self.confirm_delete), methods=["GET"]),
            Route(queue_route + "delete_all", action(self.delete_all), methods=["POST"]),
            Route(queue_route + "delete_all", page(self.confirm_delete_all), methods=["GET"]),
            Route(queue_route + "pause", action(self.pause), methods=["POST"]),
            Route(queue_route + "resume", action(self.resume), methods=["POST"]),
            Route(queue_route + "retry_all", action(self.retry_all), methods=["POST"]),
            *overview_charts.routes(self.site),
        ]

    # -- pages ---------------------------------------------------------------------------------

    def render(self, request: Request, view: View, shown: Notice | None) -> Response:
        fragment = is_hx(request)
        data = overview(
            self.site.redis(),
            self.site.settings,
            queue=view.queue if view.layout_b else None,
            page=view.page,
            with_redis=not fragment and not view.layout_b,
        )
        template = "overview/content.html" if fragment else "overview/page.html"
        charts = None if fragment or view.layout_b else self.charts(view)
        return self.site.renderer.render(
            request, template, o=data, view=view, notice=shown, active="overview", charts=charts
        )

    def charts(self, view: View) -> dict[str, Any]:
        client = self.site.redis()
        return {
            "throughput": overview_charts.throughput_chart(client),
            "runs": overview_charts.runs_chart(client, view.period),
            "periods": list(PERIOD_LABELS.items()),
        }

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        shown = None if is_hx(request) else notices.take(request)
        return self.render(request, View.of(params), shown)

    def redis_section(self, request: Request, params: dict[str, Any]) -> Response:
        info = overview(self.site.redis(), self.site.settings, with_redis=True).redis_info
        return self.site.renderer.render(request, "overview/redis.html", redis_info=info)

    # -- actions -------------------------------------------------------------------------------

    def answer(
        self, request: Request, params: dict[str, Any], queue: str, shown: Notice
    ) -> Response:
        view = after_view(params, queue)
        return after_action(
            request, shown, lambda n: self.render(request, view, n), "overview", view.pairs()
        )

    def delete(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        raw = text_param(params, "raw")
        removed = api.Queue(self.site.redis(), queue).delete(raw)
        if removed:
            jid = api.JobRecord(raw).jid
            copies = "" if removed == 1 else f" ({removed} copies)"
            audit(request, f"deleted job {jid!r} from queue {queue!r}{copies}: it won't run")
        shown = notices.notice("job_deleted", removed if removed > 1 else None)
        return self.answer(request, params, queue, shown if removed else notices.notice("job_gone"))

    def delete_all(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        dropped = api.Queue(self.site.redis(), queue).clear()
        audit(request, f"deleted all {dropped} jobs of queue {queue!r}: they won't run")
        return self.answer(request, params, queue, notices.notice("queue_cleared", dropped))

    def pause(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        api.Queue(self.site.redis(), queue).pause()
        audit(request, f"paused queue {queue!r}: workers take no jobs from it until resumed")
        return self.answer(request, params, queue, notices.notice("queue_paused"))

    def resume(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        api.Queue(self.site.redis(), queue).resume()
        audit(request, f"resumed queue {queue!r}: workers take jobs from it again")
        return self.answer(request, params, queue, notices.notice("queue_resumed"))

    def retry_all(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        moved = queue_actions.retry_all(self.site.redis(), queue)
        audit(request, f"put {moved} retrying jobs back on queue {queue!r}: they run next")
        shown = (
            notices.notice("retried_all", moved) if moved else notices.notice("nothing_to_retry")
        )
        return self.answer(request, params, queue, shown)

    # -- confirmation pages (no JavaScript) ----------------------------------------------------

    def confirm_delete(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        view = after_view(params, queue)
        back = urls.url(request, "overview", view.pairs())
        position = str(params.get("at") or "0")
        raw = queue_actions.find_near(
            self.site.redis(),
            queue,
            str(params.get("digest", "")),
            int(position) if position.isdigit() else 0,
        )
        if raw is None:
            return missing_page(
                self.site,
                request,
                "Job not found",
                f"That job is no longer in queue {queue} near where it was: it may have run, "
                "been deleted, or moved. Nothing was deleted.",
                back,
                "overview",
            )
        record = api.JobRecord(raw)
        confirmation = Confirmation(
            title="Delete a job",
            question=f"Delete job {record.jid} ({record.job_class}) from queue {queue}?",
            detail="It is removed from the queue and will not run. This can't be undone.",
            button="Delete job",
            action=f"overview/{urls.segment(queue)}/delete",
            fields=[urls.carried("queue", queue), urls.carried("raw", raw), *view.pairs()],
            cancel=back,
        )
        return confirm_page(self.site, request, confirmation, "overview")

    def confirm_delete_all(self, request: Request, params: dict[str, Any]) -> Response:
        queue = queue_of(params)
        view = after_view(params, queue)
        size = api.Queue(self.site.redis(), queue).size()
        confirmation = Confirmation(
            title="Delete all jobs of a queue",
            question=f"Delete all {size:,} jobs waiting on queue {queue}?",
            detail="They are removed and will not run; the unique-job locks they hold are "
            "released. This can't be undone.",
            button="Delete all",
            action=f"overview/{urls.segment(queue)}/delete_all",
            fields=[urls.carried("queue", queue), *view.pairs()],
            cancel=urls.url(request, "overview", view.pairs()),
        )
        return confirm_page(self.site, request, confirmation, "overview")


def routes(site: Site) -> Sequence[BaseRoute]:
    return OverviewTab(site).routes()


TAB = Tab("Overview", "overview", routes)
