"""The worker's app module for tests/test_contrib_sentry.py (``cogworker run -r`` it).

Sentry is initialised with a transport that appends every event it is given, as one JSON
line, to the file named by ``$SENTRY_EVENTS_FILE`` (no DSN: nothing leaves the process). The
JSON object in ``$CONTRIB_SENTRY_OPTIONS`` holds the options of
``cogworker.contrib.sentry.instrument`` (``"scrub": true`` installs ``last_four``), under
``"sentry"`` more options of ``sentry_sdk.init``, and ``"held": true`` makes the transport
hold its events until it is flushed, as a real one's queue does.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import cogworker
from cogworker.contrib import sentry as cogworker_sentry


class FileTransport(Transport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.lock = threading.Lock()  # processor threads report concurrently

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is None:  # sessions and other items: not events
            return
        self.write([event])

    def write(self, events: list[Any]) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(event, default=str) + "\n" for event in events))


class HeldTransport(FileTransport):
    """Writes what it holds only when flushed: an event not flushed is lost."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.held: list[Any] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            with self.lock:
                self.held.append(event)

    def flush(self, timeout: float, callback: Any = None) -> None:
        with self.lock:
            events, self.held = self.held, []
        self.write(events)


def last_four(args: list[Any]) -> list[Any]:
    """Shows a card number by its last four digits only."""
    card, *rest = args
    return [f"...{str(card)[-4:]}", *rest]


options = json.loads(os.environ.get("CONTRIB_SENTRY_OPTIONS", "{}"))
transport_class = HeldTransport if options.pop("held", False) else FileTransport
sentry_sdk.init(
    transport=transport_class(os.environ["SENTRY_EVENTS_FILE"]),
    **options.pop("sentry", {}),
)
if options.pop("scrub", False):
    options["scrub_args"] = last_four
cogworker_sentry.instrument(cogworker.default_config(), **options)


class ChargeJob(cogworker.Job):
    """Always fails. Retried at once while its budget lasts, except a stolen card, which its
    ``retry_in`` kills (so its first failure is the last, whatever the budget)."""

    name = "Contrib::Sentry::Charge"

    def perform(self, card: str, amount: int) -> None:
        raise ValueError(f"card declined for {amount}")

    @classmethod
    def retry_in(cls, count: int, error: BaseException, job: dict[str, Any]) -> float | str:
        return "kill" if job["args"][0] == "stolen" else 0


class ThanksJob(cogworker.Job):
    name = "Contrib::Sentry::Thanks"

    def perform(self) -> None:
        pass


class FlakyJob(cogworker.Job):
    """Fails its first run only (counted in Redis under its ``key``), then succeeds."""

    name = "Contrib::Sentry::Flaky"

    def perform(self, key: str) -> None:
        if cogworker.default_config().redis().incr(key) == 1:
            raise ConnectionError("gateway timed out")
