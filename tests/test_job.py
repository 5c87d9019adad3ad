"""Defining jobs (classes and @job functions) and what each enqueue form stores in Redis."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis

import cogworker
from cogworker import registry, wire

JID = re.compile(r"\A[0-9a-f]{24}\Z")
QUEUE_CRITICAL = "cogworker:queue:critical"
SCHEDULE = "cogworker:schedule"

# Classes at module level always name a queue, so that one src bug in option handling cannot
# break the collection of this whole file; the tests that leave it out define their classes
# inside the test.


class GreetingJob(cogworker.Job, queue="critical", retry=5, lock_run="x"):
    name = "TestJob::GreetingJob"

    def perform(self, name: str) -> None:
        pass


class LowGreetingJob(GreetingJob, queue="low", retry=False, lock_run="y"):
    def perform(self, name: str) -> None:
        pass


class UniqueGreetingJob(LowGreetingJob, queue="unique_q", unique="until_executed", extra=1):
    name = "TestJob::UniqueGreetingJob"


class TwoArgJob(cogworker.Job, queue="two"):
    name = "TestJob::TwoArgJob"

    def perform(self, a: Any, b: Any) -> None:
        pass


@cogworker.job(queue="low", retry=5, lock_run="z")
def send_receipt(order_id: int) -> str:
    """Send the receipt."""
    return f"receipt {order_id}"


@cogworker.job(name="TestJob::named_function", queue="fn")
def named_function(a: int, b: str) -> None:
    pass


def stored(r: redis.Redis, key: str) -> list[dict[str, Any]]:
    """The payloads of a queue, oldest (next to run) first."""
    return [json.loads(raw) for raw in reversed(r.lrange(key, 0, -1))]


def scheduled(r: redis.Redis) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(raw), score) for raw, score in r.zrange(SCHEDULE, 0, -1, withscores=True)]


# -- definitions ----------------------------------------------------------------------------


def test_class_options_are_the_class_keywords() -> None:
    assert GreetingJob.options == {"queue": "critical", "retry": 5, "lock_run": "x"}


def test_subclass_overrides_options_without_touching_the_parent() -> None:
    assert LowGreetingJob.options == {"queue": "low", "retry": False, "lock_run": "y"}
    assert UniqueGreetingJob.options == {
        "queue": "unique_q",
        "retry": False,
        "lock_run": "y",
        "unique": "until_executed",
        "extra": 1,
    }
    assert GreetingJob.options == {"queue": "critical", "retry": 5, "lock_run": "x"}


def test_subclass_without_keywords_inherits_every_option() -> None:
    class ChildJob(GreetingJob):
        pass

    assert ChildJob.options == {"queue": "critical", "retry": 5, "lock_run": "x"}
    assert ChildJob.name == (
        f"{__name__}.test_subclass_without_keywords_inherits_every_option.<locals>.ChildJob"
    )


def test_subclass_overriding_only_retry_keeps_parent_queue() -> None:
    class NoRetryJob(GreetingJob, retry=0):
        pass

    assert NoRetryJob.options == {"queue": "critical", "retry": 0, "lock_run": "x"}


def test_class_without_options_has_none() -> None:
    class PlainJob(cogworker.Job):
        def perform(self) -> None:
            pass

    assert PlainJob.options == {}


def test_class_with_only_retry_option() -> None:
    class RetryOnlyJob(cogworker.Job, retry=2):
        def perform(self) -> None:
            pass

    assert RetryOnlyJob.options == {"retry": 2}


def test_retry_false_and_zero_are_kept() -> None:
    class NeverRetryJob(cogworker.Job, queue="q", retry=False):
        def perform(self) -> None:
            pass

    assert NeverRetryJob.options == {"queue": "q", "retry": False}


@pytest.mark.parametrize(
    ("keywords", "key"),
    [
        ({"queue": ""}, "queue"),
        ({"queue": 5}, "queue"),
        ({"queue": "q", "retry": "x"}, "retry"),
        ({"queue": "q", "retry": 1.5}, "retry"),
        ({"queue": "q", "unique": "while_executing"}, "unique"),
    ],
    ids=repr,
)
def test_invalid_class_options_are_refused(keywords: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError) as raised:

        class BadJob(cogworker.Job, **keywords):
            def perform(self) -> None:
                pass

    assert key in str(raised.value)
    assert repr(keywords[key]) in str(raised.value)
    assert not any(name.endswith("BadJob") for name in registry.known_names())


def test_empty_name_is_refused() -> None:
    with pytest.raises(ValueError, match="name"):

        class BadNameJob(cogworker.Job, queue="q"):
            name = ""


def test_wire_names() -> None:
    assert GreetingJob.name == "TestJob::GreetingJob"
    # a subclass does not inherit its parent's explicit wire name
    assert LowGreetingJob.name == f"{__name__}.LowGreetingJob"
    assert send_receipt.name == f"{__name__}.send_receipt"
    assert named_function.name == "TestJob::named_function"


def test_registry_knows_both_names() -> None:
    assert registry.resolve("TestJob::GreetingJob") is GreetingJob
    assert registry.resolve(f"{__name__}.GreetingJob") is GreetingJob
    assert registry.resolve(f"{__name__}.LowGreetingJob") is LowGreetingJob
    assert registry.resolve("TestJob::named_function") is named_function.job_class
    assert registry.resolve(f"{__name__}.named_function") is named_function.job_class
    assert registry.resolve(f"{__name__}.send_receipt") is send_receipt.job_class
    assert "TestJob::GreetingJob" in registry.known_names()


def test_registry_refuses_unknown_names() -> None:
    with pytest.raises(cogworker.UnknownJobError, match="No::SuchJob"):
        registry.resolve("No::SuchJob")
    with pytest.raises(cogworker.UnknownJobError):
        registry.resolve(f"{__name__}.NoSuchJob")


def test_function_job_is_still_callable_and_wrapped() -> None:
    assert isinstance(send_receipt, cogworker.FunctionJob)
    assert send_receipt(42) == "receipt 42"
    assert send_receipt.__name__ == "send_receipt"
    assert send_receipt.__doc__ == "Send the receipt."
    assert send_receipt.job_class.options == {"queue": "low", "retry": 5, "lock_run": "z"}
    assert issubclass(send_receipt.job_class, cogworker.Job)


def test_bare_job_decorator() -> None:
    @cogworker.job
    def bare(x: int) -> int:
        return x * 2

    assert isinstance(bare, cogworker.FunctionJob)
    assert bare(4) == 8
    assert bare.name == f"{__name__}.test_bare_job_decorator.<locals>.bare"
    assert bare.job_class.options == {}


def test_job_decorator_without_queue() -> None:
    @cogworker.job(retry=1)
    def retry_once() -> None:
        pass

    assert retry_once.job_class.options == {"retry": 1}


# -- enqueue forms: what lands in Redis -----------------------------------------------------


def test_perform_async_payload_field_by_field(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    jid = GreetingJob.perform_async("Ada")
    after = time.time()
    assert jid is not None and JID.match(jid)
    (job,) = stored(r, QUEUE_CRITICAL)
    assert set(job) == {
        "queue",
        "retry",
        "lock_run",
        "class",
        "args",
        "jid",
        "created_at",
        "enqueued_at",
    }
    assert job["class"] == "TestJob::GreetingJob"
    assert job["args"] == ["Ada"]
    assert job["queue"] == "critical"
    assert job["retry"] == 5
    assert job["lock_run"] == "x"
    assert job["jid"] == jid
    assert isinstance(job["created_at"], float) and isinstance(job["enqueued_at"], float)
    assert before <= job["created_at"] <= job["enqueued_at"] <= after
    assert r.smembers("cogworker:queues") == {"critical"}
    assert r.exists(SCHEDULE) == 0
    # stored in the Ruby-compatible encoding
    raw = r.lindex(QUEUE_CRITICAL, 0)
    assert raw == wire.dumps(json.loads(raw))


def test_perform_async_without_class_options_gets_defaults(
    config: cogworker.Config, r: redis.Redis
) -> None:
    class DefaultsJob(cogworker.Job):
        name = "TestJob::DefaultsJob"

        def perform(self, n: int) -> None:
            pass

    DefaultsJob.perform_async(1)
    (job,) = stored(r, "cogworker:queue:default")
    assert job["queue"] == "default"
    assert job["retry"] is True
    assert job["args"] == [1]


def test_two_pushes_keep_fifo_order(config: cogworker.Config, r: redis.Redis) -> None:
    first = GreetingJob.perform_async("a")
    second = GreetingJob.perform_async("b")
    assert first != second
    assert [job["jid"] for job in stored(r, QUEUE_CRITICAL)] == [first, second]


def test_perform_in_seconds(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    jid = GreetingJob.perform_in(60, "Ada")
    after = time.time()
    ((job, score),) = scheduled(r)
    assert set(job) == {"queue", "retry", "lock_run", "class", "args", "at", "jid", "created_at"}
    assert job["jid"] == jid
    assert job["args"] == ["Ada"]
    assert job["queue"] == "critical"
    assert job["class"] == "TestJob::GreetingJob"
    assert before + 60 <= job["at"] <= after + 60
    assert score == job["at"]
    assert "enqueued_at" not in job
    assert r.exists(QUEUE_CRITICAL) == 0


def test_perform_in_fractional_seconds(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    GreetingJob.perform_in(0.25, "Ada")
    after = time.time()
    ((job, score),) = scheduled(r)
    assert before + 0.25 <= job["at"] <= after + 0.25
    assert score == job["at"]


def test_perform_in_timedelta(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    GreetingJob.perform_in(timedelta(minutes=5), "Ada")
    after = time.time()
    ((job, score),) = scheduled(r)
    assert before + 300 <= job["at"] <= after + 300
    assert score == job["at"]


@pytest.mark.parametrize(
    "when",
    [
        datetime(2031, 1, 2, 3, 4, 5, 250000, tzinfo=UTC),
        datetime(2031, 1, 2, 5, 4, 5, 250000, tzinfo=timezone(timedelta(hours=2))),
    ],
    ids=["utc", "plus2"],
)
def test_perform_at_aware_datetime(
    config: cogworker.Config, r: redis.Redis, when: datetime
) -> None:
    jid = GreetingJob.perform_at(when, "Ada")
    ((job, score),) = scheduled(r)
    expected = datetime(2031, 1, 2, 3, 4, 5, 250000, tzinfo=UTC).timestamp()
    assert job["at"] == expected
    assert score == expected
    assert job["jid"] == jid
    assert "enqueued_at" not in job


def test_perform_at_epoch(config: cogworker.Config, r: redis.Redis) -> None:
    GreetingJob.perform_at(1924992000.5, "Ada")
    ((job, score),) = scheduled(r)
    assert job["at"] == 1924992000.5
    assert score == 1924992000.5


def test_perform_at_naive_datetime_is_refused(config: cogworker.Config, r: redis.Redis) -> None:
    with pytest.raises(ValueError, match="aware"):
        GreetingJob.perform_at(datetime(2031, 1, 1, 12, 0), "Ada")
    with pytest.raises(ValueError, match="aware"):
        send_receipt.perform_at(datetime(2031, 1, 1, 12, 0), 1)
    assert r.dbsize() == 0


@pytest.mark.parametrize("when", [True, "2031-01-01", math.nan, math.inf])
def test_perform_at_refuses_other_values(
    config: cogworker.Config, r: redis.Redis, when: Any
) -> None:
    with pytest.raises(TypeError):
        GreetingJob.perform_at(when, "Ada")
    assert r.dbsize() == 0


@pytest.mark.parametrize(
    ("interval", "error"),
    [(True, TypeError), ("5", TypeError), (math.nan, ValueError), (math.inf, ValueError)],
)
def test_perform_in_refuses_other_values(
    config: cogworker.Config, r: redis.Redis, interval: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        GreetingJob.perform_in(interval, "Ada")
    assert r.dbsize() == 0


def test_set_overrides_options_for_that_push_only(config: cogworker.Config, r: redis.Redis) -> None:
    jid = GreetingJob.set(queue="low", retry=False, lock_run="y", tags=["t"]).perform_async("A")
    (job,) = stored(r, "cogworker:queue:low")
    assert job["jid"] == jid
    assert job["queue"] == "low"
    assert job["retry"] is False
    assert job["lock_run"] == "y"
    assert job["tags"] == ["t"]
    assert job["class"] == "TestJob::GreetingJob"
    assert job["args"] == ["A"]
    assert "enqueued_at" in job
    assert r.exists(QUEUE_CRITICAL) == 0
    GreetingJob.perform_async("B")
    (plain,) = stored(r, QUEUE_CRITICAL)
    assert (plain["queue"], plain["retry"], plain["lock_run"]) == ("critical", 5, "x")
    assert "tags" not in plain
    assert r.smembers("cogworker:queues") == {"low", "critical"}


def test_set_perform_in_and_perform_at(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    GreetingJob.set(queue="later").perform_in(30, "A")
    GreetingJob.set(queue="later").perform_at(2000000000.0, "B")
    after = time.time()
    jobs = {job["args"][0]: (job, score) for job, score in scheduled(r)}
    assert jobs["A"][0]["queue"] == "later" and before + 30 <= jobs["A"][1] <= after + 30
    assert jobs["B"][0]["queue"] == "later" and jobs["B"][1] == 2000000000.0


@pytest.mark.parametrize("overrides", [{"queue": ""}, {"retry": "x"}, {"unique": "nope"}])
def test_set_validates_overrides(config: cogworker.Config, overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GreetingJob.set(**overrides)
    with pytest.raises(ValueError):
        send_receipt.set(**overrides)


def test_set_with_explicit_client(
    config: cogworker.Config, r: redis.Redis, redis_server_factory: Any
) -> None:
    other = redis_server_factory()
    other_config = cogworker.Config(redis_url=other.url)
    try:
        jid = GreetingJob.set(client=cogworker.Client(other_config)).perform_async("A")
        other_r = other_config.redis()
        assert [json.loads(raw)["jid"] for raw in other_r.lrange(QUEUE_CRITICAL, 0, -1)] == [jid]
        assert r.dbsize() == 0
    finally:
        other_config.close()


def test_perform_bulk(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    jids = GreetingJob.perform_bulk([["a"], ["b"], ("c",)])
    after = time.time()
    assert len(jids) == 3 and len(set(jids)) == 3
    jobs = stored(r, QUEUE_CRITICAL)
    assert [job["jid"] for job in jobs] == jids
    assert [job["args"] for job in jobs] == [["a"], ["b"], ["c"]]
    for job in jobs:
        assert set(job) == {
            "queue",
            "retry",
            "lock_run",
            "class",
            "args",
            "jid",
            "created_at",
            "enqueued_at",
        }
        assert (job["class"], job["queue"], job["retry"], job["lock_run"]) == (
            "TestJob::GreetingJob",
            "critical",
            5,
            "x",
        )
        assert before <= job["created_at"] <= job["enqueued_at"] <= after
    assert r.smembers("cogworker:queues") == {"critical"}


def test_perform_bulk_with_a_bad_item_pushes_nothing(
    config: cogworker.Config, r: redis.Redis
) -> None:
    with pytest.raises(TypeError, match="argument 0"):
        GreetingJob.perform_bulk([["a"], [{1, 2}], ["c"]])
    assert r.dbsize() == 0


def test_perform_bulk_refuses_a_string_as_an_argument_list(
    config: cogworker.Config, r: redis.Redis
) -> None:
    # a str is a Sequence, but "ab" would silently become the two arguments "a", "b"
    with pytest.raises(TypeError):
        TwoArgJob.perform_bulk(["ab"])
    assert r.dbsize() == 0


def test_function_job_enqueue_forms(config: cogworker.Config, r: redis.Redis) -> None:
    before = time.time()
    first = send_receipt.perform_async(1)
    second = send_receipt.set(queue="other", retry=1).perform_async(2)
    bulk = send_receipt.perform_bulk([[3], [4]])
    delayed = send_receipt.perform_in(timedelta(seconds=90), 5)
    at = send_receipt.perform_at(2100000000.0, 6)
    after = time.time()

    low = stored(r, "cogworker:queue:low")
    assert [job["jid"] for job in low] == [first, *bulk]
    assert [job["args"] for job in low] == [[1], [3], [4]]
    for job in low:
        assert job["class"] == f"{__name__}.send_receipt"
        assert (job["queue"], job["retry"], job["lock_run"]) == ("low", 5, "z")
    (other,) = stored(r, "cogworker:queue:other")
    assert (other["jid"], other["queue"], other["retry"], other["args"]) == (
        second,
        "other",
        1,
        [2],
    )
    later = {job["jid"]: (job, score) for job, score in scheduled(r)}
    assert set(later) == {delayed, at}
    assert before + 90 <= later[delayed][1] <= after + 90
    assert later[at][1] == 2100000000.0
    assert later[at][0]["args"] == [6]


def test_named_function_payload(config: cogworker.Config, r: redis.Redis) -> None:
    named_function.perform_async(1, "x")
    (job,) = stored(r, "cogworker:queue:fn")
    assert job["class"] == "TestJob::named_function"
    assert job["args"] == [1, "x"]
    assert job["retry"] is True  # no class option: normalisation's default


# -- refusals: nothing is pushed ------------------------------------------------------------


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda: GreetingJob.perform_async(name="Ada"),
        lambda: GreetingJob.perform_in(5, name="Ada"),
        lambda: GreetingJob.perform_at(2000000000.0, name="Ada"),
        lambda: GreetingJob.set(queue="low").perform_async(name="Ada"),
        lambda: send_receipt.perform_async(order_id=1),
        lambda: send_receipt.perform_in(5, order_id=1),
        lambda: send_receipt.set(queue="x").perform_async(order_id=1),
        lambda: cogworker.Client().enqueue(GreetingJob, name="Ada"),
    ],
    ids=["async", "in", "at", "set", "fn_async", "fn_in", "fn_set", "client_enqueue"],
)
def test_keyword_arguments_are_refused(
    config: cogworker.Config, r: redis.Redis, enqueue: Any
) -> None:
    with pytest.raises(TypeError, match="keyword"):
        enqueue()
    assert r.dbsize() == 0


@pytest.mark.parametrize(
    "bad",
    [
        datetime(2024, 1, 1, tzinfo=UTC),
        {1, 2},
        object(),
        math.nan,
        math.inf,
        -math.inf,
        {1: "one"},
        [datetime(2024, 1, 1)],
    ],
    ids=["datetime", "set", "object", "nan", "inf", "-inf", "int_key", "nested"],
)
def test_non_json_arguments_are_refused(config: cogworker.Config, r: redis.Redis, bad: Any) -> None:
    for enqueue in (
        lambda: TwoArgJob.perform_async("ok", bad),
        lambda: TwoArgJob.perform_in(10, "ok", bad),
        lambda: TwoArgJob.perform_at(2000000000.0, "ok", bad),
        lambda: TwoArgJob.set(queue="x").perform_async("ok", bad),
        lambda: named_function.perform_async("ok", bad),
    ):
        with pytest.raises(TypeError, match="argument 1"):
            enqueue()
    assert r.dbsize() == 0


# -- the arguments must fit perform's signature at enqueue time ----------------------------


class ExternalJob(cogworker.Job, queue="ruby"):
    """Only named here: Ruby workers run it, so there is no perform to check against."""

    name = "JobTest::RubyOnly"  # a name no other test expects to be unknown


@pytest.mark.parametrize(
    ("enqueue", "message"),
    [
        (lambda: GreetingJob.perform_async(), "missing a required argument: 'name'"),
        (lambda: GreetingJob.perform_async("a", "b"), "too many positional arguments"),
        (lambda: GreetingJob.perform_in(5, "a", "b"), "too many positional arguments"),
        (lambda: GreetingJob.perform_at(time.time() + 5), "missing a required argument"),
        (lambda: GreetingJob.set(queue="low").perform_async(), "missing a required argument"),
        (lambda: TwoArgJob.perform_bulk([[1, 2], [1]]), "missing a required argument: 'b'"),
        (lambda: send_receipt.perform_async(), "missing a required argument: 'order_id'"),
        (lambda: send_receipt.perform_async(1, 2), "too many positional arguments"),
        (lambda: named_function.set(queue="x").perform_async(1), "missing a required argument"),
    ],
)
def test_arguments_that_perform_cannot_take_are_refused_and_nothing_is_pushed(
    config: cogworker.Config, r: redis.Redis, enqueue: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)) as raised:
        enqueue()
    assert "can't enqueue" in str(raised.value)
    assert r.dbsize() == 0


def test_defaults_and_varargs_of_perform_are_honoured_at_enqueue(
    config: cogworker.Config, r: redis.Redis
) -> None:
    class FlexibleJob(cogworker.Job, queue="flex"):
        def perform(self, first: int, second: int = 2, *rest: int) -> None:
            pass

    @cogworker.job(queue="flex")
    def flexible(first: int, *rest: int) -> None:
        pass

    FlexibleJob.perform_async(1)
    FlexibleJob.perform_async(1, 2, 3, 4)
    flexible.perform_async(1, 2, 3)
    ExternalJob.perform_async(1, "anything", [2])  # no perform here: the Ruby worker decides
    assert r.llen("cogworker:queue:flex") == 3
    assert r.llen("cogworker:queue:ruby") == 1


def test_keyword_only_parameters_of_perform_are_judged_at_enqueue(
    config: cogworker.Config, r: redis.Redis
) -> None:
    # positional arguments can never fill a keyword-only parameter: one without a default
    # refuses every push, one with a default (or **options) takes none of them
    class OptionsJob(cogworker.Job, queue="kw"):
        def perform(self, first: int, *, verbose: bool = False, **options: Any) -> None:
            pass

    class NeverJob(cogworker.Job, queue="kw"):
        def perform(self, first: int, *, required: bool) -> None:
            pass

    OptionsJob.perform_async(1)
    OptionsJob.perform_bulk([[1], [2]])
    with pytest.raises(TypeError, match="too many positional arguments"):
        OptionsJob.perform_async(1, True)
    with pytest.raises(TypeError, match="missing a required argument: 'required'"):
        NeverJob.perform_async(1)
    assert r.llen("cogworker:queue:kw") == 3
