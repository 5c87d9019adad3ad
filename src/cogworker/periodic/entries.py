"""Registering periodic (cron) entries.

    config.periodic.register("*/5 * * * *", ReportJob, args=[42], retry=0,
                             unique="until_executed")
    config.periodic.register("0 9 * * * Europe/Berlin", "Billing::Invoicer", external=True)

or in the YAML config file::

    periodic:
      - cron: "*/5 * * * *"
        job: ReportJob
        args: [42]
        unique: until_executed

An entry's id (pjid) is ``sha1(cron|class|args-json)`` over the cron string as written (zone
suffix included), exactly as the Ruby gem computes it, so Ruby and Python processes claim the
same slots. ``queue`` is a Python extension: it is not part of the id, and it is published as
an extra key of the entry's schedule JSON, which Ruby ignores.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cogworker import registry, wire

if TYPE_CHECKING:
    from cogworker.periodic.cron import Schedule

DEFAULT_QUEUE = "default"
ENTRY_KEYS = frozenset({"cron", "job", "args", "queue", "retry", "unique", "tz", "external"})


class PeriodicError(ValueError):
    """A periodic entry that can't be registered; the message names the entry."""


@dataclass(frozen=True)
class Entry:
    cron: str
    job: str
    args: list[Any] = field(default_factory=list)
    retry: bool | int = 0
    unique: str | None = None
    queue: str = DEFAULT_QUEUE
    schedule: Schedule = field(init=False, repr=False, compare=False)

    pjid: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # the cron parser (cronsim, zoneinfo: about 0.4 MB) loads with the first entry, so a
        # process that registers none, as most workers and every web app, never holds it
        from cogworker.periodic.cron import Schedule

        object.__setattr__(self, "schedule", Schedule(self.cron))
        text = f"{self.cron}|{self.job}|{wire.dumps(self.args)}"
        object.__setattr__(self, "pjid", hashlib.sha1(text.encode("utf-8")).hexdigest())

    @property
    def until_executed(self) -> bool:
        return self.unique == "until_executed"

    def published(self) -> str:
        """The entry's value in ``periodic:schedule`` (read by the Web UI and by Ruby)."""
        value: dict[str, Any] = {
            "cron": self.cron,
            "class": self.job,
            "retry": self.retry,
            "unique": self.unique,
            "args": self.args,
        }
        if self.queue != DEFAULT_QUEUE:
            value["queue"] = self.queue
        return wire.dumps(value)


def _job_name(job: Any) -> str:
    if isinstance(job, str):
        return job
    name = getattr(job, "name", None)
    if isinstance(name, str) and name:
        return name
    raise TypeError(f"expected a job class, a @job function or a wire name, got {job!r}")


def _checked_unique(unique: Any) -> str | None:
    if unique not in (None, "until_executed"):
        raise ValueError(f"unique must be 'until_executed' or None, got {unique!r}")
    return None if unique is None else "until_executed"


def _checked_retry(retry: Any) -> bool | int:
    if retry is None or retry is False:
        return 0
    if not isinstance(retry, bool | int):
        raise ValueError(f"retry must be true, false or a number, got {retry!r}")
    return retry


def _checked_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"queue must be a non-empty string, got {queue!r}")
    return queue


def _checked_args(args: Any, name: str) -> list[Any]:
    checked = wire.check_args(args, name) if not isinstance(args, str) else None
    if checked is None:
        raise ValueError(f"args must be a list, got {args!r}")
    return checked


def _nearest(key: str) -> str:
    import difflib  # only to word an error: most processes never need it

    nearest = difflib.get_close_matches(key, sorted(ENTRY_KEYS), n=1)
    return f" (did you mean {nearest[0]!r}?)" if nearest else ""


class PeriodicSchedule:
    """The cron entries of one config. ``replace`` makes the published schedule hold exactly
    this process's entries (older ones are removed at boot) instead of adding to it."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.replace = False

    def register(
        self,
        cron: str,
        job: Any,
        *,
        args: Sequence[Any] = (),
        retry: bool | int | None = 0,
        unique: str | None = None,
        queue: str = DEFAULT_QUEUE,
        tz: str | None = None,
        external: bool = False,
    ) -> Entry:
        """Add an entry; raises PeriodicError (one line, naming the entry) if it is invalid.

        ``job`` must be a job this process can run unless ``external=True`` (a job only other
        workers run, e.g. Ruby ones). ``tz`` appends a zone to ``cron``.
        """
        label = f"periodic entry {cron!r} -> {job!r}"
        try:
            name = _job_name(job)
            label = f"periodic entry {cron!r} -> {name}"
            unique = _checked_unique(unique)
            retry, queue = _checked_retry(retry), _checked_queue(queue)
            checked = _checked_args(args, name)
            if not external:
                registry.resolve(name)
            entry = Entry(
                cron=f"{cron} {tz}" if tz else cron,
                job=name,
                args=copy.deepcopy(checked),
                retry=retry,
                unique=unique,
                queue=queue,
            )
        except registry.UnknownJobError:
            raise PeriodicError(
                f"{label}: unknown job (define it before registering, or pass external=True "
                "if only other workers run it)"
            ) from None
        except (ValueError, TypeError) as error:  # CronError is a ValueError
            raise PeriodicError(f"{label}: {error}") from None
        if any(existing.pjid == entry.pjid for existing in self.entries):
            raise PeriodicError(f"{label}: registered twice")
        self.entries.append(entry)
        return entry

    def register_from_config(self, items: Any) -> None:
        """Register the ``periodic:`` list of a config file.

        Every key is checked as strictly as a top-level option: an unknown key names the
        closest known one, and a value of the wrong kind (``external: "false"``, ``args: null``,
        ``queue: ""``) is refused rather than read as something else.
        """
        if not isinstance(items, list):
            raise PeriodicError(f"periodic must be a list of entries, got {items!r}")
        for index, item in enumerate(items):
            if not isinstance(item, Mapping) or "cron" not in item or "job" not in item:
                raise PeriodicError(f"periodic entry {index}: needs at least 'cron' and 'job'")
            label = f"periodic entry {index} ({item['cron']!r})"
            unknown = sorted(map(str, set(item) - ENTRY_KEYS))
            if unknown:
                raise PeriodicError(f"{label}: unknown key {unknown[0]!r}{_nearest(unknown[0])}")
            external = item.get("external", False)
            if not isinstance(external, bool):
                raise PeriodicError(f"{label}: external must be true or false, got {external!r}")
            for key in ("args", "queue"):
                if key in item and item[key] is None:
                    raise PeriodicError(f"{label}: {key} is empty; leave it out for the default")
            self.register(
                str(item["cron"]),
                str(item["job"]),
                args=item.get("args", []),
                retry=item.get("retry", 0),
                unique=item.get("unique"),
                queue=item.get("queue", DEFAULT_QUEUE),
                tz=item.get("tz"),
                external=external,
            )

    def clear(self) -> None:
        self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)
