"""Which history-index sets answer a History query, or that none can (it must scan).

A condition the index answers: ``equals`` on status, class or queue (its set, scored by
finish time; ASCII letters compared without case, as the scan does for every letter); on
``finished_at`` or ``duration`` any comparison but ``notEqual`` (a score range); ``blank``
on those (nothing matches) and ``notBlank`` (everything does), and any condition that
matches everything (an unknown type, a number condition whose value isn't one). The status
radio is an equality too (outside the plain newest-first page, which reads its own set).
A filter combining conditions with ``OR``, or any other condition, leaves the query to
the scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from cogworker import keys
from cogworker.history.filters import TEXT_KINDS, ColumnFilter, Condition, Query, number
from cogworker.history.index import EQUAL_COLUMNS, Source, equal_key

_EVERYTHING = "everything"
_NOTHING = "nothing"


@dataclass(frozen=True)
class Plan:
    """The index sets a query's runs are in every one of; ``empty``: none can match."""

    sources: tuple[Source, ...] = ()
    empty: bool = False

    def ranked_in(self, column: str) -> bool:
        """Whether the one source is already in ``column``'s order (its own scores)."""
        if len(self.sources) != 1:
            return False
        if self.sources[0].key == keys.HISTORY_INDEX_DURATION:
            return column == "duration"
        return column == "finished_at" or self.equal_in(column)

    def equal_in(self, column: str) -> bool:
        """Whether the one source is an equality on ``column`` (every run in it has the same
        value there, but for the case of its letters)."""
        prefix = keys.history_index_by(column, "")
        return len(self.sources) == 1 and self.sources[0].key.startswith(prefix)


def plan_of(query: Query) -> Plan | None:
    """The sets that answer ``query``, or None when it must scan."""
    sources: list[Source] = []
    empty = False
    if query.status != "all":
        sources.append(Source(keys.history_index_by("status", query.status)))
    for found in query.filters:
        planned = _filter_sources(found)
        if planned is None:
            return None
        if planned == _NOTHING:
            empty = True
        elif isinstance(planned, list):
            sources.extend(planned)
    return Plan(_merged(sources), empty)


def _merged(sources: list[Source]) -> tuple[Source, ...]:
    """One range per set: ``since`` and ``until`` on the finish time are one source."""
    found: dict[str, Source] = {}
    plain: list[Source] = []
    for source in sources:
        if source.low is None or source.high is None:
            if source not in plain:
                plain.append(source)
            continue
        known = found.get(source.key)
        found[source.key] = source if known is None else _narrower(known, source)
    return (*plain, *found.values())


def _bound(text: str) -> tuple[float, bool]:
    """A ZRANGEBYSCORE bound as (value, exclusive)."""
    exclusive = text.startswith("(")
    return float(text[1:] if exclusive else text), exclusive


def _narrower(one: Source, other: Source) -> Source:
    assert one.low is not None and one.high is not None
    assert other.low is not None and other.high is not None
    low_one, low_other = _bound(one.low), _bound(other.low)
    high_one, high_other = _bound(one.high), _bound(other.high)
    # the higher low end wins (exclusive if equal and either is), the lower high end likewise
    low = max(low_one, low_other)
    high = min(high_one, high_other, key=lambda bound: (bound[0], not bound[1]))
    return Source(one.key, _text(low), _text(high))


def _text(bound: tuple[float, bool]) -> str:
    value, exclusive = bound
    number = "+inf" if value == float("inf") else "-inf" if value == float("-inf") else repr(value)
    return f"({number}" if exclusive and "inf" not in number else number


def _filter_sources(found: ColumnFilter) -> list[Source] | str | None:
    if found.any_of and len(found.conditions) > 1:
        return None
    sources: list[Source] = []
    for condition in found.conditions:
        planned = _condition_source(found.column, condition)
        if planned is None or planned == _NOTHING:
            return planned
        if isinstance(planned, Source):
            sources.append(planned)
    return sources or _EVERYTHING


def _condition_source(column: str, condition: Condition) -> Source | str | None:
    if column in ("finished_at", "duration"):
        return _range_source(column, condition)
    if condition.numeric or (condition.kind in TEXT_KINDS and condition.kind != "equals"):
        return None
    if condition.kind not in TEXT_KINDS:
        return _EVERYTHING  # the scan lets an unknown condition match everything too
    if column not in EQUAL_COLUMNS:
        return None
    wanted = "" if condition.wanted is None else str(condition.wanted)
    return Source(keys.history_index_by(column, equal_key(wanted)))


def _range_source(column: str, condition: Condition) -> Source | str | None:
    key = keys.HISTORY_INDEX_TIME if column == "finished_at" else keys.HISTORY_INDEX_DURATION
    kind, wanted = condition.kind, number(condition.wanted)
    if kind == "blank":
        return _NOTHING
    if kind == "notBlank":
        return _EVERYTHING
    if kind == "notEqual":
        return None
    if wanted is None:
        return _EVERYTHING
    value = repr(wanted)
    bounds = {
        "equals": (value, value),
        "lessThan": ("-inf", f"({value}"),
        "lessThanOrEqual": ("-inf", value),
        "greaterThan": (f"({value}", "+inf"),
        "greaterThanOrEqual": (value, "+inf"),
    }
    if kind == "inRange":
        upper = number(condition.wanted_to)
        return Source(key, f"({value}", "+inf" if upper is None else f"({upper!r}")
    if kind not in bounds:
        return _EVERYTHING
    low, high = bounds[kind]
    return Source(key, low, high)
