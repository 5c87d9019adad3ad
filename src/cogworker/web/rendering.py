"""Rendering: the Jinja environment (autoescaped), its filters, and page-or-fragment answers.

A GET of a tab answers the whole page, or, when the request carries ``HX-Request: true`` (the
page's own refreshes and actions send it), only the inner content of the tab's refreshing
container. Every value goes through HTML escaping; text that holds bytes which are not UTF-8
(lone surrogates) is shown with U+FFFD in their place, so it never breaks the response.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, Template
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse

from cogworker.web import assets, urls
from cogworker.web.settings import WebSettings

_SURROGATE = re.compile("[\ud800-\udfff]")
NO_STORE = {"cache-control": "no-store"}
SOURCE_CACHE_SIZE = 256  # templates given as text, kept compiled


def displayable(text: str) -> str:
    """``text`` with every lone surrogate (an undecodable byte) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def is_hx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def format_latency(seconds: float) -> str:
    """``405ms``, ``5.3s``, ``12.5m``, then ``2h 04m``, ``169d 09h``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return format_duration(seconds)


def format_duration(seconds: float | None) -> str:
    """``45s``, ``3m 05s``, ``2h 04m``, ``3d 02h``: two units at most."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    whole = max(int(seconds), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


def compact_json(value: Any, limit: int | None = 160) -> str:
    """One-line JSON (raw UTF-8), cut at ``limit`` characters with an ellipsis."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def clip(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def percent(part: float, whole: float) -> int:
    if whole <= 0:
        return 0
    return max(0, min(100, round(part / whole * 100)))


class Renderer:
    """Templates bound to one set of settings; ``render`` makes the response."""

    def __init__(self, settings: WebSettings, tab_links: Callable[[], list[tuple[str, str]]]):
        self.settings = settings
        self.tab_links = tab_links
        self.env = Environment(
            loader=PackageLoader("cogworker.web", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            latency=format_latency,
            duration=format_duration,
            number=format_number,
            compact_json=compact_json,
            pretty_json=lambda value: json.dumps(value, ensure_ascii=False, indent=2, default=str),
            time=self.time_tag,
            utc=self.utc_text,
            segment=urls.segment,
            clip=clip,
            fingerprint=urls.digest,
        )
        self.env.globals.update(percent=percent, asset=assets.asset_url_path, carried=urls.carried)
        self._sources: dict[str, Template] = {}
        self._sources_lock = threading.Lock()

    def compiled(self, source: str) -> Template:
        """A template given as text (an extension's), compiled once."""
        with self._sources_lock:
            found = self._sources.get(source)
            if found is None:
                if len(self._sources) >= SOURCE_CACHE_SIZE:
                    self._sources.clear()
                found = self._sources[source] = self.env.from_string(source)
            return found

    def utc_text(self, epoch: float | None) -> str:
        if epoch is None:
            return "—"
        return datetime.fromtimestamp(epoch, UTC).strftime(self.settings.time_format)

    def time_tag(self, epoch: float | None) -> Markup:
        """``<time datetime="…Z" data-cw-time>UTC text</time>``; the page's script rewrites
        the text into the browser's time zone."""
        if epoch is None or not math.isfinite(epoch):
            return Markup("—")
        try:
            moment = datetime.fromtimestamp(epoch, UTC)
        except (OverflowError, OSError, ValueError):
            return Markup("—")
        return Markup('<time datetime="{}" data-cw-time>{}</time>').format(
            moment.strftime("%Y-%m-%dT%H:%M:%SZ"), moment.strftime(self.settings.time_format)
        )

    def render_text(self, request: Request, template: str, context: dict[str, Any]) -> str:
        def url(relative: str, *pairs: tuple[str, str], **params: Any) -> str:
            query: Iterable[tuple[str, str]] = [
                *pairs,
                *((key, str(value)) for key, value in params.items() if value is not None),
            ]
            return urls.url(request, relative, query)

        html = self.env.get_template(template).render(
            request=request,
            url=url,
            settings=self.settings,
            tabs=self.tab_links(),
            hx=is_hx(request),
            interval=f"{self.settings.live_update_interval:g}",
            **context,
        )
        return displayable(html)

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        return HTMLResponse(
            self.render_text(request, template, context), status_code=status, headers=NO_STORE
        )
