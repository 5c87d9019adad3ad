"""Cron expressions as the Ruby gem reads them, and the slot they give for a moment.

Accepted: 5 fields, or 6 with a leading seconds field; the aliases ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``; an optional
IANA time zone as the last word (``0 9 * * * Europe/Berlin``). Without a zone the process's
local zone is used, as in Ruby (run workers on UTC hosts, or name the zone).

A *slot* is the latest fire time not after now, as epoch seconds. Fire times are walked forward
(comparing instants, never wall clocks) so that across a DST change a time inside a repeated
hour fires once, at its first occurrence, and one inside a skipped hour fires at the jump:
Debian cron's rule, which cronsim implements.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class CronError(ValueError):
    """A cron expression that can't be read; the message names it and why."""


def _zone_suffix(expression: str, words: list[str]) -> tzinfo | None:
    """The IANA zone named by the last word, if it names one (cron fields never do)."""
    last = words[-1]
    if len(words) < 2 or not last[0].isalpha():
        return None
    try:
        return ZoneInfo(last)
    except (ZoneInfoNotFoundError, ValueError):
        if "/" in last:  # looks like Region/City: a misspelt zone, not a cron field
            raise CronError(f"cron {expression!r}: unknown time zone {last!r}") from None
        return None


def _local_zone() -> tzinfo:
    """The process's local zone with its DST rules ($TZ, else /etc/localtime); a fixed offset
    only when neither can be read."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as local:
            return ZoneInfo.from_file(local, key="localtime")
    except (OSError, ValueError):
        zone = datetime.now().astimezone().tzinfo
        assert zone is not None
        return zone


class Schedule:
    """One parsed cron expression with its time zone."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        words = expression.split()
        if not words:
            raise CronError("empty cron expression")
        zone = _zone_suffix(expression, words)
        if zone is not None:
            words = words[:-1]
        fields = ALIASES.get(words[0].lower()) if len(words) == 1 else None
        self.fields = fields or " ".join(words)
        if len(self.fields.split()) not in (5, 6):
            raise CronError(
                f"cron {expression!r}: expected 5 fields (6 with seconds first) or an alias "
                f"such as @hourly, got {len(self.fields.split())}"
            )
        self.zone = zone or _local_zone()
        self.has_seconds = len(self.fields.split()) == 6
        try:
            CronSim(self.fields, datetime.now(self.zone))
        except CronSimError as error:
            raise CronError(f"cron {expression!r}: {error}") from None

    def _walk(self, start: datetime) -> CronSim:
        return CronSim(self.fields, start)

    def next_after(self, moment: float) -> float:
        """The first fire time strictly after ``moment`` (epoch seconds)."""
        start = datetime.fromtimestamp(moment, self.zone)
        if not self.has_seconds:
            start = start.replace(second=0, microsecond=0)
        else:
            start = start.replace(microsecond=0)
        for fire in self._walk(start):
            if fire.timestamp() > moment:
                return fire.timestamp()
        raise CronError(f"cron {self.expression!r} never fires")  # pragma: no cover

    def slot(self, now: float, hint: float | None = None) -> int:
        """The latest fire time not after ``now``, as epoch seconds.

        ``hint``, an earlier slot of this schedule, makes the forward walk short.
        """
        if hint is None or hint > now:
            hint = self._rough_previous(now)
        latest = hint
        candidate = self.next_after(hint)
        while candidate <= now:
            latest, candidate = candidate, self.next_after(candidate)
        return int(latest)

    def _rough_previous(self, now: float) -> float:
        # a reverse step is only a starting point: near a fall-back change it may land a day
        # early, which the forward walk in slot() corrects
        start = datetime.fromtimestamp(now, self.zone) + timedelta(seconds=1)
        try:
            return (
                next(CronSim(self.fields, start.replace(microsecond=0), reverse=True)).timestamp()
                - 1
            )
        except StopIteration:  # pragma: no cover - cronsim always finds one
            return now - 86400 * 366
