"""What every admin command shares: which Redis it acts on, its errors, and its output.

Which Redis: the command's own ``--redis-url``, or the one given before the command name
(``cogworker --redis-url URL stats``); both given with different values is a usage error
(``cli_context.chosen_redis_url``, the rule the web command follows too). Output
never holds a lone surrogate (what an invalid UTF-8 byte read from Redis decodes to), which
no terminal encoding can write: such characters print as U+FFFD.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import redis

from cogworker import connection, failure
from cogworker.api import waiting
from cogworker.api.in_progress import DEFAULT_ORPHAN_THRESHOLD
from cogworker.cli_context import chosen_redis_url
from cogworker.config import Config


class NotFound(click.ClickException):
    """An unknown queue, process, jid or lock: one line on stderr, exit status 1."""

    exit_code = 1


@dataclass(frozen=True)
class Target:
    """The Redis a command acts on, and how to name it without credentials."""

    client: redis.Redis
    url: str


def target(own_url: str | None) -> Target:
    config = Config(redis_url=chosen_redis_url(own_url))
    return Target(config.redis(), connection.redacted_url(config.redis_url))


def redis_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--redis-url",
        help="Redis URL (default: the one before the command name, $REDIS_URL or localhost).",
    )(function)


def json_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        function
    )


def orphan_threshold_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--orphan-threshold",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_ORPHAN_THRESHOLD,
        show_default=True,
        help="The workers' orphan_threshold (seconds): dates the recovery of a job left in "
        "progress by a process that is gone.",
    )(function)


def limit_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--limit",
        type=click.IntRange(min=1),
        default=50,
        show_default=True,
        help="Entries to list.",
    )(function)


def printable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return failure.scrub(text, len(text))


def cell(value: object) -> str:
    """A table cell on one line: printable, control characters shown as spaces."""
    text = printable(str(value))
    return text if text.isprintable() else "".join(c if c.isprintable() else " " for c in text)


def clean(value: Any) -> Any:
    """``value`` with every string (keys too) made printable, for JSON output."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {clean(key): clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean(item) for item in value]
    return value


def echo_json(value: Any) -> None:
    click.echo(json.dumps(clean(value), indent=2, sort_keys=True, ensure_ascii=False))


def when(epoch: float | None) -> str:
    return "-" if epoch is None else waiting.when(epoch)


def short(text: str | None, width: int) -> str:
    text = cell(text or "")
    return text if len(text) <= width else text[: width - 1] + "…"


def entries(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


def table(rows: list[list[str]], header: list[str]) -> None:
    shown = [[cell(value) for value in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(header))]
    for row in shown:
        click.echo(
            "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        )
