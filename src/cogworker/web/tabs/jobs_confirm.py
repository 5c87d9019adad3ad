"""The Jobs tab's confirmation pages, for a browser without JavaScript: a delete button there
leads with a GET to the same route, whose page asks, then posts the exact entry.

The button names its entry as ``target`` (``<status>:<digest>:<where>``, see
``job_entries``), so the page finds it again even if rows moved since it was drawn; an entry
that is gone meanwhile gets a page saying so, and nothing is deleted.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from cogworker import api
from cogworker.web import urls
from cogworker.web.actions import Confirmation, confirm_page, missing_page
from cogworker.web.job_entries import locate, parse_entry
from cogworker.web.job_sources import Status
from cogworker.web.site import Site
from cogworker.web.tabs.jobs_data import View

SET_NAMES = {
    Status.SCHEDULED: "the scheduled set",
    Status.RETRYING: "the retry set",
    Status.DEAD: "the dead set",
}


def confirm_delete(
    site: Site, request: Request, params: dict[str, Any], status: Status
) -> Response:
    view = View.of(params)
    back = urls.url(request, "jobs", view.pairs())
    queue = urls.read_carried(params, "queue") if status is Status.ENQUEUED else None
    name = parse_entry(str(params.get("target") or ""), queue)
    if name.status is not status:
        raise urls.BadParameter(f"target {name.status.slug} entry sent to the {status.slug} route")
    row = locate(site.redis(), name)
    place = f"queue {queue}" if queue is not None else SET_NAMES[status]
    if row is None:
        return missing_page(
            site,
            request,
            "Job not found",
            f"That entry is no longer in {place} where the page saw it: it may have run, been "
            "deleted or moved. Nothing was deleted.",
            back,
            "jobs",
        )
    fields = list(view.pairs())
    if queue is not None:
        fields.append(urls.carried("queue", queue))
    fields.append(urls.carried("raw", row.raw))
    history = "" if status is Status.ENQUEUED else " Its retry history is deleted with it."
    confirmation = Confirmation(
        title="Delete a job",
        question=f"Delete job {row.jid} ({row.job_class}) from {place}?",
        detail=f"It will not run.{history} This can't be undone.",
        button="Delete job",
        action=f"jobs/{status.slug}/delete",
        fields=fields,
        cancel=back,
    )
    return confirm_page(site, request, confirmation, "jobs")


def confirm_delete_all(
    site: Site, request: Request, params: dict[str, Any], status: Status
) -> Response:
    view = View.of(params)
    size = api.JobSet(site.redis(), status.set_key).size()
    confirmation = Confirmation(
        title=f"Delete all of {SET_NAMES[status]}",
        question=f"Delete all {size:,} entries of {SET_NAMES[status]}?",
        detail="None of them will run; their retry histories are deleted and the unique-job "
        "locks they hold are released. This can't be undone.",
        button="Delete all",
        action=f"jobs/{status.slug}/delete_all",
        fields=list(view.pairs()),
        cancel=urls.url(request, "jobs", view.pairs()),
    )
    return confirm_page(site, request, confirmation, "jobs")
