"""What happens to a job that failed: retry (after how long), dead, or discard.

A job class may decide with a ``retry_in`` classmethod::

    class ChargeJob(cogworker.Job):
        @classmethod
        def retry_in(cls, count: int, error: BaseException, job: Payload) -> float | str | None:
            if isinstance(error, CardDeclined):
                return "kill"            # straight to dead; "discard" drops it
            return 10 * (count + 1)      # seconds; None = the default backoff

It is not consulted when the job has no retries left. The default backoff for retry number
``count`` (1 for the first) is ``count**4 + 15 + rand(0..29) * (count + 1)`` seconds.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from cogworker import wire
from cogworker.wire import Payload

logger = logging.getLogger("cogworker")

MAX_MESSAGE = 10_000
MAX_RAW_PAYLOAD = 100_000
A_YEAR = 365 * 86400

Outcome = Literal["retry", "dead", "discard"]


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    delay: float | None = None
    killed: bool = False
    hooked: bool = False

    @property
    def cut_short(self) -> bool:
        """Killed or discarded by the job's hook: no further retries whatever the budget."""
        return self.killed or self.outcome == "discard"

    @property
    def attempt_outcome(self) -> str:
        if self.outcome == "retry":
            return "retrying"
        if self.outcome == "discard":
            return "discarded"
        return "killed" if self.killed else "dead"


def default_backoff(count: int, rand: Callable[[int], int] = random.randrange) -> int:
    """Seconds before retry number ``count`` (1-based): 16-74 s for the first."""
    return int(count**4 + 15 + rand(30) * (count + 1))


def retry_count(job: Payload) -> int:
    value = job.get("retry_count")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def is_terminal(job: Payload) -> bool:
    """True if this failure (not yet counted) ends the job's retries: a hook's recorded
    outcome decides, else the retry budget of the ``retry`` field."""
    outcome = job.get("failure_outcome")
    if outcome in ("retry", "dead", "discard"):
        return bool(outcome != "retry")
    return retry_count(job) >= wire.max_retries(job)


def call_trimmed(function: Callable[..., Any], *args: Any) -> Any:
    """Call ``function`` with as many of ``args`` as it accepts positionally."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return function(*args)
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return function(*args)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return function(*args[: len(positional)])


def decide(job_class: type | None, job: Payload, error: BaseException) -> Decision:
    """The fate of ``job`` after ``error``; ``job_class`` is None when it can't be resolved."""
    count = retry_count(job)
    if count + 1 > wire.max_retries(job):
        return Decision("dead")
    hook = getattr(job_class, "retry_in", None) if job_class is not None else None
    if hook is None:
        return Decision("retry")
    name = getattr(job_class, "name", None) or getattr(job_class, "__name__", "?")
    jid = job.get("jid")
    try:
        value = call_trimmed(hook, count, error, copy.deepcopy(job))
    except Exception as hook_error:
        logger.error(
            "retry_in of %s raised for jid=%s (using the default backoff): %s: %s",
            name,
            jid,
            type(hook_error).__name__,
            hook_error,
        )
        return Decision("retry", hooked=True)
    if value is None:
        return Decision("retry", hooked=True)
    if value == "kill":
        return Decision("dead", killed=True, hooked=True)
    if value == "discard":
        return Decision("discard", hooked=True)
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        if value > A_YEAR:
            logger.warning("retry_in of %s returned %ss (over a year) for jid=%s", name, value, jid)
        return Decision("retry", delay=float(value), hooked=True)
    logger.warning(
        "retry_in of %s returned %r for jid=%s; using the default backoff", name, value, jid
    )
    return Decision("retry", hooked=True)


def error_class_name(error: BaseException) -> str:
    """The name written to ``error_class``: builtins bare, others with their module."""
    kind = type(error)
    wire_name = getattr(kind, "wire_name", None)
    if isinstance(wire_name, str):
        return wire_name
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def scrub(text: str, limit: int) -> str:
    """Valid UTF-8 text (lone surrogates become U+FFFD), at most ``limit`` characters."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text[:limit]


def error_message(error: BaseException) -> str:
    """The error's message, safe to store; ``#<ClassName>`` if reading it raises."""
    try:
        if len(error.args) == 1 and isinstance(error.args[0], bytes):
            message = error.args[0].decode("utf-8", "replace")
        else:
            message = str(error)
    except Exception:
        return f"#<{type(error).__name__}>"
    return scrub(message, MAX_MESSAGE)


def unparseable_job(
    raw: str, queue: str | None, error_class: str, message: str, now: float | None = None
) -> Payload:
    """The dead-set entry standing for a payload that is not a readable job."""
    stamp = wire.now() if now is None else now
    return {
        "class": "(unparseable)",
        "args": [],
        "queue": queue,
        "jid": wire.new_jid(),
        "retry": False,
        "retry_count": 0,
        "enqueued_at": stamp,
        "failed_at": stamp,
        "error_class": error_class,
        "error_message": scrub(message, MAX_MESSAGE),
        "raw_payload": scrub(raw, MAX_RAW_PAYLOAD),
    }


def parse_job(raw: str) -> tuple[Payload | None, str, str]:
    """``(job, error_class, message)``: the job if ``raw`` is a JSON object, else why not."""
    try:
        job = wire.loads(raw)
    except ValueError as error:
        return None, "json.JSONDecodeError", str(error)
    if not isinstance(job, dict):
        return None, "TypeError", f"expected a JSON object, got {type(job).__name__}"
    return job, "", ""
