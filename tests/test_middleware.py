"""Middleware chains: order, re-adding, fresh instances, and their effect on real pushes."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

import cogworker
from cogworker import testing
from cogworker.middleware import Chain
from cogworker.wire import Payload


class MiddlewareJob(cogworker.Job, queue="mw"):
    name = "MiddlewareTest::MiddlewareJob"
    performed: list[tuple[str, list[Any]]] = []  # noqa: RUF012 - shared on purpose

    def perform(self, *args: Any) -> None:
        MiddlewareJob.performed.append((self.jid, list(args)))


@pytest.fixture(autouse=True)
def _reset_performed() -> None:
    MiddlewareJob.performed.clear()


# -- generic chain behaviour ----------------------------------------------------------------


class Tracer:
    """Appends ``before <label>`` / ``after <label>`` around the rest of the chain."""

    def __init__(self, label: str, trace: list[str]) -> None:
        self.label = label
        self.trace = trace

    def __call__(self, *args: Any) -> None:
        call_next = args[-1]
        self.trace.append(f"before {self.label}")
        call_next()
        self.trace.append(f"after {self.label}")


class OtherTracer(Tracer):
    pass


class Stopper:
    def __init__(self, trace: list[str]) -> None:
        self.trace = trace

    def __call__(self, *args: Any) -> None:
        self.trace.append("stopped")


def final_into(trace: list[str]) -> Callable[[], None]:
    return lambda: trace.append("final")


def test_order_trace() -> None:
    trace: list[str] = []
    chain = Chain()
    chain.add(Tracer, "a", trace)
    chain.add(OtherTracer, "b", trace)
    assert chain.invoke("x", final=final_into(trace)) is True
    assert trace == ["before a", "before b", "final", "after b", "after a"]


def test_call_arguments_are_passed_to_every_middleware() -> None:
    seen: list[tuple[Any, ...]] = []

    class Recorder:
        def __call__(self, *args: Any) -> None:
            seen.append(args[:-1])
            args[-1]()

    chain = Chain()
    chain.add(Recorder)
    chain.invoke(1, "two", {"three": 3}, final=lambda: None)
    assert seen == [(1, "two", {"three": 3})]


def test_empty_chain_runs_final() -> None:
    trace: list[str] = []
    assert Chain().invoke(final=final_into(trace)) is True
    assert trace == ["final"]


def test_re_adding_moves_to_the_end_with_new_arguments() -> None:
    trace: list[str] = []
    chain = Chain()
    chain.add(Tracer, "first", trace)
    chain.add(OtherTracer, "b", trace)
    chain.add(Tracer, "again", trace)
    assert list(chain) == [OtherTracer, Tracer]
    assert len(chain) == 2
    chain.invoke(final=final_into(trace))
    assert trace == ["before b", "before again", "final", "after again", "after b"]


def test_prepend_insert_before_remove_contains_copy_clear() -> None:
    trace: list[str] = []
    chain = Chain()
    chain.add(Tracer, "t", trace)
    chain.prepend(OtherTracer, "o", trace)
    assert list(chain) == [OtherTracer, Tracer]
    chain.insert_before(Tracer, Stopper, trace)
    assert list(chain) == [OtherTracer, Stopper, Tracer]
    assert Stopper in chain
    clone = chain.copy()
    chain.remove(Stopper)
    assert Stopper not in chain and list(chain) == [OtherTracer, Tracer]
    assert list(clone) == [OtherTracer, Stopper, Tracer]
    chain.clear()
    assert len(chain) == 0 and list(clone) == [OtherTracer, Stopper, Tracer]
    chain.insert_before(Tracer, Stopper, trace)  # anchor missing -> appended
    assert list(chain) == [Stopper]


def test_fresh_instance_per_invoke() -> None:
    instances: list[int] = []

    class Counting:
        def __init__(self) -> None:
            self.calls = 0
            instances.append(id(self))

        def __call__(self, *args: Any) -> None:
            self.calls += 1
            assert self.calls == 1, "an instance was reused"
            args[-1]()

    chain = Chain()
    chain.add(Counting)
    kept: list[object] = []  # keep the instances alive so ids can't be recycled

    class Keeper:
        def __call__(self, *args: Any) -> None:
            kept.append(self)
            args[-1]()

    chain.add(Keeper)
    chain.invoke(final=lambda: None)
    chain.invoke(final=lambda: None)
    assert len(instances) == 2
    assert len(kept) == 2 and kept[0] is not kept[1]


def test_stopping_middleware_skips_the_rest() -> None:
    trace: list[str] = []
    chain = Chain()
    chain.add(Tracer, "a", trace)
    chain.add(Stopper, trace)
    chain.add(OtherTracer, "c", trace)
    assert chain.invoke(final=final_into(trace)) is False
    assert trace == ["before a", "stopped", "after a"]


def test_an_invoke_leaves_no_reference_cycle_behind() -> None:
    # one invoke runs per push and per job: a cycle each would keep the collector busy
    trace: list[str] = []
    chain = Chain()
    chain.add(Tracer, "a", trace)
    chain.add(OtherTracer, "b", trace)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert chain.invoke("x", final=final_into(trace)) is True
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert trace.count("final") == 20


# -- client middleware on real pushes -------------------------------------------------------


def test_client_middleware_receives_the_push_context(
    config: cogworker.Config, r: redis.Redis
) -> None:
    seen: dict[str, Any] = {}

    class Inspect:
        def __call__(
            self,
            job_class: str,
            job: Payload,
            queue: str,
            redis_client: redis.Redis,
            call_next: Callable[[], None],
        ) -> None:
            seen.update(job_class=job_class, job=dict(job), queue=queue)
            # the client is live: a write through it reaches the server
            redis_client.set("seen-by-middleware", job["jid"])
            call_next()

    config.client_middleware.add(Inspect)
    jid = MiddlewareJob.perform_async(1, "a")
    assert seen["job_class"] == "MiddlewareTest::MiddlewareJob"
    assert seen["queue"] == "mw"
    assert seen["job"]["jid"] == jid and seen["job"]["args"] == [1, "a"]
    assert "created_at" in seen["job"] and "enqueued_at" not in seen["job"]
    assert r.get("seen-by-middleware") == jid


def test_client_middleware_modifying_the_job_is_seen_in_redis(
    config: cogworker.Config, r: redis.Redis
) -> None:
    class Tenant:
        def __init__(self, tenant: str) -> None:
            self.tenant = tenant

        def __call__(
            self,
            job_class: str,
            job: Payload,
            queue: str,
            redis_client: Any,
            call_next: Callable[[], None],
        ) -> None:
            job["tenant"] = self.tenant
            job["queue"] = "rerouted"
            job["args"].append("extra")
            call_next()

    config.client_middleware.add(Tenant, "acme")
    jid = MiddlewareJob.perform_async(1)
    assert r.exists("cogworker:queue:mw") == 0
    (raw,) = r.lrange("cogworker:queue:rerouted", 0, -1)
    job = json.loads(raw)
    assert job["jid"] == jid
    assert job["tenant"] == "acme"
    assert job["queue"] == "rerouted"
    assert job["args"] == [1, "extra"]
    assert r.smembers("cogworker:queues") == {"rerouted"}


def test_client_middleware_order_on_a_push(config: cogworker.Config, r: redis.Redis) -> None:
    trace: list[str] = []

    class Writes(Tracer):
        def __call__(self, *args: Any) -> None:
            super().__call__(*args)
            # after call_next returned, the job is already in Redis
            self.trace.append(f"queued={r.llen('cogworker:queue:mw')}")

    config.client_middleware.add(Tracer, "a", trace)
    config.client_middleware.add(Writes, "b", trace)
    MiddlewareJob.perform_async()
    assert trace == ["before a", "before b", "after b", "queued=1", "after a"]


def test_client_middleware_stopping_pushes_nothing(
    config: cogworker.Config, r: redis.Redis
) -> None:
    trace: list[str] = []
    config.client_middleware.add(Stopper, trace)
    assert MiddlewareJob.perform_async(1) is None
    assert MiddlewareJob.perform_in(10, 1) is None
    assert MiddlewareJob.set(queue="x").perform_async(1) is None
    assert MiddlewareJob.perform_bulk([[1], [2]]) == [None, None]
    assert trace == ["stopped"] * 5
    assert r.dbsize() == 0


def test_client_middleware_raising_pushes_nothing(config: cogworker.Config, r: redis.Redis) -> None:
    class Boom:
        def __call__(self, *args: Any) -> None:
            raise RuntimeError("refused by middleware")

    config.client_middleware.add(Boom)
    with pytest.raises(RuntimeError, match="refused by middleware"):
        MiddlewareJob.perform_async(1)
    with pytest.raises(RuntimeError, match="refused by middleware"):
        MiddlewareJob.perform_bulk([[1], [2]])
    assert r.dbsize() == 0


def test_client_middleware_raising_after_call_next_propagates(
    config: cogworker.Config, r: redis.Redis
) -> None:
    class LateBoom:
        def __call__(self, *args: Any) -> None:
            args[-1]()
            raise RuntimeError("after the push")

    config.client_middleware.add(LateBoom)
    with pytest.raises(RuntimeError, match="after the push"):
        MiddlewareJob.perform_async(1)
    # call_next had already written the job; the error still reaches the caller
    assert r.llen("cogworker:queue:mw") == 1


def test_client_middleware_runs_in_fake_mode(config: cogworker.Config, r: redis.Redis) -> None:
    class Tag:
        def __call__(
            self,
            job_class: str,
            job: Payload,
            queue: str,
            redis_client: Any,
            call_next: Callable[[], None],
        ) -> None:
            job["tagged"] = True
            call_next()

    config.client_middleware.add(Tag)
    with testing.fake():
        MiddlewareJob.perform_async(1)
    (job,) = testing.jobs(MiddlewareJob)
    assert job["tagged"] is True
    assert r.dbsize() == 0


# -- server middleware (inline mode) --------------------------------------------------------


def test_server_middleware_wraps_perform_inline(config: cogworker.Config, r: redis.Redis) -> None:
    trace: list[str] = []
    seen: list[tuple[Any, Payload, str]] = []

    class Around:
        def __init__(self, label: str) -> None:
            self.label = label

        def __call__(
            self,
            worker: cogworker.Job | None,
            job: Payload,
            queue: str,
            call_next: Callable[[], None],
        ) -> None:
            seen.append((worker, job, queue))
            trace.append(f"before {self.label}")
            call_next()
            trace.append(f"after {self.label} performed={len(MiddlewareJob.performed)}")

    class Inner(Around):
        pass

    config.server_middleware.add(Around, "a")
    config.server_middleware.add(Inner, "b")
    with testing.inline():
        jid = MiddlewareJob.perform_async(7)
    assert trace == ["before a", "before b", "after b performed=1", "after a performed=1"]
    assert MiddlewareJob.performed == [(jid, [7])]
    worker, job, queue = seen[0]
    assert isinstance(worker, MiddlewareJob) and worker.jid == jid
    assert job["jid"] == jid and job["args"] == [7]
    assert queue == "mw"
    assert r.dbsize() == 0


def test_server_middleware_not_calling_next_skips_perform(config: cogworker.Config) -> None:
    trace: list[str] = []
    config.server_middleware.add(Stopper, trace)
    with testing.inline():
        MiddlewareJob.perform_async(1)
    assert trace == ["stopped"]
    assert MiddlewareJob.performed == []


def test_server_middleware_raising_propagates_inline(config: cogworker.Config) -> None:
    class Boom:
        def __call__(self, *args: Any) -> None:
            raise RuntimeError("server side")

    config.server_middleware.add(Boom)
    with testing.inline(), pytest.raises(RuntimeError, match="server side"):
        MiddlewareJob.perform_async(1)
    assert MiddlewareJob.performed == []


def test_server_middleware_sees_perform_errors(config: cogworker.Config) -> None:
    caught: list[BaseException] = []

    class Failing(cogworker.Job, queue="mw"):
        name = "MiddlewareTest::Failing"

        def perform(self) -> None:
            raise ValueError("perform failed")

    class Catch:
        def __call__(self, *args: Any) -> None:
            try:
                args[-1]()
            except ValueError as error:
                caught.append(error)
                raise

    config.server_middleware.add(Catch)
    with testing.inline(), pytest.raises(ValueError, match="perform failed"):
        Failing.perform_async()
    assert [str(error) for error in caught] == ["perform failed"]


def test_server_middleware_gets_no_worker_for_an_unknown_class(
    config: cogworker.Config,
) -> None:
    workers: list[Any] = []

    class Look:
        def __call__(
            self, worker: Any, job: Payload, queue: str, call_next: Callable[[], None]
        ) -> None:
            workers.append(worker)
            call_next()

    config.server_middleware.add(Look)
    with testing.inline(), pytest.raises(cogworker.UnknownJobError, match="No::SuchJob"):
        cogworker.Client(config).push({"class": "No::SuchJob", "args": []})
    assert workers == [None]
