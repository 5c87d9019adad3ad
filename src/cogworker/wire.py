"""The job payload on the wire: JSON encoding, argument checks, normalisation.

A payload is stored as one JSON object and identified everywhere by its exact bytes, so the
encoding matters. It is compact, raw UTF-8, and writes floats the way Ruby's JSON generator
does (``1.0e+20``, not ``1e+20``), so digests computed over encoded arguments agree with the
Ruby gem's.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

JSONValue = Any
"""A value that survives a JSON round trip: str, int, float, bool, None, list, dict."""

Payload = dict[str, Any]
"""A job as a mutable dict: the decoded form of the JSON object stored in Redis."""

DEFAULT_MAX_RETRY_ATTEMPTS = 25

SIGNAL_COMMANDS = ("quiet", "resume", "stop")
"""What a process hears on its signal channel (the Ruby gem's commands)."""
SIGNAL_FIELD = "signal"
"""The presence hash field (cogworker's own, Ruby ignores it) that keeps the last command sent
to a process, which takes it when it subscribes again: what pub/sub delivered while it wasn't
subscribed is lost."""
SWARM_STOP = "stop-swarm"
"""Heard by a swarm child only (cogworker's own): stop the whole swarm, so the child asks its
supervisor, which stops every child and forks no more."""

_fast_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
)
_encode_string = json.encoder.encode_basestring


def new_jid() -> str:
    """A fresh job id: 12 random bytes as 24 lowercase hex characters."""
    return secrets.token_hex(12)


def now() -> float:
    """Epoch seconds as a float, the form of every ``*_at`` field."""
    return time.time()


def ruby_float(value: float) -> str:
    """Format a finite float exactly as Ruby's ``Float#to_s`` (and so its JSON generator).

    Both languages print the shortest digits that round-trip; they differ in layout. Ruby uses
    the fixed form while the decimal exponent is in [-4, 16) and otherwise writes
    ``d.ddde+XX`` with at least one fractional digit and a two-digit exponent.
    """
    text = repr(value)
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("-")
    mantissa, _, exp_text = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return sign + "0.0"
    # position of the decimal point relative to the first significant digit
    leading_zeros = len(whole + fraction) - len((whole + fraction).lstrip("0"))
    point = len(whole) - leading_zeros + (int(exp_text) if exp_text else 0)
    digits = digits.rstrip("0") or "0"
    if -4 < point < 16:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if len(digits) <= point:
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    exponent = point - 1
    return (
        f"{sign}{digits[0]}.{digits[1:] or '0'}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"
    )


def _needs_slow_path(value: Any) -> bool:
    """True if ``value`` holds a float whose Ruby spelling differs from Python's repr."""
    pending = [value]  # a loop, not recursion: this runs on every push
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is float:
            if item and (item >= 1e15 or item <= -1e15 or -1e-4 < item < 1e-4):
                return True
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif kind is dict:
            pending.extend(item.values())
    return False


def _encode_slow(value: Any) -> str:
    if isinstance(value, str):
        return str(_encode_string(value))
    if value is None or value is True or value is False:
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not valid JSON")
        return ruby_float(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode_slow(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{_encode_string(str(key))}:{_encode_slow(item)}" for key, item in value.items()
            )
            + "}"
        )
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    """Encode ``value`` the way the Ruby gem does: compact, raw UTF-8, Ruby float layout."""
    text = _encode_slow(value) if _needs_slow_path(value) else _fast_encoder.encode(value)
    if not text.isascii() and _LONE_SURROGATE.search(text):
        # a lone surrogate (from "\ud800" in JSON) has no UTF-8 form: keep it escaped
        text = _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text


def loads(raw: str | bytes) -> Any:
    return json.loads(raw)


def _json_problem(value: Any, path: str) -> str | None:
    """Why ``value`` (found at ``path``) is not a plain JSON value, or None if it is one."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"{path} is {value!r}, not a JSON number"
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]")
            if problem is not None:
                return problem
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{path} has the non-string key {key!r}"
            problem = _json_problem(item, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    return f"{path} is a {kind.__module__}.{kind.__qualname__}, not a JSON value"


def check_args(args: Iterable[Any], job_name: str) -> list[Any]:
    """Return ``args`` as a list, or raise TypeError naming the first argument that isn't JSON.

    Only values that come back unchanged from a JSON round trip are accepted (str, int,
    finite float, bool, None, list/tuple, dict with str keys), so what ``perform`` receives
    on the worker is what the caller passed. Nothing is pushed when this raises.
    """
    checked = list(args)
    for position, value in enumerate(checked):
        problem = _json_problem(value, f"argument {position}")
        if problem is not None:
            raise TypeError(f"{job_name}: can't enqueue: {problem}")
    return checked


def normalize(item: Mapping[Any, Any]) -> Payload:
    """Fill in the fields every pushed job carries (jid, queue, args, retry,
    created_at). Never drops a key."""
    job: Payload = {str(key): value for key, value in item.items()}
    klass = job.get("class")
    if klass is None:
        raise ValueError("a job needs a 'class' (the job's wire name)")
    if not isinstance(klass, str):
        job["class"] = getattr(klass, "name", None) or str(klass)
    if job.get("jid") is None:
        job["jid"] = new_jid()
    if job.get("queue") is None:
        job["queue"] = "default"
    if job.get("args") is None:
        job["args"] = []
    if "retry" not in job:
        job["retry"] = True
    if job.get("created_at") is None:
        job["created_at"] = now()
    return job


def max_retries(job: Mapping[str, Any]) -> int:
    """How many retries the job's ``retry`` field allows: ``true``/missing 25, ``false`` 0, a number
    that many (a numeric string too), anything else 0."""
    value = job.get("retry", True)
    if value is True or value is None:
        return DEFAULT_MAX_RETRY_ATTEMPTS
    if value is False:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return 0
    return 0


def read_leniently(raw: str) -> dict[str, Any] | None:
    """``raw`` as the Lua scripts read it (cjson): a JSON object even when it holds invalid
    bytes or ``NaN``, which the checks of a job refuse; None if it is not a JSON object."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def jid_of(raw: str) -> str:
    """The jid in a raw payload, for keys and log lines; ``?`` if unreadable.

    Lenient on purpose: a payload holding invalid bytes still yields the jid the scripts see
    in it, so both name the same orphan counter.
    """
    job = read_leniently(raw)
    jid = job.get("jid") if job is not None else None
    return jid if isinstance(jid, str) else "?"


def copy_payload(value: Any) -> Any:
    """A copy of a decoded payload (or any part of one) sharing no dict or list with it:
    what a JSON round trip would give, without encoding anything."""
    kind = type(value)
    if kind is dict:
        return {
            key: item if type(item) not in _CONTAINERS else copy_payload(item)
            for key, item in value.items()
        }
    if kind is list or kind is tuple:
        return [item if type(item) not in _CONTAINERS else copy_payload(item) for item in value]
    return value


_CONTAINERS = (dict, list, tuple)


def workers_entry(queue: str, raw: str, run_at: int) -> str:
    """A processor thread's entry in its process's workers hash: the queue, the payload
    embedded exactly as stored (it must be a JSON object), and when the run started."""
    return f'{workers_entry_opening(queue)}{raw},"run_at":{run_at}}}'


def workers_entry_opening(queue: str) -> str:
    """The start of a workers-hash entry for a job of ``queue``, up to its payload (the
    turnover script writes the rest)."""
    return f'{{"queue":{dumps(queue)},"payload":'
