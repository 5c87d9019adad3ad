"""What the Jobs tab shows for one view: the view's parameters, and the page read for them.

The view is the status filter, the search text, the page number and the open detail panel:
``selected`` (the job's jid), ``entry`` (the exact stored entry, see ``job_entries``) and
``selected_queue`` (its queue, for an enqueued job). Every link, refresh, action form and
redirect carries it, in a canonical form: All, page 1 and empty values are left out. A
notice never is part of it, so it is gone at the next refresh.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import redis

from cogworker.web import urls
from cogworker.web.job_detail import Detail, Why, detail, explain_job
from cogworker.web.job_entries import EntryName, parse_entry
from cogworker.web.job_pages import Counts, read_page
from cogworker.web.job_search import SearchResult, search
from cogworker.web.job_sources import FILTERS, JobRow, Status, parse_filter
from cogworker.web.settings import WebSettings


def page_number(params: dict[str, Any]) -> int:
    text = str(params.get("page") or "1")
    if not text.isdigit() or int(text) < 1:
        raise urls.BadParameter(f"page must be a whole number from 1 (got {text!r})")
    return int(text)


@dataclass(frozen=True)
class View:
    status: Status | None = None  # None: All
    q: str = ""
    page: int = 1
    selected: str = ""  # the jid of the open panel
    entry: str = ""  # its exact entry
    selected_queue: str = ""  # the queue of that entry, when it is an enqueued job

    @classmethod
    def of(cls, params: dict[str, Any]) -> View:
        view = cls(
            status=parse_filter(params.get("status")),
            q=urls.read_carried(params, "q") or "",
            page=page_number(params),
            selected=urls.read_carried(params, "selected") or "",
            entry=str(params.get("entry") or ""),
            selected_queue=urls.read_carried(params, "selected_queue") or "",
        )
        view.entry_name()  # a malformed entry is a 400 now, not a broken panel later
        return view

    @property
    def status_label(self) -> str:
        return "All" if self.status is None else self.status.value

    @property
    def searching(self) -> bool:
        return bool(self.q.strip())

    def entry_name(self) -> EntryName | None:
        if not self.entry:
            return None
        return parse_entry(self.entry, self.selected_queue or None)

    def pairs(self) -> list[tuple[str, str]]:
        pairs = []
        if self.status is not None:
            pairs.append(("status", self.status.value))
        if self.q:
            pairs.append(urls.carried("q", self.q))
        if self.page > 1:
            pairs.append(("page", str(self.page)))
        if self.selected:
            pairs.append(urls.carried("selected", self.selected))
        if self.entry:
            pairs.append(("entry", self.entry))
        if self.selected_queue:
            pairs.append(urls.carried("selected_queue", self.selected_queue))
        return pairs

    def with_status(self, label: str) -> View:
        """The same search under another status filter: page 1, no panel."""
        return View(parse_filter(label), self.q)

    def cleared(self) -> View:
        """The same status filter, without the search."""
        return View(self.status)

    def at_page(self, number: int) -> View:
        return dataclasses.replace(self, page=number)

    def select(self, jid: str, entry: str = "", queue: str | None = None) -> View:
        return dataclasses.replace(self, selected=jid, entry=entry, selected_queue=queue or "")

    def select_row(self, row: JobRow) -> View:
        queue = row.queue if row.status is Status.ENQUEUED else None
        return self.select(row.jid, row.entry, queue)

    def unselected(self) -> View:
        return self.select("")

    def names(self, row_entry: str) -> bool:
        return bool(self.entry) and self.entry.split(":")[:2] == row_entry.split(":")[:2]


@dataclass(frozen=True)
class JobsPage:
    view: View
    rows: list[JobRow]
    counts: Counts
    total: int  # rows in the view: all of a status (or all), or the matches of the search
    per_page: int
    search: SearchResult | None = None
    detail: Detail | None = None
    why: Why | None = None  # the explanation, when drawn into the page (no JavaScript)

    @property
    def pages(self) -> int:
        return max((self.total + self.per_page - 1) // self.per_page, 1)

    @property
    def first(self) -> int:
        """The number of the first row shown (1-based)."""
        return (self.view.page - 1) * self.per_page + 1

    @property
    def past_end(self) -> bool:
        return self.view.page > self.pages

    @property
    def filters(self) -> list[tuple[str, int]]:
        return [
            (label, self.counts.of(None if label == "All" else Status(label))) for label in FILTERS
        ]


def jobs_page(
    client: redis.Redis,
    settings: WebSettings,
    view: View,
    *,
    orphan_threshold: float,
    explain: bool = False,
) -> JobsPage:
    per_page = settings.jobs_page_size
    offset = (view.page - 1) * per_page
    found: SearchResult | None = None
    if view.searching:
        found = search(client, view.status, view.q, settings.jobs_search_limit)
        rows, counts, total = found.rows[offset : offset + per_page], found.counts, len(found.rows)
    else:
        page = read_page(client, view.status, offset, per_page)
        rows, counts, total = page.rows, page.counts, page.counts.of(view.status)
    panel = None
    if view.selected or view.entry:
        panel = detail(client, view.selected, view.entry_name())
    why = None
    if explain and panel is not None and panel.jid:
        why = explain_job(client, panel.jid, orphan_threshold)
    return JobsPage(view, rows, counts, total, per_page, found, panel, why)
