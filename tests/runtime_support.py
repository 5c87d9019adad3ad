"""Helpers shared by the worker-runtime tests (tests/test_runtime_*.py); not a test module."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis
from conftest import wait_for

import cogworker
from cogworker import keys, locks, redis_errors
from cogworker.fetch import Filing, Work
from cogworker.local.server import RedisServer
from cogworker.worker.manager import Manager

# argument lists as the real Ruby gem serialises them, with the unique digests and periodic
# entry ids it derives from them (computed with the gem, copied here as test data)
RUBY_VECTORS = Path(__file__).resolve().parent / "data" / "ruby-digests.json"

HOLD_JOB_MODULE = '''
"""A job for tests that kill or freeze the process running it."""
import os
import time

import cogworker


class HoldJob(cogworker.Job):
    """Records where and when it started ("<pid> <epoch>" on test:starts:<marker>), waits for
    test:gate:<marker> (at most 60 s), then counts itself finished on test:finished:<marker>."""

    name = "Test::Hold"

    def perform(self, marker):
        client = cogworker.default_config().redis()
        client.rpush(f"test:starts:{marker}", f"{os.getpid()} {time.time()}")
        deadline = time.monotonic() + 60
        while not client.exists(f"test:gate:{marker}") and time.monotonic() < deadline:
            time.sleep(0.02)
        client.incr(f"test:finished:{marker}")
'''
"""Source of a jobs module (write it where the worker's ``-r`` finds it)."""

WORKER_USER = "worker"
WORKER_PASSWORD = "worker-pw"


def queue_jobs(r: redis.Redis, name: str) -> list[dict[str, Any]]:
    """The payloads waiting on queue ``name``, next to run first."""
    return [json.loads(raw) for raw in reversed(r.lrange(keys.queue(name), 0, -1))]


def zset_entries(r: redis.Redis, key: str) -> list[tuple[dict[str, Any], float]]:
    """(payload, score) of every member of a sorted set, lowest score first."""
    return [(json.loads(member), score) for member, score in r.zrange(key, 0, -1, withscores=True)]


def redis_time(r: redis.Redis) -> int:
    """Redis's own clock, whole seconds (what orphan recovery compares stamps with)."""
    seconds, _ = r.time()
    return int(seconds)


def counter(r: redis.Redis, key: str) -> int:
    return int(r.get(key) or 0)


@contextlib.contextmanager
def running(manager: Manager, stop_timeout: float = 5.0) -> Iterator[Manager]:
    """Start ``manager``; stop it on exit unless the test already did."""
    manager.start()
    try:
        yield manager
    finally:
        if not manager.stopping.is_set():
            manager.stop(stop_timeout)


def stopped_at_teardown(manager: Manager, timeout: float = 2.0) -> Iterator[Manager]:
    """Body of a ``manager`` fixture: yield ``manager`` (not started), stop it afterwards
    unless the test already did."""
    try:
        yield manager
    finally:
        if not manager.stopping.is_set():
            manager.stop(timeout)


def holds(condition: Callable[[], Any], duration: float) -> None:
    """Poll ``condition`` for ``duration`` seconds; fail the moment it is false (to show that
    something does *not* happen)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert condition(), f"stopped holding: {condition}"
        time.sleep(0.02)


class Gate:
    """Lets a test hold a job inside ``perform`` and release it when it chooses."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def pass_through(self, timeout: float = 15.0) -> None:
        """Called from ``perform``: signal entry, then wait until opened."""
        self.entered.set()
        if not self._open.wait(timeout):
            raise TimeoutError("the test never opened the gate")

    def open(self) -> None:
        self._open.set()

    def reset(self) -> None:
        self.entered.clear()
        self._open.clear()


class AclServer:
    """A private server where the code under test connects as its own ACL user, so a test can
    revoke one command at run time (the denial hits the worker's existing connections)."""

    def __init__(self, factory: Callable[..., RedisServer], **kwargs: Any) -> None:
        self.server = factory(**kwargs)
        self.admin = redis.Redis.from_url(self.server.url, decode_responses=True)
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, "on", f">{WORKER_PASSWORD}", "~*", "&*", "+@all"
        )

    @property
    def worker_url(self) -> str:
        return f"redis://{WORKER_USER}:{WORKER_PASSWORD}@127.0.0.1:{self.server.port}/0"

    def deny(self, *commands: str) -> None:
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, *[f"-{command}" for command in commands]
        )

    def allow(self, *commands: str) -> None:
        self.admin.execute_command(
            "ACL", "SETUSER", WORKER_USER, *[f"+{command}" for command in commands]
        )

    def close(self) -> None:
        self.admin.close()


def release(cfg: cogworker.Config) -> None:
    """Drop ``cfg``'s client and close its sockets now (``Config.close``)."""
    cfg.close()


def closing_pools(request: pytest.FixtureRequest) -> Iterator[None]:
    """Body of a module's autouse fixture: close the ``config`` fixture's sockets after the
    test (set up first, so it is torn down after everything that used it)."""
    cfg = request.getfixturevalue("config") if "config" in request.fixturenames else None
    yield
    if cfg is not None:
        release(cfg)


class Clearable(Protocol):
    def clear(self) -> None: ...


def forget_process_memory() -> None:
    """What a forked worker forgets of its parent (see ``cli._run_swarm_child``): outage
    reports, deferred lock releases. (The runtime's own memory belongs to each Manager.)"""
    redis_errors.reporter.reset()
    locks.deferred.clear()


def fresh_runtime(
    request: pytest.FixtureRequest, *records: Clearable, gate: Gate | None = None
) -> Iterator[None]:
    """Body of a runtime test module's autouse fixture: empty the module's ``records`` and
    close its ``gate``, with the process memory forgotten before and after the test; then
    open the gate (no processor thread stays parked in a job) and, as ``closing_pools``
    does, close the ``config`` fixture's sockets."""
    cfg = request.getfixturevalue("config") if "config" in request.fixturenames else None
    for record in records:
        record.clear()
    if gate is not None:
        gate.reset()
    forget_process_memory()
    try:
        yield
    finally:
        if gate is not None:
            gate.open()
        forget_process_memory()
        if cfg is not None:
            release(cfg)


def private_config(url: str, **options: Any) -> cogworker.Config:
    """A Config on a private server (not installed as the default)."""
    return cogworker.Config(redis_url=url, **options)


def ttl_was_set_to(client: redis.Redis, key: str, ttl: int, since: float) -> bool:
    """``key``'s TTL was set to ``ttl`` seconds at some moment after ``since`` (monotonic
    time): its PTTL lies within what has elapsed since then."""
    left = client.pttl(key)
    elapsed_ms = (time.monotonic() - since) * 1000
    return ttl * 1000 - elapsed_ms - 1 <= left <= ttl * 1000


# -- additions for the hardening tests (tests/test_hardening_*.py) ------------------------------


def all_settled(r: redis.Redis, manager: Manager) -> bool:
    """The bookkeeper sent everything, nothing is listed in progress or running in memory."""
    manager.bookkeeper.flush()
    return r.llen(keys.inprogress(manager.identity)) == 0 and not manager.ledger.running()


def performing(manager: Manager) -> set[str]:
    """The raw payloads of the jobs inside ``perform`` in ``manager``'s process."""
    return {work.raw for work in manager.ledger.performing()}


def held(manager: Manager, raw: str) -> Work:
    """``raw`` taken by ``manager``'s process, as the fetcher would list it (not yet started)."""
    work = Work.taken("", raw)
    manager.ledger.taken(work)
    return work


def pending_filing(manager: Manager, raw: str) -> Filing:
    """The filing ``manager``'s process left pending for ``raw`` (its settling failed)."""
    filing = manager.ledger.pending()[raw]
    assert isinstance(filing, Filing), filing
    return filing


def attempts_log(r: redis.Redis, jid: str) -> list[dict[str, Any]]:
    """The entries of ``cogworker:job_attempts:<jid>``, oldest first."""
    return [json.loads(item) for item in r.lrange(keys.job_attempts(jid), 0, -1)]


def plant_orphan(r: redis.Redis, identity: str, raws: list[str], *, beat_age: int = 10_000) -> None:
    """A dead process's leftovers: its in-progress list (``raws[0]`` at the head), its registry
    entry and a last-beat stamp ``beat_age`` seconds old on Redis's clock; no presence key."""
    if raws:
        r.lpush(keys.inprogress(identity), *reversed(raws))
    r.sadd(keys.INPROGRESS_IDENTITIES, identity)
    r.hset(keys.LAST_BEAT, identity, str(redis_time(r) - beat_age))


class HoldAt(logging.Handler):
    """A log handler that holds the thread logging a message containing ``fragment`` at a
    Gate: a way to stop a processor thread at an exact point of its work (say right after
    ``perform`` returned, at its ``fail: ...`` line). Other threads keep logging meanwhile."""

    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment
        self.gate = Gate()

    def handle(self, record: logging.LogRecord) -> bool:  # no handler lock: never blocks others
        if self.fragment in record.getMessage():
            self.gate.pass_through()
        return True

    def emit(self, record: logging.LogRecord) -> None:
        pass


class PoisonMiddleware:
    """Puts a NaN into the job: JSON-encoding the failed job then raises, every time, so its
    failure can't be filed normally and the interrupt files it."""

    def __call__(
        self, worker: Any, job: dict[str, Any], queue: str, call_next: Callable[[], None]
    ) -> None:
        job["poisoned"] = float("nan")
        call_next()


class ExplodingMiddleware:
    """Raises before the job is performed."""

    def __call__(
        self, worker: Any, job: dict[str, Any], queue: str, call_next: Callable[[], None]
    ) -> None:
        raise LookupError("middleware exploded")


# -- added for the periodic / unique tests -------------------------------------------------------


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command the server has answered (INFO commandstats), e.g. ``{"get": 3}``;
    commands run inside scripts are counted too."""
    stats = client.info("commandstats")
    return {
        str(name).removeprefix("cmdstat_").lower(): int(values["calls"])
        for name, values in stats.items()
    }


def commands_since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """Commands answered since ``before`` was taken, except the INFO calls measuring them."""
    after = command_calls(client)
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    return {name: calls for name, calls in delta.items() if calls and name != "info"}


def events(client: redis.Redis, key: str) -> list[list[str]]:
    """A list of space-separated records, oldest first, split into words."""
    return [str(item).split() for item in client.lrange(key, 0, -1)]


# -- added for the operations-layer tests (api, status/history, metrics, admin CLI, swarm) ------


def spawn_cogworker(
    args: list[str], cwd: str | os.PathLike[str], log_path: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``python -m cogworker ARGS`` in its own session (so ``kill_session`` ends it and every
    process it forked), stdout and stderr appended to ``log_path``."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cogworker", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def worker_process(
    directory: Path, redis_url: str, module: str, source: str, worker_config: str
) -> Iterator[subprocess.Popen[bytes]]:
    """Body of a fixture: one ``cogworker run -r MODULE -C worker.yml`` process in
    ``directory`` (the app module and the config written there first), on ``redis_url``; at
    teardown its session is killed and its log printed."""
    (directory / f"{module}.py").write_text(source)
    (directory / "worker.yml").write_text(worker_config)
    log = directory / "worker.out"
    process = spawn_cogworker(
        ["run", "-r", module, "-C", "worker.yml"], directory, log, cogworker_env(redis_url)
    )
    try:
        yield process
    finally:
        kill_session(process)
        print(f"--- worker {process.pid}:\n{log.read_text(errors='replace')}")


def closing_producer(redis_url: str) -> Iterator[cogworker.Client]:
    """Body of a fixture: a Client on ``redis_url`` whose connections are closed explicitly
    afterwards, not left to the garbage collector (a ResourceWarning is an error here)."""
    settings = cogworker.Config(redis_url=redis_url)
    try:
        yield cogworker.Client(settings)
    finally:
        connection = settings.redis()
        connection.close()
        connection.connection_pool.disconnect()


def kill_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the session ``spawn_cogworker`` started (the process itself
    and any children it forked, even after it exited itself), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


def cogworker_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m cogworker`` subprocess on ``redis_url``."""
    environment = {**os.environ, "REDIS_URL": redis_url, **extra}
    environment.pop("PYTHONUNBUFFERED", None)  # it must flush its own lines
    return environment


def run_cogworker(
    *args: str, redis_url: str, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m cogworker ARGS`` to completion, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "cogworker", *args],
        env=cogworker_env(redis_url),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, parent pid)`` of ``pid`` from ``/proc``; None once it has been reaped."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[1])


def is_running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def live_children(parent: int) -> set[int]:
    """The pids of ``parent``'s children that are running (zombies left out)."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None and stat[1] == parent and stat[0] not in ("Z", "X"):
                found.add(int(name))
    return found


def process_title(pid: int) -> str:
    """What ``ps -o args`` shows for ``pid`` (its title, once setproctitle changed it)."""
    shown = subprocess.run(
        ["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return shown.stdout.strip()


def registered_identity(client: redis.Redis, pid: int) -> str | None:
    """The identity that the process ``pid`` registered in ``cogworker:processes`` (None until
    it has beaten)."""
    for member in client.smembers(keys.PROCESSES):
        if str(member).split(":")[-2] == str(pid):
            return str(member)
    return None


def listening(client: redis.Redis, identity: str) -> bool:
    """The process has subscribed to its signal channel: a command published now reaches it."""
    channel = keys.signal_channel(identity)
    return dict(client.pubsub_numsub(channel)).get(channel) == 1


@contextlib.contextmanager
def cogworker_log_records() -> Iterator[list[logging.LogRecord]]:
    """Every record logged to the ``cogworker`` logger inside the block, whatever handlers
    and propagation an earlier ``logs.setup`` left on it."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    with cogworker_logging_to(Collect(logging.DEBUG), logging.DEBUG):
        yield records


@contextlib.contextmanager
def cogworker_logging_to(handler: logging.Handler, level: int) -> Iterator[None]:
    """Inside the block the ``cogworker`` logger also writes to ``handler``, at ``level``;
    afterwards its handlers and level are as they were."""
    target = logging.getLogger("cogworker")
    before = target.level
    target.addHandler(handler)
    target.setLevel(level)
    try:
        yield
    finally:
        target.removeHandler(handler)
        target.setLevel(before)


class Worker:
    """One ``python -m cogworker`` process in its own session; output goes to ``log_path``."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc = spawn_cogworker(args, cwd, log_path, env)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running {timeout}s later; output:\n{self.output()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (also works on a stopped process)."""
        kill_session(self.proc)

    def identity(self, client: redis.Redis, timeout: float = 15.0) -> str:
        """The identity this worker registered in ``cogworker:processes``."""

        def find() -> str | None:
            assert self.alive(), f"worker exited early:\n{self.output()}"
            return registered_identity(client, self.pid)

        return str(wait_for(find, timeout))

    def wait_output(self, fragment: str, timeout: float = 10.0) -> None:
        try:
            wait_for(lambda: fragment in self.output(), timeout)
        except AssertionError:
            raise AssertionError(f"{fragment!r} not in output:\n{self.output()}") from None

    def info(self, client: redis.Redis) -> dict[str, object]:
        raw = client.hget(keys.process(self.identity(client)), "info")
        assert raw is not None
        info = json.loads(raw)
        assert isinstance(info, dict)
        return info

    def stop(self) -> int:
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker ignored TERM:\n{self.output()}") from None


StartWorker = Callable[..., Worker]


class StartedWorkers:
    """The workers a test starts in ``cwd``, each logging to its own ``worker-<n>.out``."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.started: list[Worker] = []

    def start(self, args: list[str], env: dict[str, str]) -> Worker:
        worker = Worker(args, self.cwd, env, self.cwd / f"worker-{len(self.started)}.out")
        self.started.append(worker)
        return worker


@contextlib.contextmanager
def started_workers(cwd: Path) -> Iterator[StartedWorkers]:
    """For a ``start_worker`` fixture: afterwards every worker started is killed (its whole
    group), then each one's output is printed (pytest shows it when the test failed)."""
    workers = StartedWorkers(cwd)
    try:
        yield workers
    finally:
        for worker in workers.started:
            worker.kill()
        for worker in workers.started:
            print(f"--- worker {worker.pid} {worker.args}:\n{worker.output()}")
