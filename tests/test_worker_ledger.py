"""The ledger of what a process holds (worker/ledger.py), on its own: no Redis, no threads."""

from __future__ import annotations

import json

from cogworker import keys
from cogworker.failure import Rejection
from cogworker.fetch import Filing, Work
from cogworker.worker.ledger import ACK, Ledger


def work(token: str, jid: str = "j-1") -> Work:
    raw = json.dumps({"class": "L::Job", "queue": "default", "jid": jid, "args": [token]})
    return Work.taken("default", raw)


def test_a_job_is_running_from_taken_to_finished() -> None:
    ledger, job = Ledger(), work("a")
    assert ledger.running() == set()
    ledger.taken(job)
    assert ledger.running() == {job.raw}
    ledger.finished(job)
    assert ledger.running() == set()


def test_two_identical_payloads_stay_listed_until_both_finish() -> None:
    ledger, first, second = Ledger(), work("same"), work("same")
    ledger.taken(first)
    ledger.taken(second)
    ledger.finished(first)
    assert ledger.running() == {first.raw}
    ledger.finished(second)
    assert ledger.running() == set()
    ledger.finished(second)  # one finish too many forgets nothing else, raises nothing
    assert ledger.running() == set()


def test_performing_lists_the_work_inside_perform_in_the_order_it_started() -> None:
    ledger, a, b = Ledger(), work("a", "j-a"), work("b", "j-b")
    ledger.starting(a)
    ledger.starting(b)
    assert [item.jid for item in ledger.performing()] == ["j-a", "j-b"]
    ledger.performed(a)
    assert ledger.performing() == [b]


def test_an_identical_payload_performing_twice_is_listed_until_both_returned() -> None:
    ledger, first, second = Ledger(), work("same"), work("same")
    ledger.starting(first)
    ledger.starting(second)
    ledger.performed(first)
    assert [item.raw for item in ledger.performing()] == [first.raw]
    ledger.performed(second)
    assert ledger.performing() == []


def test_once_starts_are_closed_no_job_starts_and_the_performing_ones_are_returned() -> None:
    ledger, running_now, lagging = Ledger(), work("a", "j-a"), work("b", "j-b")
    assert ledger.starting(running_now) is True
    assert ledger.close_starts() == [running_now]
    assert ledger.starting(lagging) is False
    assert ledger.performing() == [running_now]


def test_while_performing_runs_the_action_only_inside_perform() -> None:
    ledger, job, calls = Ledger(), work("a"), []
    ledger.while_performing(job, lambda: calls.append("before"))
    ledger.starting(job)
    ledger.while_performing(job, lambda: calls.append("inside"))
    ledger.performed(job)
    ledger.while_performing(job, lambda: calls.append("after"))
    assert calls == ["inside"]


def test_pending_settlements_by_raw_payload_and_with_their_work() -> None:
    ledger, acked, filed = Ledger(), work("acked", "j-acked"), work("filed", "j-filed")
    filing = Filing(keys.RETRY, 12.5, filed.raw)
    ledger.settle_later(acked, ACK)
    ledger.settle_later(filed, filing)
    assert ledger.pending() == {acked.raw: ACK, filed.raw: filing}
    assert ledger.is_pending(acked) and ledger.is_pending(filed)
    assert ledger.pending_work() == [(acked, ACK), (filed, filing)]
    ledger.settled(acked)
    assert ledger.pending() == {filed.raw: filing}
    assert not ledger.is_pending(acked)


def test_a_later_settlement_of_the_same_payload_replaces_the_earlier() -> None:
    ledger, job = Ledger(), work("a")
    ledger.settle_later(job, ACK)
    filing = Filing(keys.DEAD, 1.0, job.raw)
    ledger.settle_later(job, filing)
    assert ledger.pending() == {job.raw: filing}


def test_busy_counts_the_threads_inside_working_even_when_the_block_raises() -> None:
    ledger = Ledger()
    with ledger.working():
        with ledger.working():
            assert ledger.busy == 2
        assert ledger.busy == 1
    try:
        with ledger.working():
            raise LookupError("a bug in processing")
    except LookupError:
        pass
    assert ledger.busy == 0


def test_a_payload_that_is_not_a_job_is_held_like_any_other() -> None:
    """Taken, it is running until settled (buried): reconcile must not see it as a stray."""
    ledger, bad = Ledger(), Work.taken("default", '{"class":"X","jid":"j-bad"}')
    assert isinstance(bad.job, Rejection) and bad.jid == "j-bad"
    ledger.taken(bad)
    ledger.settle_later(bad, Filing(keys.DEAD, 1.0, "{}"))
    assert ledger.running() == {bad.raw}
    assert bad.raw in ledger.pending()
