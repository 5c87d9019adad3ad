"""Telling "Redis is unavailable" from real errors, with the errors Redis
really sends, and collapsing an outage into one line, a summary a minute and a recovery line."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_for
from redis._parsers.base import BaseParser
from redis.backoff import NoBackoff
from redis.retry import Retry
from runtime_support import AclServer

from cogworker import redis_errors
from cogworker.local.server import RedisServer, free_port
from cogworker.redis_errors import ErrorReporter, is_unavailable

ServerFactory = Callable[..., RedisServer]


def raised(call: Callable[[], object]) -> BaseException:
    """The error ``call`` raises (it must raise a Redis error)."""
    with pytest.raises(redis.RedisError) as info:
        call()
    return info.value


@pytest.fixture
def server(redis_server_factory: ServerFactory) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    plain = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield plain
    finally:
        plain.close()


# -- unavailable: "try again shortly" -----------------------------------------------------------


def test_connection_refused_is_unavailable() -> None:
    closed = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    try:
        error = raised(closed.ping)
    finally:
        closed.close()
    assert isinstance(error, redis.ConnectionError)
    assert is_unavailable(error)


def test_socket_timeout_is_unavailable(server: RedisServer) -> None:
    impatient = redis.Redis.from_url(server.url, socket_timeout=0.1, retry=Retry(NoBackoff(), 0))
    try:
        error = raised(lambda: impatient.execute_command("DEBUG", "SLEEP", "0.5"))
    finally:
        impatient.close()
    assert isinstance(error, redis.TimeoutError)
    assert is_unavailable(error)


def test_busy_script_reply_is_unavailable(redis_server_factory: ServerFactory) -> None:
    busy = redis_server_factory(config_lines=["lua-time-limit 50"])  # (busy-reply-threshold in 7)
    runner = redis.Redis.from_url(busy.url, decode_responses=True)
    other = redis.Redis.from_url(busy.url, decode_responses=True)
    outcome: list[BaseException] = []

    def spin() -> None:
        try:
            runner.eval("while true do end", 0)
        except redis.RedisError as error:
            outcome.append(error)

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        error = wait_for(lambda: _busy_error(other))
    finally:
        wait_for(lambda: _script_killed(other))
        spinner.join(10)
        runner.close()
        other.close()
    assert str(error).startswith("BUSY ")
    assert is_unavailable(error)
    assert outcome and not is_unavailable(outcome[0])  # "Script killed by user" is not


def _busy_error(client: redis.Redis) -> BaseException | None:
    try:
        client.get("anything")
    except redis.ResponseError as error:
        return error
    return None


def _script_killed(client: redis.Redis) -> bool:
    try:
        client.script_kill()
    except redis.ResponseError:
        return False  # NOTBUSY: not running yet / any more
    return True


@pytest.mark.parametrize("stale", [False, True], ids=["READONLY", "MASTERDOWN"])
def test_replica_replies_during_a_failover_are_unavailable(
    redis_server_factory: ServerFactory, stale: bool
) -> None:
    """A worker whose Redis was demoted to a replica (READONLY), or a replica that lost its
    master (MASTERDOWN), must be told "try again shortly", like a lost connection."""
    master = redis_server_factory()
    replica = redis_server_factory(config_lines=[f"replicaof 127.0.0.1 {master.port}"])
    client = redis.Redis.from_url(replica.url, decode_responses=True)
    try:
        if stale:
            master.stop()
            client.config_set("replica-serve-stale-data", "no")
            error = raised(lambda: client.get("cogworker:stats:processed"))
            assert "replica-serve-stale-data" in str(error)
        else:
            error = raised(lambda: client.lpush("cogworker:queue:default", "{}"))
            assert "read only replica" in str(error)
    finally:
        client.close()
    assert is_unavailable(error)


@pytest.mark.parametrize(
    ("wire", "unavailable"),
    [
        # replies that can't be provoked on a single stand-alone server, as redis-py parses them
        ("LOADING Redis is loading the dataset in memory", True),
        ("TRYAGAIN Multiple keys request during rehashing of slot", True),
        # a script error as Redis < 7 wraps it
        (
            "ERR Error running script (call to f_0123): @user_script:1: "
            "-READONLY You can't write against a read only replica.",
            True,
        ),
        ("ERR Error running script (call to f_0123): @user_script:1: -BUSYKEY Target", False),
        ("ERR Error running script (call to f_0123): @user_script:1: -READONLYISH x", False),
    ],
)
def test_parsed_wire_replies(wire: str, unavailable: bool) -> None:
    error = BaseParser.parse_error(wire)
    assert is_unavailable(error) is unavailable


# -- real errors: logged in full every time ------------------------------------------------------


def test_command_errors_are_not_unavailable(
    client: redis.Redis, redis_server_factory: ServerFactory
) -> None:
    client.set("a-string", "x")
    client.set("restored", "v")
    client.xadd("stream", {"f": "1"})
    client.xgroup_create("stream", "group")
    errors = {
        "WRONGTYPE": raised(lambda: client.lpush("a-string", "x")),
        "WRONGTYPE in a script": raised(
            lambda: client.eval("return redis.call('LPUSH', KEYS[1], 'x')", 1, "a-string")
        ),
        "BUSYKEY": raised(lambda: client.restore("restored", 0, client.dump("restored"))),
        "BUSYGROUP": raised(lambda: client.xgroup_create("stream", "group")),
        "unknown command": raised(lambda: client.execute_command("NOSUCHCOMMAND")),
    }
    acl = AclServer(redis_server_factory)
    acl.deny("lpush")
    worker = redis.Redis.from_url(acl.worker_url, decode_responses=True)
    try:
        errors["NOPERM"] = raised(lambda: worker.lpush("q", "x"))
    finally:
        worker.close()
        acl.close()
    assert {name: is_unavailable(error) for name, error in errors.items()} == dict.fromkeys(
        errors, False
    )
    assert is_unavailable(ValueError("not a Redis error")) is False


# -- collapsing an outage into a few lines -------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def connection_error() -> BaseException:
    closed = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    try:
        return raised(closed.ping)
    finally:
        closed.close()


def lines(caplog: pytest.LogCaptureFixture, site: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{site}:")]


def test_an_outage_is_one_line_a_summary_a_minute_and_a_recovery_line(
    caplog: pytest.LogCaptureFixture, connection_error: BaseException
) -> None:
    clock = Clock()
    reporter = ErrorReporter(clock=clock)
    for _ in range(100):
        reporter.report("Fetch", connection_error)
    logged = lines(caplog, "Fetch")
    assert len(logged) == 1
    assert logged[0].startswith("Fetch: Redis unavailable — ConnectionError: ")
    assert "(repeats summarized every 60s)" in logged[0]
    clock.now += 59
    reporter.report("Fetch", connection_error)
    assert len(lines(caplog, "Fetch")) == 1  # no summary before a minute has passed
    clock.now += 1
    reporter.report("Fetch", connection_error)
    logged = lines(caplog, "Fetch")
    assert len(logged) == 2
    assert logged[1].startswith("Fetch: Redis still unavailable — 101 more error(s) in the last")
    assert "latest: ConnectionError" in logged[1]
    assert reporter.in_outage("Fetch")
    reporter.recovered("Fetch")
    reporter.recovered("Fetch")  # only one recovery line
    logged = lines(caplog, "Fetch")
    assert logged[2:] == ["Fetch: Redis available again after 102 error(s) over 60s"]
    assert not reporter.in_outage("Fetch")


def test_hundred_reports_then_a_minute_then_recovery(
    caplog: pytest.LogCaptureFixture, connection_error: BaseException
) -> None:
    """An outage reported 100 times is one line; a minute later one line sums up the
    errors since; recovery is one WARNING line with the total and the duration."""
    clock = Clock()
    reporter = ErrorReporter(clock=clock)
    for _ in range(100):
        reporter.report("Heartbeat", connection_error)
    assert len(lines(caplog, "Heartbeat")) == 1
    clock.now += 60
    reporter.report("Heartbeat", connection_error)
    assert "100 more error(s) in the last 60s" in lines(caplog, "Heartbeat")[1]
    reporter.recovered("Heartbeat")
    assert lines(caplog, "Heartbeat")[2] == (
        "Heartbeat: Redis available again after 101 error(s) over 60s"
    )
    assert caplog.records[-1].levelname == "WARNING"


def test_other_errors_are_logged_every_time_and_sites_are_separate(
    caplog: pytest.LogCaptureFixture, client: redis.Redis, connection_error: BaseException
) -> None:
    client.set("a-string", "x")
    wrong_type = raised(lambda: client.lpush("a-string", "x"))
    reporter = ErrorReporter(clock=Clock())
    for _ in range(3):
        reporter.report("Bookkeeping", wrong_type)
    assert lines(caplog, "Bookkeeping") == [f"Bookkeeping: ResponseError: {wrong_type}"] * 3
    assert not reporter.in_outage("Bookkeeping")
    reporter.recovered("Bookkeeping")  # nothing to recover from: no line
    assert len(lines(caplog, "Bookkeeping")) == 3
    reporter.report("Fetch", connection_error)
    reporter.report("Heartbeat", connection_error)
    assert len(lines(caplog, "Fetch")) == 1 and len(lines(caplog, "Heartbeat")) == 1
    reporter.recovered("Fetch")
    assert reporter.in_outage("Heartbeat") and not reporter.in_outage("Fetch")


def test_a_failover_outage_is_collapsed_too(
    redis_server_factory: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    master = redis_server_factory()
    replica = redis_server_factory(config_lines=[f"replicaof 127.0.0.1 {master.port}"])
    demoted = redis.Redis.from_url(replica.url, decode_responses=True)
    try:
        read_only = raised(lambda: demoted.lpush("cogworker:queue:default", "{}"))
    finally:
        demoted.close()
    reporter = ErrorReporter(clock=Clock())
    for _ in range(100):
        reporter.report("Heartbeat", read_only)
    assert len(lines(caplog, "Heartbeat")) == 1


def test_the_process_wide_reporter_can_be_reset(connection_error: BaseException) -> None:
    redis_errors.reporter.report("Reset test", connection_error)
    assert redis_errors.reporter.in_outage("Reset test")
    redis_errors.reporter.reset()
    assert not redis_errors.reporter.in_outage("Reset test")
