"""What processing one job came to: the processor fills it in, the settle step acts on it."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from cogworker import failure
from cogworker.failure import Decision
from cogworker.fetch import Work
from cogworker.wire import Payload

logger = logging.getLogger("cogworker")


class Next(enum.Enum):
    """What settling does with a job once processing it ended (the value ends its log line)."""

    ACKNOWLEDGE = "it is acknowledged"  # it ran, and any failure is filed (or discarded)
    GIVE_BACK = "it goes back to its queue"  # it never ran
    INTERRUPT = "its failure is filed with a fixed delay"  # filing its failure failed
    BURY = "it is filed into dead"  # not a job: never run, never handed back


@dataclass
class Outcome:
    """What happened to the job being processed."""

    job: Payload | None = None  # the run's own copy: middleware may have changed it
    started: bool = False  # listed as performing (the heartbeat keeps its cron lock alive)
    ran: Next | None = None  # ACKNOWLEDGE or INTERRUPT once perform has returned or raised
    error: BaseException | None = None  # what the job (or a middleware) raised
    seconds: float = 0.0  # how long the run took
    decision: Decision | None = None  # its failure's fate, decided inside the chain if it can
    filed: bool = False  # the failure is written (or discarded): only an ack is left to do
    filing_error: BaseException | None = None  # why the failure couldn't be filed normally
    death: tuple[Payload, BaseException] | None = None  # for the death hooks, once acked
    next: Next = Next.GIVE_BACK

    def after_bug(self, error: BaseException) -> Next:
        """Where a bug in processing (``error``) leaves the job: acked once its failure is
        filed, interrupted if it ran and failed, else handed back (it never ran)."""
        if self.filed:
            return Next.ACKNOWLEDGE
        if self.ran is Next.INTERRUPT:
            self.filing_error = self.filing_error or error
        return self.ran or Next.GIVE_BACK


def log_bug(work: Work, error: BaseException, then: Next) -> None:
    """The line of a bug of cogworker's while processing ``work``, and what comes of the job."""
    logger.error(
        "processing jid=%s failed unexpectedly (%s); %s",
        work.jid,
        summary(error),
        then.value,
        exc_info=error,
    )


def summary(error: BaseException | None) -> str:
    """``KeyError: 'x'``: an error as a log line names it."""
    if error is None:
        return "unknown error"
    return f"{type(error).__name__}: {failure.error_message(error)}"
