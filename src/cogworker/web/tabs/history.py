"""The History tab: the runs the history middleware recorded, sorted, filtered and paged on
the server (``cogworker.history.reading``, on the history index where it can).

Routes (relative to the mount):

* ``GET /history``: the table for a view (see ``history_view``); with ``HX-Request`` only the
  table (what Live refresh and an in-place filter change swap in);
* ``GET /history/run`` with ``status``, ``at`` (the run's finish time, its score) and ``ref``
  (``history_index.ref_of`` its entry): one run with its error and backtrace; the page's
  script shows its fragment in the backtrace dialog, a browser without JavaScript the page;
* ``GET /history/data``: a JSON block of rows for scripts: ``status``, ``jid``, ``sort`` (JSON
  list of ``{"colId", "sort"}``), ``filter`` (JSON object of column -> filter model),
  ``start`` and ``end``; answers ``{"rows": [stored entries], "total": n}``. Malformed
  ``sort`` or ``filter`` JSON means none; ``start`` / ``end`` that are not whole numbers are
  a 400.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cogworker import wire
from cogworker.history import index as history_index
from cogworker.history import reading as history_query
from cogworker.history.filters import MAX_LIMIT, Query, duration_of
from cogworker.history.reading import Run
from cogworker.web import urls
from cogworker.web.actions import page
from cogworker.web.rendering import NO_STORE, is_hx
from cogworker.web.site import Site, Tab
from cogworker.web.tabs.history_view import HEADERS, PAGE_SIZES, Shown, View, utc_field

ARGS_PREVIEW = 120
RAW_PREVIEW = 200


def human_ms(ms: int) -> str:
    """``2h 34m 23s 23ms``: a larger unit shows once it, or one larger still, isn't zero."""
    if ms < 0:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    parts, shown = [], False
    for value, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")):
        shown = shown or value > 0
        if shown:
            parts.append(f"{value}{unit}")
    parts.append(f"{millis}ms")
    return " ".join(parts)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Row:
    """One run as a table row (every value still to be escaped by the template)."""

    run: Run
    finished_at: float | None
    duration: str
    error: str
    has_backtrace: bool

    @classmethod
    def of(cls, run: Run) -> Row:
        entry = run.entry
        stamp = entry.get("finished_at")
        finished = run.score if run.score is not None else stamp
        error = ""
        if entry.get("error_class"):
            error = f"{entry.get('error_class')}: {_text(entry.get('error_message'))}"
        backtrace = entry.get("backtrace")
        return cls(
            run=run,
            finished_at=finished if isinstance(finished, int | float) else None,
            duration=human_ms(duration_of(entry)),
            error=error,
            has_backtrace=isinstance(backtrace, list) and bool(backtrace),
        )

    def cell(self, column: str) -> str:
        return _text(self.run.entry.get(column))

    @property
    def args(self) -> str:
        return wire.dumps(self.run.entry.get("args", []))

    def link(self, view: View) -> list[tuple[str, str]]:
        """The query of this run's own page."""
        at = "" if self.finished_at is None else repr(float(self.finished_at))
        return [("status", view.status), ("at", at), ("ref", self.run.ref)]


class HistoryTab:
    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/history", page(self.show), methods=["GET"]),
            Route("/history/run", page(self.run), methods=["GET"]),
            Route("/history/data", page(self.data), methods=["GET"]),
        ]

    def show(self, request: Request, params: dict[str, Any]) -> Response:
        view = View.of(params)
        client = self.site.redis()
        shown = Shown(history_query.page(client, view.query()), view)
        fragment = is_hx(request)
        # the form's suggestions are drawn with the page only: a refresh redraws the table
        classes = [] if fragment else history_index.values(client, "class")
        queues = [] if fragment else history_index.values(client, "queue")
        return self.site.renderer.render(
            request,
            "history/content.html" if fragment else "history/page.html",
            view=view,
            shown=shown,
            rows=[Row.of(run) for run in shown.page.runs],
            headers=HEADERS,
            page_sizes=PAGE_SIZES,
            classes=classes,
            queues=queues,
            utc_field=utc_field,
            sync_cap=history_index.SYNC_CAP,
            notice=None,
            active="history",
        )

    def run(self, request: Request, params: dict[str, Any]) -> Response:
        status = str(params.get("status") or "all")
        if status not in history_query.SETS:
            raise urls.BadParameter(f"status must be all, success or failed (got {status!r})")
        ref = str(params.get("ref") or "")
        if len(ref) != history_index.REF_DIGITS or any(c not in "0123456789abcdef" for c in ref):
            raise urls.BadParameter(f"ref must be 16 lowercase hex digits (got {ref!r})")
        at_text = str(params.get("at") or "")
        try:
            at = float(at_text)
        except ValueError:
            raise urls.BadParameter(
                f"at must be a finish time in epoch seconds (got {at_text!r})"
            ) from None
        found = self._find(status, at, ref)
        back = urls.url(request, "history", [("status", status)] if status != "all" else [])
        template = "history/run_body.html" if is_hx(request) else "history/run.html"
        return self.site.renderer.render(
            request,
            template,
            status=200 if found is not None else 404,
            row=Row.of(found) if found is not None else None,
            back=back,
            notice=None,
            active="history",
        )

    def _find(self, status: str, at: float, ref: str) -> Run | None:
        client = self.site.redis()
        for raw in client.zrangebyscore(history_query.SETS[status], at, at):
            if history_index.ref_of(str(raw)) == ref:
                return history_query.run_of(raw, at)
        return None

    def data(self, request: Request, params: dict[str, Any]) -> Response:
        start, end = _int_param(params, "start", 0), _int_param(params, "end", 100)
        wanted = Query.parse(
            status=str(params.get("status") or "all"),
            jid=str(params.get("jid") or "") or None,
            sort=str(params.get("sort") or ""),
            filters=str(params.get("filter") or ""),
            offset=max(start, 0),
            limit=min(max(end - start, 0), MAX_LIMIT),
        )
        found = history_query.page(self.site.redis(), wanted)
        body = {"rows": [run.entry for run in found.runs], "total": found.total}
        # ASCII escapes: an undecodable byte read from Redis stays a valid JSON string
        text = json.dumps(body, ensure_ascii=True, separators=(",", ":"), default=str)
        return Response(text, media_type="application/json", headers=NO_STORE)


def _int_param(params: dict[str, Any], name: str, default: int) -> int:
    text = str(params.get(name) or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise urls.BadParameter(f"{name} must be a whole number (got {text!r})") from None


def routes(site: Site) -> Sequence[BaseRoute]:
    return HistoryTab(site).routes()


TAB = Tab("History", "history", routes)
