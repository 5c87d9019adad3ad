"""Logging: one record per event, ``<UTC time> pid=<pid> tid=<thread> <LEVEL>: <message>``.

A record is one line, except that a record carrying an exception is followed by its traceback
on continuation lines indented by four spaces (so every line that starts a record starts with
its timestamp). Failures of jobs pass ``extra=USER_TRACEBACK``: their tracebacks leave out
cogworker's own frames (the processor, the middleware chain...) so the job's code shows.
Text that isn't valid UTF-8 (a payload's invalid bytes) is written with escapes (``\\xff``).

Lines go to stdout (or ``-L FILE``) unbuffered: each record is flushed as it is written, so
nothing is lost when a process ends abruptly. ``flush_output()`` runs before any hard exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TextIO

logger = logging.getLogger("cogworker")

TRIM_OWN_FRAMES = "cogworker_trim_own_frames"
USER_TRACEBACK = {TRIM_OWN_FRAMES: True}
"""``extra=`` for a job's failure: its traceback shows the job's frames, not cogworker's."""

CONTINUATION = "    "
MAX_LINE = 2_000
_HERE = Path(__file__)
_OWN_DIRS = tuple({str(_HERE.parent) + os.sep, str(_HERE.resolve().parent) + os.sep})
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` as valid UTF-8: a byte that wasn't valid UTF-8 shows as ``\\xNN``, any other
    lone surrogate as ``\\udNNN``."""
    if text.isascii() or not _SURROGATE.search(text):
        return text

    def escape(found: re.Match[str]) -> str:
        code = ord(found.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE.sub(escape, text)


def _own(filename: str) -> bool:
    return filename.startswith(_OWN_DIRS)


def _trim(stack: traceback.StackSummary) -> traceback.StackSummary:
    """Drop cogworker's frames on the way to the last frame of other code; frames after it
    (cogworker code that code called, where the error was raised) stay. With no frame of
    other code at all, the innermost frame alone."""
    frames = list(stack)
    others = [index for index, frame in enumerate(frames) if not _own(frame.filename)]
    if not others:
        return traceback.StackSummary.from_list(frames[-1:])
    last = others[-1]
    kept = [frame for frame in frames[: last + 1] if not _own(frame.filename)]
    return traceback.StackSummary.from_list(kept + frames[last + 1 :])


def traceback_lines(error: BaseException, *, trim_own: bool = False) -> list[str]:
    """The traceback of ``error`` (with its causes), one string per line."""
    summary = traceback.TracebackException.from_exception(error)
    if trim_own:
        pending, seen = [summary], set()
        while pending:
            current = pending.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            current.stack = _trim(current.stack)
            pending.extend(link for link in (current.__cause__, current.__context__) if link)
    lines = "".join(summary.format()).splitlines()
    return [line if len(line) <= MAX_LINE else line[:MAX_LINE] + "..." for line in lines]


class LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        message = record.getMessage().replace("\r", "\\r").replace("\n", "\\n")
        thread = threading.current_thread().name
        head = f"{stamp} pid={record.process} tid={thread} {record.levelname}: {message}"
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return printable(head)
        try:
            lines = traceback_lines(error, trim_own=bool(getattr(record, TRIM_OWN_FRAMES, False)))
        except Exception as failure:  # never lose the record over its traceback
            lines = [f"(traceback unavailable: {type(failure).__name__})"]
        body = "\n".join(CONTINUATION + line.replace("\r", "\\r") for line in lines)
        return printable(f"{head}\n{body}")


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
