"""Redis Sentinel: ``redis+sentinel://`` URLs, and cogworker's connections across a fail-over.

The fail-overs are real: a primary and a replica (``redis-server``) and a sentinel
(``redis-server --sentinel``) on loopback, with the sentinel's timings shortened
(``sentinel_support.SentinelSet``). A manual fail-over (SENTINEL FAILOVER) and a primary
killed with SIGKILL are both shown to a real worker process, which must reconnect on its
own. Jobs record their runs in a file, not in Redis: what Redis replication may lose must
not be able to hide a lost job.
"""

from __future__ import annotations

import signal
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import wait_for
from runtime_support import (
    StartWorker,
    Worker,
    cogworker_env,
    holds,
    listening,
    started_workers,
)
from sentinel_support import SERVICE, SentinelSet

import cogworker
from cogworker import api, connection, keys, redis_errors
from cogworker.fetch.blocking import BlockingConnection
from cogworker.local.server import free_port
from cogworker.worker.heartbeat import Heartbeat
from cogworker.worker.identity import new_identity
from cogworker.worker.manager import Manager

pytestmark = pytest.mark.slow  # the full run only: Sentinel fail-overs of private servers

JOBS_MODULE = textwrap.dedent(
    '''
    """Jobs that note their runs in a file (a record no fail-over of Redis can lose)."""
    import os
    import time

    import cogworker


    def note(line):
        with open(os.environ["TEST_LEDGER"], "a") as ledger:
            ledger.write(line + "\\n")


    class NoteJob(cogworker.Job):
        name = "NoteJob"

        def perform(self, marker):
            note(f"ran {self.jid} {marker}")


    class GateJob(cogworker.Job):
        """Notes its start, then waits for the gate file (at most 60 s) before it ends."""

        name = "GateJob"

        def perform(self, marker):
            note(f"started {self.jid} {marker}")
            deadline = time.monotonic() + 60
            while not os.path.exists(os.environ["TEST_GATE"]) and time.monotonic() < deadline:
                time.sleep(0.02)
            note(f"ran {self.jid} {marker}")
    '''
)

WORKER_CONFIG = """\
heartbeat_interval: 0.2
poll_interval: 0.2
concurrency: 2
"""


@contextmanager
def running_sentinels(redis_server_factory: Any, **timings: int) -> Iterator[SentinelSet]:
    """A ``SentinelSet`` (``timings``: its ``down_after_ms``...) whose log a failure shows."""
    servers = SentinelSet(redis_server_factory, **timings)
    try:
        yield servers
    finally:
        print(f"--- sentinel log:\n{servers.log()}")
        servers.close()


@pytest.fixture
def sentinels(redis_server_factory: Any) -> Iterator[SentinelSet]:
    """Quick to fail over (down after 500 ms): only for tests that never stall the primary."""
    with running_sentinels(redis_server_factory) as servers:
        yield servers


@pytest.fixture
def patient_sentinels(redis_server_factory: Any) -> Iterator[SentinelSet]:
    """Down after 10 s: for tests that keep the primary from answering the sentinel's PING
    for a while (a busy script, a password being set), where a fail-over must not happen."""
    with running_sentinels(redis_server_factory, down_after_ms=10_000) as servers:
        yield servers


@pytest.fixture
def start_worker(tmp_path: Path, sentinels: SentinelSet) -> Iterator[StartWorker]:
    """``cogworker run --redis-url redis+sentinel://...`` in ``tmp_path``."""
    (tmp_path / "sentinel_jobs.py").write_text(JOBS_MODULE)
    (tmp_path / "worker.yml").write_text(WORKER_CONFIG)
    env = cogworker_env(
        sentinels.url, TEST_LEDGER=str(tmp_path / "ledger"), TEST_GATE=str(tmp_path / "gate")
    )
    with started_workers(tmp_path) as workers:

        def start() -> Worker:
            args = ["run", "-r", "sentinel_jobs", "-C", "worker.yml"]
            return workers.start([*args, "--redis-url", sentinels.url], env)

        yield start


@pytest.fixture
def producer(sentinels: SentinelSet) -> Iterator[cogworker.Client]:
    with cogworker.Client(cogworker.Config(redis_url=sentinels.url)) as client:
        yield client


def ledger(directory: Path, what: str = "ran") -> list[str]:
    """The jids noted as ``what`` (ran / started), in the order noted."""
    path = directory / "ledger"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split()[1] for line in lines if line.startswith(f"{what} ")]


def push(producer: cogworker.Client, job_class: str, marker: str) -> str:
    jid = producer.push({"class": job_class, "args": [marker], "queue": "default"})
    assert jid is not None
    return jid


def queued_jids(client: redis.Redis) -> list[str]:
    return [cogworker.wire.loads(raw)["jid"] for raw in client.lrange(keys.queue("default"), 0, -1)]


# -- the URL ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "redis+sentinel://s1,s2:26380/mymaster",
            connection.SentinelUrl((("s1", 26379), ("s2", 26380)), "mymaster", 0),
        ),
        (
            "redis+sentinel://:p%40ss@[::1]:5000/orders/3",
            connection.SentinelUrl((("::1", 5000),), "orders", 3, password="p@ss"),
        ),
        (
            "redis+sentinel://app:pw@s1/svc/1?sentinel_username=watch&sentinel_password=s%2Cpw",
            connection.SentinelUrl(
                (("s1", 26379),),
                "svc",
                1,
                username="app",
                password="pw",
                sentinel_username="watch",
                sentinel_password="s,pw",
            ),
        ),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_service_and_the_credentials(
    url: str, expected: connection.SentinelUrl
) -> None:
    assert connection.parse_sentinel_url(url) == expected
    assert cogworker.Config(redis_url=url).redis_url == url


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://s1", "the service name is missing"),
        ("redis+sentinel://s1/svc/x", "the database must be a number, got 'x'"),
        ("redis+sentinel://s1/svc/0/extra", "the path must be /service[/db]"),
        ("redis+sentinel://s1,/svc", "an empty sentinel host"),
        ("redis+sentinel://s1:99999/svc", "bad port '99999' for sentinel s1"),
        ("redis+sentinel://:secret@s1/svc?db=2", "unknown option 'db'"),
        ("redis+sentinel://:secret@s1/svc?socket_timeout=1", "unknown option 'socket_timeout'"),
        ("redis+sentinel://s1/svc?sentinel_password=a&sentinel_password=b", "given twice"),
        ("redis+sentinel://s1/svc?sentinel_password=", "'sentinel_password' is empty"),
        ("redis+sentinel://s1/svc#frag", "a fragment"),
    ],
)
def test_a_bad_sentinel_url_is_refused_in_one_line_without_its_password(
    url: str, problem: str
) -> None:
    with pytest.raises(cogworker.ConfigError) as raised:
        cogworker.Config(redis_url=url)
    message = str(raised.value)
    assert problem in message and message.startswith("redis_url ")
    assert "\n" not in message and "secret" not in message


def test_the_redacted_url_shows_no_password() -> None:
    url = "redis+sentinel://app:pw1@s1,[::1]:5000/svc/2?sentinel_password=pw2"
    assert connection.redacted_url(url) == "redis+sentinel://s1:26379,[::1]:5000/svc/2"


# -- connections through the sentinel ------------------------------------------------------


def test_a_client_reaches_the_primary_through_a_later_sentinel_when_the_first_is_down(
    sentinels: SentinelSet,
) -> None:
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{sentinels.sentinel.port}/"
    client = connection.connect(url + f"{SERVICE}/2")
    try:
        client.set("where", "here")
        primary = redis.Redis(port=sentinels.primary().port, db=2, decode_responses=True)
        with primary:
            assert primary.get("where") == "here"
    finally:
        client.close()


def test_the_url_password_goes_to_the_primary_and_sentinel_password_to_the_sentinel(
    patient_sentinels: SentinelSet,
) -> None:
    # patient: the sentinel's own links re-authenticate as the passwords are set
    sentinels = patient_sentinels
    for server in sentinels.servers:  # the replica must still follow, so masterauth first
        sentinels.client(server).config_set("masterauth", "data-pw")
    sentinels.control.sentinel_set(SERVICE, "auth-pass", "data-pw")
    for server in sentinels.servers:
        sentinels.client(server).config_set("requirepass", "data-pw")
    sentinels.control.execute_command("ACL", "SETUSER", "watcher", "on", ">watch-pw", "+@all")
    sentinels.control.execute_command("ACL", "SETUSER", "default", "off")
    base = f"redis+sentinel://:data-pw@127.0.0.1:{sentinels.sentinel.port}/{SERVICE}"

    client = connection.connect(base + "?sentinel_username=watcher&sentinel_password=watch-pw")
    try:
        assert client.incr("logged-in") == 1
    finally:
        client.close()
    refused = connection.connect(base)  # no sentinel credentials: the sentinel says no
    try:
        with pytest.raises(redis.ConnectionError, match=r"No master found.*AuthenticationError"):
            refused.ping()
    finally:
        refused.close()


def test_a_command_whose_reply_is_late_is_not_sent_again(
    patient_sentinels: SentinelSet,
) -> None:
    # the script counts, then runs longer than the socket timeout: redis-py's default retry
    # would send it again on the timeout and count twice. It also keeps the primary from
    # answering the sentinel for 500 ms: hence patient sentinels, or they could fail over
    sentinels = patient_sentinels
    first = sentinels.primary()
    slow = """
    redis.call('INCR', KEYS[1])
    local t0 = redis.call('TIME')
    repeat local t = redis.call('TIME')
    until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 500000
    redis.call('RPUSH', KEYS[2], 'done')
    """
    client = connection.connect(sentinels.url, socket_timeout=0.2)
    watcher = sentinels.client(first)
    try:
        with pytest.raises(redis.TimeoutError):
            client.eval(slow, 2, "count", "ends")
        wait_for(lambda: watcher.llen("ends") >= 1)
        holds(lambda: watcher.llen("ends") == 1 and watcher.get("count") == "1", 1.0)
        assert sentinels.primary_port() == first.port  # no fail-over came in between
    finally:
        client.close()


def test_pooled_dedicated_and_blocking_connections_follow_a_failover(
    sentinels: SentinelSet,
) -> None:
    config = cogworker.Config(redis_url=sentinels.url)
    client = config.redis()
    held = connection.dedicated(client)
    blocking = BlockingConnection(config, block_seconds=10)
    first = sentinels.primary()
    try:
        client.set("before", "1")
        held.send_command("SET", "held-before", "1")
        assert held.read_response() == "OK"
        ended: list[Any] = []
        waiting = threading.Thread(
            target=lambda: ended.append(_outcome(blocking, "BLMOVE", "q", "d", "RIGHT", "LEFT", 10))
        )
        waiting.start()
        wait_for(lambda: sentinels.client(first).info("clients")["blocked_clients"] == 1)

        new = sentinels.fail_over()
        waiting.join(10)
        # the former primary ends the block as it becomes a replica (as a wake, or dropped)
        assert ended and ended[0] in (None, "ConnectionError"), ended
        client.set("after", "1")  # an idle pooled connection reconnects before any command
        assert sentinels.client(new).get("after") == "1"
        assert _send_allowing_one_error(held, "SET", "held-after", "1") == "OK"
        assert (held.port, sentinels.client(new).get("held-after")) == (new.port, "1")
        client.lpush("q", "job")
        assert blocking.call("BLMOVE", "q", "d", "RIGHT", "LEFT", 5) == "job"
        assert sentinels.client(new).lrange("d", 0, -1) == ["job"]
    finally:
        held.disconnect()
        blocking.close()
        config.close()


def _outcome(blocking: BlockingConnection, *command: Any) -> Any:
    try:
        return blocking.call(*command)
    except redis.ConnectionError:
        return "ConnectionError"


def _send_allowing_one_error(held: Any, *command: Any) -> Any:
    """What the worker's thread does with its own connection: a failed call closes it, and
    the next call connects again (to whichever server is the primary then)."""
    try:
        held.send_command(*command)
        return held.read_response()
    except redis.ConnectionError:
        held.disconnect()
    held.send_command(*command)
    return held.read_response()


# -- a worker process across fail-overs -----------------------------------------------------


def test_a_job_pushed_before_a_failover_runs_after_it_in_a_worker(
    sentinels: SentinelSet, start_worker: StartWorker, producer: cogworker.Client, tmp_path: Path
) -> None:
    worker = start_worker()
    first = sentinels.primary()
    identity = worker.identity(sentinels.client(first))
    wait_for(lambda: listening(sentinels.client(first), identity))
    worker.send(signal.SIGTSTP)  # quiet: the job must wait for the fail-over
    wait_for(lambda: sentinels.client(first).hget(keys.process(identity), "quiet") == "true")
    jid = push(producer, "NoteJob", "before")
    sentinels.replicated(first)
    assert queued_jids(sentinels.client(sentinels.replica())) == [jid]

    new = sentinels.fail_over()
    # sent at once, as the admin CLI sends it, whether the worker's subscription has moved to
    # the new primary yet or not: the command kept in its presence covers the gap
    process = api.ProcessSet(sentinels.client(new)).find(identity)
    assert process is not None
    process.resume()
    wait_for(lambda: ledger(tmp_path) == [jid], timeout=15)
    wait_for(lambda: sentinels.client(new).llen(keys.inprogress(identity)) == 0)
    assert queued_jids(sentinels.client(new)) == []
    assert ledger(tmp_path) == [jid] and worker.alive()


def test_a_command_sent_while_the_listener_moves_to_the_new_primary_is_heard(
    sentinels: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fail-over drops the signal listener's connection to the former primary (the
    sentinel kills its clients as it makes it a replica). redis-py used to re-subscribe inside
    that failing read, through the sentinels, on the new primary, on a connection the listener
    then closed: a PUBLISH there meanwhile counted 1 and was lost. Acting from inside the
    listener's report of that failure: no subscriber is counted on the new primary, and a
    command sent there through the API is heard once the listener has subscribed again."""
    cfg = cogworker.Config(redis_url=sentinels.url, heartbeat_interval=0.2)
    received: list[str] = []
    heartbeat = Heartbeat(cfg, Manager(cfg, new_identity()), received.append)
    identity = heartbeat.identity
    during_drop: list[tuple[int, int] | BaseException] = []
    report = redis_errors.reporter.report
    promoted = sentinels.replica()  # the one SENTINEL FAILOVER will promote

    def reporting(site: str, error: BaseException) -> None:
        if site == "Signals" and not during_drop:
            try:
                during_drop.append(send_on(sentinels.client(promoted)))
            except BaseException as failure:  # the test's own failure: shown by the test
                during_drop.append(failure)
        report(site, error)

    def send_on(primary: redis.Redis) -> tuple[int, int]:
        # the drop may be seen before the sentinel's switch is over: wait for the promotion
        wait_for(lambda: primary.info("replication")["role"] == "master", timeout=15)
        process = api.ProcessSet(primary).find(identity)
        assert process is not None, "no presence on the promoted server"
        return numsub(primary, identity), process.signal("quiet")

    monkeypatch.setattr(redis_errors.reporter, "report", reporting)
    try:
        assert heartbeat.start(abort_if=lambda: False)
        first = sentinels.primary()
        wait_for(lambda: listening(sentinels.client(first), identity))
        # the presence must be on the replica before it is promoted (replication is async)
        sentinels.replicated(first)
        new = sentinels.fail_over()
        assert new is promoted
        wait_for(lambda: during_drop, timeout=15)
        if isinstance(during_drop[0], BaseException):
            raise during_drop[0]
        assert during_drop == [(0, 0)]  # nobody counted there: the command was kept instead
        wait_for(lambda: received == ["quiet"], timeout=15)
        assert listening(sentinels.client(new), identity)
    finally:
        heartbeat.stop()
        cfg.close()


def numsub(client: redis.Redis, identity: str) -> int:
    [(_, count)] = client.pubsub_numsub(keys.signal_channel(identity))
    return int(count)


def test_jobs_replicated_before_the_primary_is_killed_all_run_after_the_promotion(
    sentinels: SentinelSet, start_worker: StartWorker, producer: cogworker.Client, tmp_path: Path
) -> None:
    worker = start_worker()
    first = sentinels.primary()
    identity = worker.identity(sentinels.client(first))
    gates = [push(producer, "GateJob", f"gate-{n}") for n in range(2)]  # both threads busy
    wait_for(lambda: sorted(ledger(tmp_path, "started")) == sorted(gates))
    queued = [push(producer, "NoteJob", f"queued-{n}") for n in range(10)]
    sentinels.replicated(first)  # acknowledged by the replica: these must survive

    _, new = sentinels.kill_primary()
    (tmp_path / "gate").touch()
    wait_for(lambda: set(ledger(tmp_path)) >= {*gates, *queued}, timeout=30)
    after = push(producer, "NoteJob", "after")  # the producer reconnects to the new primary
    wait_for(lambda: after in ledger(tmp_path), timeout=15)
    promoted = sentinels.client(new)
    wait_for(lambda: promoted.llen(keys.inprogress(identity)) == 0, timeout=15)
    assert queued_jids(promoted) == []
    wait_for(lambda: listening(promoted, identity), timeout=15)
    assert worker.alive()
    runs = ledger(tmp_path)
    repeats = len(runs) - len(set(runs))
    print(f"{len(runs)} runs of {len(set(runs))} jobs ({repeats} repeated)")
    assert set(runs) == {*gates, *queued, after}  # nothing lost, nothing unknown
