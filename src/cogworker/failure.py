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

import base64
import copy
import inspect
import json
import logging
import math
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cogworker import registry, wire
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


def run_death_hooks(handlers: Iterable[Any], entry: Payload, error: BaseException) -> None:
    """The job class's ``retries_exhausted``, then each handler, each with its own copy of the
    stored entry; one raising (even ``SystemExit``) is logged and the next still runs."""
    hooks: list[tuple[str, Any]] = []
    try:
        hook = getattr(registry.resolve(str(entry.get("class"))), "retries_exhausted", None)
        if hook is not None:
            hooks.append(("retries_exhausted", hook))
    except registry.UnknownJobError:
        pass
    hooks.extend(("death handler", handler) for handler in handlers)
    for label, hook in hooks:
        try:
            call_trimmed(hook, copy.deepcopy(entry), error)
        except BaseException as hook_error:
            logger.error(
                "%s failed for jid=%s: %s: %s",
                label,
                entry.get("jid"),
                type(hook_error).__name__,
                hook_error,
            )


def error_class_name(error: BaseException) -> str:
    """The name written to ``error_class``: builtins bare, others with their module."""
    kind = type(error)
    wire_name = getattr(kind, "wire_name", None)
    if isinstance(wire_name, str):
        return wire_name
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str, limit: int) -> str:
    """Valid UTF-8 text (lone surrogates become U+FFFD), at most ``limit`` characters."""
    text = text[:limit]
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def raw_bytes(raw: str) -> bytes:
    """The bytes ``raw`` was stored as: Redis replies are decoded with ``surrogateescape``, so
    an invalid byte came in as a lone surrogate and goes back out as that byte."""
    try:
        return raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no stored byte decodes to
        return raw.encode("utf-8", "surrogatepass")


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


@dataclass(frozen=True)
class Rejection:
    """Why a stored payload is not a job that can run: the error class and message its dead
    entry records, and the payload's own jid when it has a usable one."""

    error_class: str
    message: str
    jid: str | None = None

    @property
    def undecodable(self) -> bool:
        """The text itself couldn't be read (bytes or nesting), not just its content."""
        return self.error_class in ("UnicodeDecodeError", "RecursionError")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# built once: json.loads given an option builds a decoder on every call
_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def parse_object(raw: str) -> Payload | Rejection:
    """``raw`` as a JSON object, if it is valid UTF-8 JSON holding one (any nesting that can be
    parsed at all; ``NaN`` and ``Infinity`` are not JSON, as for the Ruby gem's parser)."""
    if not raw.isascii():
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            return _invalid_utf8(raw)
    try:
        value = _decoder.decode(raw)
    except RecursionError:
        return Rejection("RecursionError", "nested too deeply to parse")
    except ValueError as error:
        return Rejection("json.JSONDecodeError", str(error))
    if not isinstance(value, dict):
        return Rejection("TypeError", f"expected a JSON object, got {type(value).__name__}")
    return value


def _invalid_utf8(raw: str) -> Rejection:
    try:
        raw_bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        return Rejection(
            "UnicodeDecodeError", f"not valid UTF-8 ({error.reason} at byte {error.start})"
        )
    return Rejection("UnicodeDecodeError", "not valid UTF-8 (a lone surrogate)")


def _shown(value: Any) -> str:
    try:
        text = wire.dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


# (field, what it must hold, the test), in the order a rejection names them
_JOB_FIELDS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("class", "a string", lambda value: isinstance(value, str)),
    ("queue", "a non-empty string", lambda value: isinstance(value, str) and value != ""),
    ("jid", "a string", lambda value: isinstance(value, str)),
)


def check_job(job: Payload) -> Rejection | None:
    """None if ``job`` has every field a run needs, else the first one that is wrong.

    ``args`` may be absent (no arguments, as every producer's default), but if present it
    must be a list: a job is never run with arguments other than the ones it was given.
    """
    jid = job.get("jid")
    usable_jid = jid if isinstance(jid, str) and jid else None
    for name, wanted, valid in _JOB_FIELDS:
        if name not in job:
            return Rejection("KeyError", f"{name} is missing (a job needs {wanted})", usable_jid)
        if not valid(job[name]):
            return Rejection(
                "TypeError", f"{name} must be {wanted}, got {_shown(job[name])}", usable_jid
            )
    if "args" in job and not isinstance(job["args"], list):
        return Rejection("TypeError", f"args must be a list, got {_shown(job['args'])}", usable_jid)
    return None


def parse_job(raw: str) -> Payload | Rejection:
    """``raw`` as a runnable job, or why it is not one (see ``parse_object``, ``check_job``)."""
    parsed = parse_object(raw)
    if isinstance(parsed, Rejection):
        return parsed
    return check_job(parsed) or parsed


def unparseable_job(
    raw: str, queue: str | None, rejection: Rejection, now: float | None = None
) -> Payload:
    """The dead-set entry standing for a payload that is not a job.

    ``raw_payload`` holds the payload as valid text, at most 100,000 characters; when that
    lost anything (invalid bytes, or a longer payload) ``raw_payload_base64`` holds the exact
    stored bytes as well. The payload's own jid is kept when it has one, so it can be found.
    """
    stamp = wire.now() if now is None else now
    text = scrub(raw, MAX_RAW_PAYLOAD)
    wrapper: Payload = {
        "class": "(unparseable)",
        "args": [],
        "queue": queue,
        "jid": rejection.jid or wire.new_jid(),
        "retry": False,
        "retry_count": 0,
        "enqueued_at": stamp,
        "failed_at": stamp,
        "error_class": rejection.error_class,
        "error_message": scrub(rejection.message, MAX_MESSAGE),
        "raw_payload": text,
    }
    if text != raw:
        wrapper["raw_payload_base64"] = base64.b64encode(raw_bytes(raw)).decode("ascii")
    return wrapper


def retry_delay_text(delay: float) -> str:
    """``84s``, ``1.5s``: a delay as a log line shows it."""
    return f"{delay:.0f}s" if float(delay).is_integer() else f"{delay:.1f}s"


def fate_text(decision: Decision, count: int, budget: int, delay: float | None) -> str:
    """What a filed failure led to, for its log line: ``retry 3/25 in 84s``, ``dead
    (retries exhausted)``, ``dead (retry_in returned kill)``, ``discarded ...``."""
    if decision.outcome == "retry":
        return f"retry {count}/{budget} in {retry_delay_text(delay or 0)}"
    if decision.outcome == "discard":
        return "discarded (retry_in returned discard)"
    if decision.killed:
        return "dead (retry_in returned kill)"
    return "dead (retries exhausted)" if budget > 0 else "dead (retries disabled)"
