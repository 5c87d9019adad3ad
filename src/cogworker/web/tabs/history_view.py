"""What the History tab shows for one view: its parameters, read strictly, and the page.

The view: ``status`` (all, success, failed), ``jid`` (exact), ``class`` and ``queue``
(equality, ASCII letters without case), ``error`` and ``args`` (contains, without case: these
two scan), ``min_ms`` / ``max_ms`` (duration, inclusive), ``since`` / ``until`` (finish time,
``YYYY-MM-DDTHH:MM[:SS]`` in UTC, inclusive), ``sort`` (a column) and ``dir`` (asc, desc),
``page`` and ``per_page`` (10, 25, 50, 100). Every link and refresh carries it in a canonical
form (defaults and empty values left out). A value that can't be read is a 400 naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cogworker.history.filters import COLUMNS, Query
from cogworker.history.reading import Page, Path
from cogworker.web import urls

STATUSES = ("all", "success", "failed")
PAGE_SIZES = (10, 25, 50, 100)
DEFAULT_PAGE_SIZE = 25
TEXT_FIELDS = ("jid", "class", "queue", "error", "args")
TIME_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")
HEADERS = {
    "finished_at": "Finished",
    "class": "Class",
    "queue": "Queue",
    "jid": "JID",
    "args": "Args",
    "status": "Status",
    "duration": "Duration",
    "error": "Error",
}


def _whole(params: dict[str, Any], name: str, low: int) -> int | None:
    text = str(params.get(name) or "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < low:
        raise urls.BadParameter(f"{name} must be a whole number from {low} (got {text!r})")
    return int(text)


def _instant(params: dict[str, Any], name: str) -> float | None:
    text = str(params.get(name) or "").strip()
    if not text:
        return None
    for pattern in TIME_FORMATS:
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise urls.BadParameter(f"{name} must be a UTC time as YYYY-MM-DDTHH:MM (got {text!r})")


def _choice(params: dict[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    text = str(params.get(name) or default)
    if text not in allowed:
        raise urls.BadParameter(f"{name} must be one of {', '.join(allowed)} (got {text!r})")
    return text


def utc_field(epoch: float | None) -> str:
    """An instant as the form's ``datetime-local`` field spells it (UTC)."""
    if epoch is None:
        return ""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class View:
    status: str = "all"
    jid: str = ""
    job_class: str = ""
    queue: str = ""
    error: str = ""
    args: str = ""
    min_ms: int | None = None
    max_ms: int | None = None
    since: float | None = None
    until: float | None = None
    sort: str = "finished_at"
    descending: bool = True
    page: int = 1
    per_page: int = DEFAULT_PAGE_SIZE

    @classmethod
    def of(cls, params: dict[str, Any]) -> View:
        text = {name: urls.read_carried(params, name) or "" for name in TEXT_FIELDS}
        per_page = _whole(params, "per_page", 1) or DEFAULT_PAGE_SIZE
        if per_page not in PAGE_SIZES:
            raise urls.BadParameter(
                f"per_page must be one of {', '.join(map(str, PAGE_SIZES))} (got {per_page})"
            )
        view = cls(
            status=_choice(params, "status", STATUSES, "all"),
            jid=text["jid"],
            job_class=text["class"],
            queue=text["queue"],
            error=text["error"],
            args=text["args"],
            min_ms=_whole(params, "min_ms", 0),
            max_ms=_whole(params, "max_ms", 0),
            since=_instant(params, "since"),
            until=_instant(params, "until"),
            sort=_choice(params, "sort", COLUMNS, "finished_at"),
            descending=_choice(params, "dir", ("asc", "desc"), "desc") == "desc",
            page=_whole(params, "page", 1) or 1,
            per_page=per_page,
        )
        return view

    @property
    def filtered(self) -> bool:
        return self != View(
            status=self.status, sort=self.sort, descending=self.descending, per_page=self.per_page
        )

    def filters(self) -> dict[str, Any]:
        """The view's filters as the query's column models."""
        found: dict[str, Any] = {}
        for column, value in (("class", self.job_class), ("queue", self.queue)):
            if value:
                found[column] = {"type": "equals", "filter": value}
        for column, value in (("error", self.error), ("args", self.args)):
            if value:
                found[column] = {"type": "contains", "filter": value}
        for column, low, high in (
            ("duration", self.min_ms, self.max_ms),
            ("finished_at", self.since, self.until),
        ):
            conditions = []
            if low is not None:
                conditions.append({"type": "greaterThanOrEqual", "filter": low})
            if high is not None:
                conditions.append({"type": "lessThanOrEqual", "filter": high})
            if conditions:
                found[column] = {"operator": "AND", "conditions": conditions}
        return found

    def query(self) -> Query:
        return Query.parse(
            status=self.status,
            jid=self.jid or None,
            sort=[{"colId": self.sort, "sort": "desc" if self.descending else "asc"}],
            filters=self.filters(),
            offset=(self.page - 1) * self.per_page,
            limit=self.per_page,
        )

    def pairs(self) -> list[tuple[str, str]]:
        pairs = [("status", self.status)] if self.status != "all" else []
        pairs.extend(self._filter_pairs())
        if self.sort != "finished_at" or not self.descending:
            pairs.extend([("sort", self.sort), ("dir", "desc" if self.descending else "asc")])
        if self.per_page != DEFAULT_PAGE_SIZE:
            pairs.append(("per_page", str(self.per_page)))
        if self.page > 1:
            pairs.append(("page", str(self.page)))
        return pairs

    def _filter_pairs(self) -> list[tuple[str, str]]:
        texts = (
            ("jid", self.jid),
            ("class", self.job_class),
            ("queue", self.queue),
            ("error", self.error),
            ("args", self.args),
        )
        pairs = [urls.carried(name, value) for name, value in texts if value]
        for name, number in (("min_ms", self.min_ms), ("max_ms", self.max_ms)):
            if number is not None:
                pairs.append((name, str(number)))
        for name, instant in (("since", self.since), ("until", self.until)):
            if instant is not None:
                pairs.append((name, utc_field(instant)))
        return pairs

    def at_page(self, page: int) -> View:
        return dataclasses.replace(self, page=max(page, 1))

    def with_status(self, status: str) -> View:
        return dataclasses.replace(self, status=status, page=1)

    def sorted_by(self, column: str) -> View:
        """The view sorted by ``column``: the other direction if it already is, else text
        ascending and numbers descending first."""
        if column == self.sort:
            return dataclasses.replace(self, descending=not self.descending, page=1)
        descending = column in ("finished_at", "duration")
        return dataclasses.replace(self, sort=column, descending=descending, page=1)

    def cleared(self) -> View:
        return View(
            status=self.status, sort=self.sort, descending=self.descending, per_page=self.per_page
        )

    def without_jid(self) -> View:
        return dataclasses.replace(self, jid="", page=1)


@dataclass(frozen=True)
class Shown:
    """One page as the table draws it."""

    page: Page
    view: View

    @property
    def pages(self) -> int:
        return max(1, -(-self.page.total // self.view.per_page))

    @property
    def past_end(self) -> bool:
        return not self.page.runs and self.page.total > 0 and self.view.page > self.pages

    @property
    def scanned(self) -> bool:
        return self.page.path in (Path.SCAN, Path.MEMORY)
