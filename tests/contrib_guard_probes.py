"""The requests that try to reach a guarded dashboard mount without passing its guard, for
the Flask and Starlette/FastAPI tests (tests/django_project/shop/tests.py has its own copy:
that suite runs in the Django project's own interpreter).

Each probe is ``(method, raw path)`` for the mount at ``/cogworker``; ``served_path`` is the
path a server hands the app (percent-decoded, dot segments left as sent). A refused request
must either reach the guard (and be refused) or miss the mount (404): never a 200, and never
any of the dashboard's content.
"""

from __future__ import annotations

from urllib.parse import unquote

PREFIX = "/cogworker"
PROBES: list[tuple[str, str]] = [
    ("GET", "/cogworker/overview"),
    ("GET", "/cogworker"),
    ("GET", "/cogworker/../cogworker/"),
    ("GET", "/cogworker/./overview"),
    ("GET", "/elsewhere/../cogworker/overview"),
    ("GET", "//cogworker/"),
    ("GET", "//cogworker/overview"),
    ("GET", "/COGWORKER/overview"),
    ("GET", "/CogWorker/"),
    ("GET", "/cogworker%2Foverview"),
    ("GET", "%2Fcogworker%2Foverview"),
    ("GET", "/cogworker%252Foverview"),  # decoded once: a literal %2F reaches the app
    ("HEAD", "/cogworker/overview"),
    ("OPTIONS", "/cogworker/overview"),
    ("OPTIONS", "/cogworker/assets/app.css"),
    ("GET", "/cogworker/assets/app.css"),
    ("HEAD", "/cogworker/assets/app.js"),
    ("GET", "/cogworker/assets/favicon.svg"),
    ("GET", "/cogworker/../cogworker/assets/app.css"),
    ("GET", "//cogworker/assets/app.css"),
]
DASHBOARD_MARKERS = (b"Workers</a>", b"cogworker dashboard", b"<svg")
"""Bytes in the dashboard's pages (the header), its stylesheet and script (their first
line) and its icon."""


def served_path(raw: str) -> str:
    return unquote(raw)


def check_refused(probe: tuple[str, str], status: int, body: bytes, guard_asked: bool) -> None:
    """A 403 from the guard, or a 404 that never asked it; nothing of the dashboard."""
    assert status != 200, probe
    assert (status, guard_asked) in ((403, True), (404, False)), (probe, status, guard_asked)
    leaked = [marker for marker in DASHBOARD_MARKERS if marker in body]
    assert not leaked, (probe, leaked, body[:200])
