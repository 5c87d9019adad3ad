"""Process titles, so ``ps`` shows what a worker is doing: ``cogworker 0.1.0 myapp [3 of 10
busy]`` (the name is the ``tag`` setting). Without the setproctitle package this does nothing.
"""

from __future__ import annotations

from cogworker import __version__


def set_title(text: str) -> None:
    try:
        import setproctitle
    except ImportError:  # optional at run time: ps then shows the command line
        return
    setproctitle.setproctitle(text)


def worker_title(tag: str | None, busy: int, concurrency: int, state: str = "") -> str:
    name = f" {tag}" if tag else ""
    suffix = f" {state}" if state else ""
    return f"cogworker {__version__}{name} [{busy} of {concurrency} busy]{suffix}"
