"""Logging: one line per event, ``<UTC time> pid=<pid> tid=<thread> <LEVEL>: <message>``.

Lines go to stdout (or ``-L FILE``) unbuffered: each record is flushed as it is written, so
nothing is lost when a process ends abruptly. ``flush_output()`` runs before any hard exit.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import TextIO

logger = logging.getLogger("cogworker")


class LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            # one line per event: name the error instead of printing the traceback
            error = record.exc_info[1]
            message = f"{message}: {type(error).__name__}: {error}"
        message = message.replace("\n", "\\n")
        thread = threading.current_thread().name
        return f"{stamp} pid={record.process} tid={thread} {record.levelname}: {message}"


def setup(level: str = "INFO", logfile: str | None = None, stream: TextIO | None = None) -> None:
    """Send cogworker's log lines to ``logfile`` (appended) or ``stream`` (stdout)."""
    handler: logging.Handler
    if logfile:
        handler = logging.FileHandler(logfile, mode="a", encoding="utf-8")
    else:
        handler = logging.StreamHandler(stream or sys.stdout)  # flushes every line
    handler.setFormatter(LineFormatter())
    for existing in list(logger.handlers):
        logger.removeHandler(existing)
        if isinstance(existing, logging.FileHandler):
            existing.close()
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def flush_output() -> None:
    """Flush stdout, stderr and log handlers before a hard exit (errors ignored)."""
    for handler in logger.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
