"""What a History query asks for, and how one stored run is tested against it.

``Query.parse`` reads the grid's models: ``sort`` is a list (or its JSON) of
``{"colId", "sort": "asc"|"desc"}``, the first known column wins (none: ``finished_at``
descending); ``filters`` a dict (or its JSON) of column -> filter model, unknown columns
dropped. Malformed JSON, or JSON of the wrong shape, means "no sort" or "no filter": never an
error. A model is one condition or ``{"operator": "AND"|"OR", "conditions": [...]}``.

The value of a column is what the History tab shows: ``finished_at`` a float, ``duration``
whole milliseconds, ``args`` compact JSON, ``error`` ``"Class: message"`` or empty, the others
their text. Text conditions ignore case (``contains``, ``notContains``, ``equals``,
``notEqual``, ``startsWith``, ``endsWith``, ``blank``, ``notBlank``; an unknown one matches
everything). Number conditions: ``equals``, ``notEqual``, ``lessThan``, ``lessThanOrEqual``,
``greaterThan``, ``greaterThanOrEqual``, ``inRange`` (both ends exclusive; no ``filterTo``:
no upper end), ``blank`` (never: every run has a number), ``notBlank``; a ``filter`` that is
not a number matches everything.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cogworker import wire

COLUMNS = ("finished_at", "class", "queue", "jid", "status", "args", "duration", "error")
NUMERIC = ("finished_at", "duration")
STATUSES = ("all", "success", "failed")
TEXT_KINDS = (
    "contains",
    "notContains",
    "equals",
    "notEqual",
    "startsWith",
    "endsWith",
    "blank",
    "notBlank",
)
MAX_LIMIT = 1000

_NUMBERS = (int, float)  # exact types: a bool is not a time
# texts that show in a stored entry exactly as in the column's value: no JSON escape, no
# separator the column adds (": " between an error's class and message, ", " in args)
_PLAIN = re.compile(r"[A-Za-z0-9_.@+\-](?:[A-Za-z0-9_.@+\- ]*[A-Za-z0-9_.@+\-])?")
_PLAIN_ARGS = re.compile(r"[A-Za-z0-9_.@+\-]+")


def duration_ms(started_at: float, finished_at: float) -> int:
    """A run's ``duration``: whole milliseconds between its two stamps."""
    return round((finished_at - started_at) * 1000)


def duration_of(entry: dict[str, Any]) -> int:
    """The entry's ``duration`` in ms; for an entry without one, the same from its stamps
    (``duration_ms``); 0 if it has neither."""
    stored = entry.get("duration")
    if type(stored) is int:
        return stored
    if type(stored) is float:
        return round(stored)
    started: Any = entry.get("started_at")
    finished: Any = entry.get("finished_at")
    if type(started) in _NUMBERS and type(finished) in _NUMBERS:
        return duration_ms(started, finished)
    return 0


def column_value(entry: dict[str, Any], column: str) -> Any:
    """A column's value as the History tab shows it (for sorting and filtering)."""
    if column == "finished_at":
        value = entry.get("finished_at")
        return float(value) if isinstance(value, int | float) else 0.0
    if column == "duration":
        return duration_of(entry)
    if column == "args":
        return wire.dumps(entry.get("args", []))
    if column == "error":
        if not entry.get("error_class"):
            return ""
        return f"{entry.get('error_class')}: {entry.get('error_message') or ''}"
    value = entry.get(column)
    return "" if value is None else str(value)


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None when it isn't one (a bool isn't)."""
    if isinstance(value, bool):
        return None
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


@dataclass(frozen=True)
class Condition:
    """One grid condition: its ``type``, ``filter`` and ``filterTo``, on a number or text."""

    kind: str
    wanted: Any = None
    wanted_to: Any = None
    numeric: bool = False

    def matches(self, value: Any) -> bool:
        if self.numeric:
            found = number(value)
            if found is None:
                return self.kind == "blank"
            return self._number(found)
        return self._text(str(value))

    def _text(self, value: str) -> bool:
        value, wanted = value.lower(), str(self.wanted if self.wanted is not None else "").lower()
        tests: dict[str, Callable[[], bool]] = {
            "contains": lambda: wanted in value,
            "notContains": lambda: wanted not in value,
            "equals": lambda: value == wanted,
            "notEqual": lambda: value != wanted,
            "startsWith": lambda: value.startswith(wanted),
            "endsWith": lambda: value.endswith(wanted),
            "blank": lambda: value == "",
            "notBlank": lambda: value != "",
        }
        test = tests.get(self.kind)
        return test() if test is not None else True

    def _number(self, value: float) -> bool:
        if self.kind in ("blank", "notBlank"):
            return self.kind == "notBlank"
        wanted = number(self.wanted)
        if wanted is None:
            return True
        if self.kind == "inRange":
            upper = number(self.wanted_to)
            return wanted < value and (upper is None or value < upper)
        tests = {
            "equals": value == wanted,
            "notEqual": value != wanted,
            "lessThan": value < wanted,
            "lessThanOrEqual": value <= wanted,
            "greaterThan": value > wanted,
            "greaterThanOrEqual": value >= wanted,
        }
        return tests.get(self.kind, True)


@dataclass(frozen=True)
class ColumnFilter:
    """A column's filter: its conditions, all of which must match (``any_of``: one)."""

    column: str
    conditions: tuple[Condition, ...]
    any_of: bool = False

    def matches(self, entry: dict[str, Any]) -> bool:
        value = column_value(entry, self.column)
        results = (condition.matches(value) for condition in self.conditions)
        return any(results) if self.any_of else all(results)

    @classmethod
    def of(cls, column: str, model: dict[str, Any]) -> ColumnFilter:
        numeric_column = column in NUMERIC

        def condition(found: dict[str, Any], filter_type: Any) -> Condition:
            numeric = numeric_column or (found.get("filterType") or filter_type) == "number"
            kind = str(found.get("type", ""))
            return Condition(kind, found.get("filter"), found.get("filterTo"), numeric)

        listed = model.get("conditions")
        if isinstance(listed, list) and listed:
            found = tuple(
                condition(item, model.get("filterType"))
                for item in listed
                if isinstance(item, dict)
            )
            return cls(column, found, str(model.get("operator", "AND")).upper() == "OR")
        return cls(column, (condition(model, model.get("filterType")),))


@dataclass(frozen=True)
class Sort:
    column: str = "finished_at"
    descending: bool = True

    def key(self, entry: dict[str, Any]) -> Any:
        return column_value(entry, self.column)


@dataclass(frozen=True)
class Query:
    """One page of the history: which set, an exact jid, the filters, the sort, the slice."""

    status: str = "all"
    jid: str | None = None
    filters: tuple[ColumnFilter, ...] = ()
    sort: Sort = field(default_factory=Sort)
    offset: int = 0
    limit: int = 100

    @classmethod
    def parse(
        cls,
        *,
        status: str = "all",
        jid: str | None = None,
        sort: str | list[Any] | None = None,
        filters: str | dict[str, Any] | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> Query:
        sort_list = _parse_json(sort, list) if isinstance(sort, str) else sort
        filter_map = _parse_json(filters, dict) if isinstance(filters, str) else filters
        chosen = Sort()
        for item in sort_list or []:
            if isinstance(item, dict) and item.get("colId") in COLUMNS:
                chosen = Sort(str(item["colId"]), item.get("sort") != "asc")
                break
        found = tuple(
            ColumnFilter.of(column, model)
            for column, model in (filter_map or {}).items()
            if column in COLUMNS and isinstance(model, dict)
        )
        return cls(
            status=status if status in STATUSES else "all",
            jid=jid or None,
            filters=found,
            sort=chosen,
            offset=max(offset, 0),
            limit=min(max(limit, 0), MAX_LIMIT),
        )

    @property
    def plain(self) -> bool:
        """Newest (or oldest) first with no filter: one range of a set, no index needed."""
        return self.jid is None and not self.filters and self.sort.column == "finished_at"

    def needles(self) -> tuple[str, ...]:
        """Lowercased texts every matching run's stored entry holds verbatim (``contains``
        conditions every match must meet, of letters, digits and ``_.@+-``, with inner
        spaces except in args): the scan skips an entry lacking one without parsing it."""
        found = []
        for column_filter in self.filters:
            if column_filter.any_of and len(column_filter.conditions) > 1:
                continue
            for condition in column_filter.conditions:
                wanted = "" if condition.wanted is None else str(condition.wanted)
                pattern = _PLAIN_ARGS if column_filter.column == "args" else _PLAIN
                plain = condition.kind == "contains" and not condition.numeric
                if plain and pattern.fullmatch(wanted):
                    found.append(wanted.lower())
        return tuple(found)

    def matches(self, entry: dict[str, Any], *, status_known: bool = False) -> bool:
        """Whether the run is on this query's page; ``status_known``: it was read from the
        status's own set (which decides, whatever the entry says)."""
        if self.jid is not None and entry.get("jid") != self.jid:
            return False
        if not status_known and self.status != "all" and entry.get("status") != self.status:
            return False
        return all(found.matches(entry) for found in self.filters)


def _parse_json(text: str | None, kind: type) -> Any:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None
