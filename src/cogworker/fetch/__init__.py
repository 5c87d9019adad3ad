"""Taking jobs off their queues and giving them back: one interface, two strategies.

* ``ReliableFetch`` (default): each job is moved atomically from its queue onto this process's
  ``cogworker:inprogress:<identity>`` list and stays there until it is settled, so a job is
  always in Redis.
* ``BasicFetch``: BRPOP; a job popped by a process that then dies is lost. For Redis < 6.2.

Both honour paused queues and the queue weights (``queues.py``). A payload is parsed once,
when it is taken: a ``Work`` carries the parsed job (or why it is not one) and its jid, so
nothing downstream parses it again. Jobs that nobody will settle (a dead process's list, this
process's at shutdown) are the worker's recovery, not this package's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from cogworker import failure, wire
from cogworker.failure import Rejection
from cogworker.scripts import Batch
from cogworker.wire import Payload

if TYPE_CHECKING:
    from redis.connection import AbstractConnection

FetchMode = Literal["reliable", "basic"]


class UnsupportedError(RuntimeError):
    """This Redis lacks a command reliable fetch needs (LMOVE / BLMOVE: Redis < 6.2)."""


@dataclass(frozen=True, slots=True)
class Work:
    """A job taken off a queue: the queue name ("" for one found on the in-progress list
    instead) and the payload exactly as stored, which is its identity in Redis.

    ``job`` is the payload parsed when it was taken, never changed afterwards (a run works
    on its own copy), or the ``Rejection`` saying why it is not a job. ``jid`` is the one the
    scripts see in it (read leniently from a rejected payload, ``?`` if unreadable), which
    names its orphan counter.
    """

    queue: str
    raw: str
    job: Payload | Rejection = field(compare=False)
    jid: str = field(compare=False)

    @classmethod
    def taken(cls, queue: str, raw: str) -> Work:
        job = failure.parse_job(raw)
        jid = wire.jid_of(raw) if isinstance(job, Rejection) else str(job["jid"])
        return cls(queue, raw, job, jid)


@dataclass(frozen=True, slots=True)
class Filing:
    """A payload to write into a sorted set (retry, dead or schedule) at ``score``."""

    target: str
    score: float
    payload: str


@dataclass(frozen=True, slots=True)
class Turn:
    """What a processor thread hands its fetch as a job ends: the job to acknowledge (None
    when its fate is written already), the runs to count, the thread's id (its field in the
    workers hash), and whether to take its next job."""

    done: Work | None
    tid: str
    processed: int = 0
    failed: int = 0
    take_next: bool = True


@dataclass(frozen=True, slots=True)
class Turned:
    """What ``settle_and_take`` came to: the job taken (None when none waited or none was
    asked for) and what failed after the acknowledgement, as (part, error) pairs, part
    ``fetch`` or ``bookkeeping`` (best-effort writes: reported, never undoing the ack)."""

    taken: Work | None
    failures: list[tuple[str, str]]


Connect = Callable[[], "AbstractConnection"]
"""The calling thread's own connection, opened on first use."""


class Fetch(Protocol):
    mode: FetchMode
    # the jobs it hands out stay listed in cogworker:inprogress:<identity> until settled:
    # orphan recovery, the reconcile and the hand-back at shutdown read that list
    keeps_in_progress: bool
    takes_in_turnover: bool  # settle_and_take settles and takes in one call (else: None)

    def settle_and_take(self, connect: Connect, turn: Turn) -> Turned | None:
        """Acknowledge and count ``turn``'s job and take the thread's next, in one round trip
        on the thread's connection. None when this fetch can't (basic fetch): the caller
        hands the settling to the bookkeeper and the thread waits for the fetcher."""

    def retrieve(self, wanted: int, *, wait: bool = True) -> list[Work]:
        """Up to ``wanted`` jobs. With ``wait`` it may block a while when there are none
        (``wake`` ends the wait); without, it returns at once."""

    def wake(self) -> None:
        """End a blocking ``retrieve`` early (called from another thread at quiet / stop)."""

    def give_back(self, work: Work) -> None:
        """Put a job that did not run back at the tail of its queue (it runs next). A payload
        that is not a job goes where the scripts read it would (the worker files such a
        payload into dead instead of handing it back)."""

    def acknowledge(self, works: Sequence[Work]) -> list[bool]:
        """Forget finished jobs; True for each that was still held."""

    def queue_acknowledge(self, batch: Batch, works: Sequence[Work]) -> int | None:
        """Queue the acknowledgement of ``works`` in ``batch``; the position of its reply
        (the list ``acknowledge`` returns), or None when there is nothing to send."""

    def file_instead(self, work: Work, filing: Filing) -> bool:
        """Write ``filing`` in place of the held ``work`` (its failure couldn't be filed
        the normal way, or it is not a job); False if ``work`` was no longer held."""

    def close(self) -> None: ...
