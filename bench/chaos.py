"""Fault-injection ("chaos") run: a real workload through real workers while things break.

    .venv/bin/python bench/chaos.py [--seed N] [--short | --minutes M] [--keep] [--swarm]
                                      [--short-liveness]

Starts a private ``redis-server`` (AOF on, ``appendfsync always``) and several worker processes
(``python -m cogworker run -r bench/chaos_jobs.py -C <yaml>``, short intervals so recoveries
happen within the run), pushes jobs at a steady rate (quick, long, delayed with ``perform_in``,
some written to fail into the dead set, and ``until_executed`` unique jobs drawn from a few
keys so that duplicates are pushed all the time), while every worker also runs the same three
per-second cron entries (two of them ``until_executed``, one with runs longer than its
period), and injects faults at random times drawn from the seed: kill -9 of a worker
(restarted), TERM of a worker running long jobs (restarted), Redis stopped or killed and
started again on the same port and directory, ``CLIENT PAUSE`` stalls, killed client
connections, and commands denied by ACL for a few seconds. The driver talks to Redis as its
own ACL user, so denials of the workers' ``default`` user never lock it out.

Then it stops injecting, disables the cron entries, lets everything drain with every worker
alive, stops the workers and prints one table (see chaos_check.py for what is checked and how
repeats are explained). It exits 1 when a job was lost or any check failed, 130 when
interrupted. ``--short`` (the default) injects for 75 s and takes about 2.5 minutes in all (a
killed worker's jobs come back only once its 60 s presence key has expired); ``--minutes M``
injects for M minutes. ``--swarm`` makes worker 0 a ``cogworker swarm`` of two children (kill -9
then hits a child, which its supervisor replaces; TERM goes to the supervisor);
``--short-liveness`` sets ``presence_ttl`` to three heartbeats (1.5 s), so deaths, and any false
verdict, come within seconds.

Evidence (execution records, worker logs, faults, snapshots) stays in a temporary directory,
removed after a passing run unless ``--keep``; re-check it with ``bench/chaos_check.py DIR``.
Everything listens on 127.0.0.1; subprocesses and the Redis server are cleaned up on any exit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import heapq
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import chaos_check  # bench/ is on sys.path when this file runs as a script
import redis

import cogworker
from cogworker import keys
from cogworker.local.server import RedisServer, free_port
from cogworker.worker.scheduler import RETRY_AFTER_LOST_CONNECTION

HERE = Path(__file__).resolve().parent
JOBS = HERE / "chaos_jobs.py"
ADMIN_USER = "chaos"
STATUS_EVERY = 10.0
STUCK_AFTER = 60.0  # a TERMed worker still running after this long is stuck
TICK = 0.05
FAULT_TIMEOUT = 15.0  # longer than any pause: a fault command never times out half-applied
POSTPONE = 1.0  # a fault that can't be injected now (no target, Redis down) is tried again
QUEUES = ("default", "low")

WORKER_CONFIG = {
    "concurrency": 4,
    "heartbeat_interval": 0.5,
    "poll_interval": 0.5,
    "orphan_check_interval": 1.0,
    "orphan_threshold": 3.0,
    "shutdown_timeout": 2.0,
    "redis_socket_timeout": 5.0,
    "max_orphanings": 3,
}

# fault kind -> weight in the plan
FAULT_WEIGHTS = {
    "kill9": 22,
    "term": 14,
    "redis_restart": 10,
    "pause": 18,
    "client_kill": 18,
    "acl_deny": 18,
}
ACL_COMMANDS = ("lrem", "evalsha", "zadd")

# the cron entries every worker registers (chaos_jobs.CronJob): a run sleeps up to `longest`
PERIODIC = [
    {"name": "each-second", "cron": "* * * * * *", "period": 1, "longest": 0.2},
    {
        "name": "unique-2s",
        "cron": "*/2 * * * * *",
        "period": 2,
        "longest": 0.5,
        "unique": "until_executed",
    },
    {
        "name": "unique-3s-long",
        "cron": "*/3 * * * * *",
        "period": 3,
        "longest": 6.0,
        "unique": "until_executed",
    },
]
UNIQUE_KEYS = 6  # unique jobs are drawn from this many keys (so duplicates are frequent)
UNIQUE_FAILING_KEYS = 3
SWARM_CHILDREN = 2


@dataclass
class Settings:
    seed: int
    mode: str
    duration: float
    rate: float
    min_jobs: int
    min_faults: int
    workers: int = 4
    drain_timeout: float = 300.0
    keep: bool = False
    swarm: bool = False  # worker slot 0 is a swarm of SWARM_CHILDREN children
    short_liveness: bool = False  # presence_ttl at its floor, three heartbeats

    def worker_config(self) -> dict[str, Any]:
        if not self.short_liveness:
            return dict(WORKER_CONFIG)
        return {**WORKER_CONFIG, "presence_ttl": 3 * WORKER_CONFIG["heartbeat_interval"]}


def parse_args(argv: list[str]) -> Settings:
    parser = argparse.ArgumentParser(
        prog="bench/chaos.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--short", action="store_true", help="75 s of faults (the default)")
    group.add_argument("--minutes", type=float, help="minutes of faults (soak run)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--keep", action="store_true", help="keep the evidence directory")
    parser.add_argument(
        "--swarm",
        action="store_true",
        help=f"worker 0 is a swarm of {SWARM_CHILDREN} children (kill -9 hits a child)",
    )
    parser.add_argument(
        "--short-liveness",
        action="store_true",
        help="presence_ttl 3 heartbeats (1.5 s) instead of 60 s: deaths detected in seconds",
    )
    args = parser.parse_args(argv)
    extra = {"swarm": args.swarm, "short_liveness": args.short_liveness}
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    if args.workers < 2:
        parser.error("--workers must be at least 2")
    if args.minutes is not None:
        if args.minutes <= 0:
            parser.error("--minutes must be positive")
        duration = args.minutes * 60
        return Settings(
            seed,
            f"{args.minutes:g} min",
            duration,
            40.0,
            int(duration * 25),
            int(duration / 5),
            workers=args.workers,
            keep=args.keep,
            **extra,
        )
    return Settings(
        seed, "short", 75.0, 40.0, 2000, 20, workers=args.workers, keep=args.keep, **extra
    )


# -- output --------------------------------------------------------------------------------


class Out:
    def __init__(self) -> None:
        self.origin = time.time()
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._lock:
            print(f"[{time.time() - self.origin:7.1f}s] {message}", flush=True)


# -- the fault plan ------------------------------------------------------------------------


@dataclass(order=True)
class Planned:
    at: float
    order: int
    kind: str = field(compare=False)
    params: dict[str, Any] = field(compare=False, default_factory=dict)


def plan_faults(rng: random.Random, settings: Settings) -> list[Planned]:
    """Times, kinds and parameters of every fault: a function of the seed only."""
    start, end = 4.0, settings.duration - 1.0
    count = max(int(settings.min_faults * 1.5), int(settings.duration / 2.5))
    times = sorted(rng.uniform(start, end) for _ in range(count))
    kinds, weights = list(FAULT_WEIGHTS), list(FAULT_WEIGHTS.values())
    plan: list[Planned] = []
    redis_free_at = acl_free_at = 0.0
    for index, at in enumerate(times):
        kind = rng.choices(kinds, weights)[0]
        if kind == "redis_restart" and at < redis_free_at:
            kind = "pause"
        if kind == "acl_deny" and at < acl_free_at:
            kind = "client_kill"
        params: dict[str, Any] = {"u": rng.random()}
        if kind == "kill9":
            params["restart_after"] = round(rng.uniform(0.1, 2.0), 2)
        elif kind == "term":
            params["restart_after"] = round(rng.uniform(0.1, 1.5), 2)
        elif kind == "redis_restart":
            params["mode"] = rng.choice(["stop", "kill"])
            params["down"] = round(rng.uniform(0.2, 3.0), 2)
            redis_free_at = at + params["down"] + 3.0
        elif kind == "pause":
            params["ms"] = rng.randrange(300, 4000)
            params["mode"] = rng.choice(["ALL", "ALL", "WRITE"])
        elif kind == "client_kill":
            params["mode"] = rng.choice(["type", "ids"])
            params["fraction"] = round(rng.uniform(0.2, 1.0), 2)
        elif kind == "acl_deny":
            params["cmd"] = rng.choice(ACL_COMMANDS)
            params["seconds"] = round(rng.uniform(1.0, 5.0), 2)
            acl_free_at = at + params["seconds"] + 0.5
        plan.append(Planned(at, index, kind, params))
    return plan


# -- Redis ---------------------------------------------------------------------------------


class RedisUnderTest:
    """The private redis-server, restartable on the same port and directory (AOF kept)."""

    def __init__(self) -> None:
        self.password = os.urandom(12).hex()
        self.server = RedisServer(
            port=free_port(),
            config_lines=[
                "appendonly yes",
                "appendfsync always",
                f"user {ADMIN_USER} on >{self.password} ~* &* +@all",
            ],
        )
        self.up = False

    @property
    def url(self) -> str:
        return self.server.url  # the workers and the producer: the default user

    def admin(self, timeout: float = 8.0) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.server.port,
            username=ADMIN_USER,
            password=self.password,
            socket_timeout=timeout,
            socket_connect_timeout=2.0,
            decode_responses=True,
            retry=None,
        )

    def start(self) -> None:
        last: Exception | None = None
        for _ in range(5):
            try:
                self.server.start(timeout=30.0)
                self.up = True
                return
            except RuntimeError as error:  # e.g. the port not released yet
                last = error
                time.sleep(0.5)
        raise RuntimeError(f"redis-server would not start again: {last}")

    def stop(self, how: str) -> None:
        self.up = False
        if how == "kill":
            self.server.kill()
        else:
            self.server.stop()

    def save_log(self, directory: Path) -> None:
        log = Path(self.server.directory) / "redis.log"
        if log.exists():
            shutil.copy(log, directory / "redis.log")

    def cleanup(self) -> None:
        self.up = False
        with contextlib.suppress(Exception):
            self.server.kill()
        self.server.cleanup()


# -- worker processes ----------------------------------------------------------------------

_libc: Any = None
with contextlib.suppress(OSError, AttributeError):
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent() -> None:
    """In the child: SIGKILL it if the driver dies (Linux), so no worker outlives a crash."""
    if _libc is not None:
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class ProcRecord:
    pid: int
    slot: int
    gen: int
    log: str
    started: float
    ended: float | None = None
    how: str | None = None
    term_at: float | None = None
    identity: str | None = None
    role: str = "worker"  # worker | supervisor | child (of the swarm slot's supervisor)


@dataclass
class Slot:
    index: int
    queues: tuple[str, ...]
    swarm: bool = False
    children: dict[int, ProcRecord] = field(default_factory=dict)  # live ones, by pid
    seen: set[int] = field(default_factory=set)  # every child pid recorded, live or not
    gen: int = 0
    proc: subprocess.Popen[bytes] | None = None
    record: ProcRecord | None = None
    state: str = "down"  # up | terminating | down
    restart_at: float | None = None
    restart_after: float = 0.0


def _children_of(parent: int) -> set[int]:
    """The live (not zombie) child processes of ``parent``, from /proc."""
    try:
        text = Path(f"/proc/{parent}/task/{parent}/children").read_text()
    except OSError:
        return set()
    found = set()
    for pid in (int(word) for word in text.split()):
        with contextlib.suppress(OSError, IndexError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                found.add(pid)
    return found


class Fleet:
    def __init__(self, settings: Settings, workdir: Path, url: str, out: Out) -> None:
        self.workdir = workdir
        self.out = out
        self.url = url
        self.records: list[ProcRecord] = []
        self.problems: list[str] = []
        self.final_stop_at = float("inf")  # TERMs from then on are the final stop, not faults
        self.config_path = workdir / "worker.yml"
        lines = [f"{name}: {value}" for name, value in settings.worker_config().items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        # even slots read both queues (polling fetch), odd slots only default (blocking BLMOVE)
        self.slots = [
            Slot(i, QUEUES if i % 2 == 0 else QUEUES[:1], swarm=settings.swarm and i == 0)
            for i in range(settings.workers)
        ]

    def spawn(self, slot: Slot) -> None:
        slot.gen += 1
        log_name = f"worker-s{slot.index}-g{slot.gen}.log"
        command = [
            sys.executable,
            "-m",
            "cogworker",
            "swarm" if slot.swarm else "run",
            "-r",
            str(JOBS),
            "-C",
            str(self.config_path),
            "--log-level",
            "WARNING",
        ]
        for name in slot.queues:
            command += ["-q", name]
        env = {
            **os.environ,
            "REDIS_URL": self.url,
            "CHAOS_EVENTS_DIR": str(self.workdir),
            "CHAOS_PERIODIC": json.dumps(PERIODIC),
            "COGWORKER_COUNT": str(SWARM_CHILDREN if slot.swarm else 1),
        }
        with open(self.workdir / log_name, "ab") as log:
            slot.proc = subprocess.Popen(
                command,
                cwd=HERE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # spawned from the main thread only (PDEATHSIG)
            )
        role = "supervisor" if slot.swarm else "worker"
        slot.record = ProcRecord(
            slot.proc.pid, slot.index, slot.gen, log_name, time.time(), role=role
        )
        self.records.append(slot.record)
        slot.state, slot.restart_at = "up", None

    def up(self) -> list[Slot]:
        return [s for s in self.slots if s.state == "up" and s.proc is not None]

    def runners(self, slot: Slot) -> list[int]:
        """The pids that run jobs for ``slot``: its worker, or its swarm's live children."""
        if slot.swarm:
            return list(slot.children)
        return [slot.record.pid] if slot.record is not None and slot.proc is not None else []

    def live_runners(self) -> set[int]:
        return {pid for slot in self.slots for pid in self.runners(slot)}

    def kill9_child(self, slot: Slot, pid: int) -> ProcRecord:
        """kill -9 one child of the swarm slot: its supervisor reaps and replaces it."""
        record = slot.children.pop(pid)
        record.ended, record.how = time.time(), "kill9"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return record

    def _close_children(self, slot: Slot, how: str) -> None:
        """The swarm slot's supervisor is gone, and its children with it."""
        for record in slot.children.values():
            if record.ended is None:
                record.ended, record.how = time.time(), how
        slot.children.clear()

    def _follow_children(self, slot: Slot) -> None:
        """Record the swarm slot's children as they come and go (the supervisor forks them)."""
        assert slot.record is not None
        running = _children_of(slot.record.pid) if slot.proc is not None else set()
        # a child just killed is still listed for a moment before it turns zombie: a pid seen
        # once is never recorded again
        for pid in running - set(slot.children) - slot.seen:
            slot.seen.add(pid)
            record = ProcRecord(
                pid, slot.index, slot.gen, slot.record.log, time.time(), role="child"
            )
            record.term_at = slot.record.term_at
            slot.children[pid] = record
            self.records.append(record)
        for pid in set(slot.children) - running:
            record = slot.children.pop(pid)
            record.ended = time.time()
            if slot.state == "terminating" or slot.proc is None:
                record.how, record.term_at = "term", slot.record.term_at
            else:
                record.how = "crash"
                self.problems.append(f"swarm child pid {pid} ended by itself")
                self.out.say(f"worker {slot.index} swarm child pid {pid} CRASHED")

    def kill9(self, slot: Slot, restart_after: float) -> ProcRecord:
        assert slot.proc is not None and slot.record is not None
        record = slot.record
        record.ended, record.how = time.time(), "kill9"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(slot.proc.pid, signal.SIGKILL)
        slot.proc.wait(10)
        self._close_children(slot, "kill9")
        slot.state, slot.proc = "down", None
        slot.restart_at = time.monotonic() + restart_after
        return record

    def term(self, slot: Slot, restart_after: float) -> ProcRecord:
        assert slot.proc is not None and slot.record is not None
        slot.record.term_at = time.time()
        for child in slot.children.values():
            child.term_at = slot.record.term_at
        with contextlib.suppress(ProcessLookupError):
            os.kill(slot.proc.pid, signal.SIGTERM)
        slot.state, slot.restart_after = "terminating", restart_after
        return slot.record

    def _stuck(self, slot: Slot) -> None:
        assert slot.proc is not None and slot.record is not None
        record = slot.record
        self.out.say(
            f"worker {slot.index} pid {record.pid} did not exit {STUCK_AFTER:g}s after "
            "TERM: dumping its threads (SIGUSR1) into its log, then kill -9"
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGUSR1)
        time.sleep(1.0)
        record.ended, record.how = time.time(), "stuck"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        slot.proc.wait(10)
        self._close_children(slot, "stuck")
        self.problems.append(f"worker pid {record.pid} stuck after TERM (see {record.log})")

    def tick(self, restart: bool = True) -> None:
        """Notice exits, kill stuck workers, restart the ones due."""
        now = time.monotonic()
        for slot in self.slots:
            record = slot.record
            if slot.swarm and record is not None:
                self._follow_children(slot)
            if slot.proc is not None and record is not None:
                code = slot.proc.poll()
                if code is not None:
                    record.ended = time.time()
                    if slot.state == "terminating":
                        record.how = "term"
                        if code != 0:
                            self.problems.append(f"worker pid {record.pid} exited {code} on TERM")
                    else:
                        record.how = "crash"
                        cause = (
                            f"killed by signal {-code} not sent by the driver"
                            if code < 0
                            else (f"exit status {code}")
                        )
                        self.problems.append(f"worker pid {record.pid} ended by itself ({cause})")
                        self.out.say(f"worker {slot.index} pid {record.pid} CRASHED (exit {code})")
                    slot.proc, slot.state = None, "down"
                    slot.restart_at = now + slot.restart_after
                    self._close_children(slot, record.how)
                elif (
                    slot.state == "terminating"
                    and record.term_at is not None
                    and time.time() - record.term_at > STUCK_AFTER
                ):
                    self._stuck(slot)
                    slot.proc, slot.state, slot.restart_at = None, "down", now
            due = slot.restart_at is not None and slot.restart_at <= now
            if restart and slot.state == "down" and due:
                self.spawn(slot)

    def restart_all_now(self) -> None:
        for slot in self.slots:
            if slot.state == "down":
                slot.restart_at = time.monotonic()
        self.tick()

    def all_up(self) -> bool:
        return all(s.state == "up" and s.proc is not None for s in self.slots)

    def stop_all(self, timeout: float) -> None:
        """TERM every worker and wait for them; stuck ones get a thread dump and kill -9."""
        for slot in self.slots:
            if slot.state == "up" and slot.proc is not None:
                self.term(slot, 0.0)
        deadline = time.monotonic() + timeout
        while any(s.proc is not None for s in self.slots) and time.monotonic() < deadline:
            self.tick(restart=False)
            time.sleep(TICK)
        for slot in self.slots:
            if slot.proc is not None:
                self._stuck(slot)
                slot.proc, slot.state = None, "down"
        for slot in self.slots:
            slot.restart_at = None
        for record in self.records:
            term_at = record.term_at
            if record.how == "term" and term_at is not None and term_at >= self.final_stop_at:
                record.how = "final"

    def kill_all(self) -> None:
        for slot in self.slots:
            if slot.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(slot.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    slot.proc.wait(10)
                if slot.record is not None and slot.record.ended is None:
                    slot.record.ended, slot.record.how = time.time(), "cleanup"
                self._close_children(slot, "cleanup")
                slot.proc = None


# -- what the workers are running (read from their execution records) ----------------------


class ExecTail:
    """Follows the exec-*.log files: counts, and which executions are running where."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        self.started = self.ok = self.failed = 0
        self.running: dict[tuple[int, int], tuple[str, str, float]] = {}  # (pid, seq) -> ...

    def refresh(self) -> None:
        with self._lock:
            for path in self.directory.glob("exec-*.log"):
                offset = self._offsets.get(path, 0)
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
                complete = data[: data.rfind(b"\n") + 1]
                self._offsets[path] = offset + len(complete)
                for line in complete.decode(errors="replace").splitlines():
                    self._take(line.split(" "))

    def _take(self, parts: list[str]) -> None:
        with contextlib.suppress(ValueError, IndexError):
            if parts[0] == "S":
                self.started += 1
                self.running[(int(parts[3]), int(parts[4]))] = (parts[2], parts[6], float(parts[1]))
            elif parts[0] == "E":
                self.running.pop((int(parts[3]), int(parts[4])), None)
                if parts[5] == "ok":
                    self.ok += 1
                else:
                    self.failed += 1

    def running_in(self, pid: int) -> list[tuple[str, str, float]]:
        with self._lock:
            return [value for (p, _), value in self.running.items() if p == pid]

    def running_anywhere(self, live: set[int]) -> int:
        with self._lock:
            return sum(1 for (p, _) in self.running if p in live)


# -- the producer --------------------------------------------------------------------------


class Producer(threading.Thread):
    """Pushes jobs at a steady rate; a push that raises is recorded as unknown, never re-sent."""

    def __init__(self, url: str, settings: Settings, path: Path) -> None:
        super().__init__(name="producer", daemon=True)
        self.rng = random.Random(settings.seed * 7919 + 1)
        self.rate = settings.rate
        self.path = path
        self.stopping = threading.Event()
        self.config = cogworker.Config(redis_url=url, redis_socket_timeout=5.0)
        self.client = cogworker.Client(self.config)
        self.pushed = self.confirmed = self.unknown = self.refused = 0
        self.error: BaseException | None = None

    def next_job(self) -> dict[str, Any]:
        rng = self.rng
        draw = rng.random()
        jid = f"{rng.getrandbits(96):024x}"
        queue = "low" if rng.random() < 0.3 else "default"
        job: dict[str, Any] = {"jid": jid, "queue": queue}
        if 0.23 <= draw < 0.30:  # unique: same key, same args, so the digest repeats
            failing = draw >= 0.29
            number = rng.randrange(UNIQUE_FAILING_KEYS if failing else UNIQUE_KEYS)
            kind, key = ("ufail", f"f{number}") if failing else ("unique", f"u{number}")
            job.update(
                {
                    "class": "FailingJob" if failing else "ChaosJob",
                    "args": [kind, 0.01 if failing else round(0.2 + 0.3 * number, 2), key],
                    "retry": 1 if failing else 3,
                    "unique": "until_executed",
                }
            )
        elif draw < 0.05:
            job.update(
                {
                    "class": "FailingJob",
                    "args": ["fail", round(rng.uniform(0, 0.05), 3)],
                    "retry": 1,
                }
            )
        elif draw < 0.11:
            job.update(
                {"class": "ChaosJob", "args": ["long", round(rng.uniform(2.0, 5.0), 2)], "retry": 3}
            )
        elif draw < 0.23:
            job.update(
                {
                    "class": "ChaosJob",
                    "args": ["delayed", round(rng.uniform(0, 0.05), 3)],
                    "retry": 3,
                    "at": time.time() + rng.uniform(0.5, 8.0),
                }
            )
        else:
            job.update(
                {
                    "class": "ChaosJob",
                    "args": ["quick", round(rng.uniform(0.001, 0.06), 3)],
                    "retry": 3,
                }
            )
        return job

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # the run is invalid without its producer: say so
            self.error = error
        finally:
            self.config.close()

    def _run(self) -> None:
        with open(self.path, "a", encoding="utf-8") as log:
            next_at = time.monotonic()
            while not self.stopping.is_set():
                job = self.next_job()
                delay = max(0.0, job["at"] - time.time()) if "at" in job else 0.0
                key = job["args"][2] if len(job["args"]) > 2 else "-"
                log.write(
                    f"I {time.time():.6f} {job['jid']} {job['class']} {job['args'][0]} "
                    f"{job['queue']} {delay:.3f} {key}\n"
                )
                log.flush()
                self.pushed += 1
                try:
                    accepted = self.client.push(job)
                except Exception as error:
                    self.unknown += 1
                    text = f"{type(error).__name__}: {error}".replace("\n", " ")[:200]
                    log.write(f"U {time.time():.6f} {job['jid']} {text}\n")
                    log.flush()
                    self.stopping.wait(0.2)  # don't hammer a Redis that is away
                else:
                    if accepted is None:  # a unique job's duplicate: refused, nothing queued
                        self.refused += 1
                        log.write(f"D {time.time():.6f} {job['jid']}\n")
                    else:
                        self.confirmed += 1
                        log.write(f"C {time.time():.6f} {job['jid']}\n")
                next_at += 1.0 / self.rate
                pause = next_at - time.monotonic()
                if pause > 0:
                    self.stopping.wait(pause)
                elif pause < -1.0:
                    next_at = time.monotonic()  # fell behind (a stall): don't burst


# -- the chaos run -------------------------------------------------------------------------


@dataclass
class FaultRecord:
    n: int
    kind: str
    t: float
    t_end: float
    detail: dict[str, Any]


class Chaos:
    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self.out = Out()
        self.redis = RedisUnderTest()
        self.fleet = Fleet(settings, workdir, self.redis.url, self.out)
        self.tail = ExecTail(workdir)
        self.producer = Producer(self.redis.url, settings, workdir / "pushes.log")
        self.faults: list[FaultRecord] = []
        self.skipped = 0
        self.problems: list[str] = []
        self.status_stop = threading.Event()
        self.phase = "starting"
        self.started_at = time.time()
        self.drain_seconds = float("nan")
        self.periodic_disabled_at: float | None = None
        self._acl_fault: FaultRecord | None = None

    # -- helpers ---------------------------------------------------------------------------

    def presence_ttl(self) -> float:
        return cogworker.Config(**self.settings.worker_config()).presence_ttl

    def admin_call(self, *command: Any, timeout: float = 8.0) -> Any:
        client = self.redis.admin(timeout)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def record(self, kind: str, t: float, t_end: float, **detail: Any) -> FaultRecord:
        fault = FaultRecord(len(self.faults) + 1, kind, t, t_end, detail)
        self.faults.append(fault)
        return fault

    def say_fault(self, fault: FaultRecord, text: str) -> None:
        self.out.say(f"fault #{fault.n:<3} {fault.kind:<13} {text}")

    # -- faults ----------------------------------------------------------------------------

    def _pick(self, u: float, prefer: list[Slot], fallback: list[Slot]) -> Slot | None:
        pool = prefer or fallback
        return pool[int(u * len(pool)) % len(pool)] if pool else None

    def do_kill9(self, params: dict[str, Any]) -> bool:
        """kill -9 a worker (restarted by the driver) or a swarm child (replaced by its
        supervisor), preferring one that runs jobs."""
        self.tail.refresh()
        targets = [(slot, pid) for slot in self.fleet.up() for pid in self.fleet.runners(slot)]
        busy = [(slot, pid) for slot, pid in targets if self.tail.running_in(pid)]
        pool = busy or targets
        if not pool:
            return False
        slot, pid = pool[int(params["u"] * len(pool)) % len(pool)]
        running = self.tail.running_in(pid)
        if slot.swarm:
            record = self.fleet.kill9_child(slot, pid)
            then = "its supervisor replaces it"
        else:
            record = self.fleet.kill9(slot, params["restart_after"])
            then = f"restart in {params['restart_after']}s"
        at = record.ended or time.time()
        detail = {"pid": record.pid, "slot": slot.index, "running": len(running)}
        fault = self.record("kill9", at, at, **detail, swarm_child=slot.swarm)
        who = "swarm child" if slot.swarm else "pid"
        self.say_fault(
            fault,
            f"worker {slot.index} {who} {record.pid} killed -9 with {len(running)} job(s) "
            f"running; {then}",
        )
        return True

    def _running_for(self, slot: Slot) -> list[tuple[str, str, float]]:
        return [run for pid in self.fleet.runners(slot) for run in self.tail.running_in(pid)]

    def do_term(self, params: dict[str, Any]) -> bool:
        """TERM a worker, or a swarm's supervisor (which stops its children)."""
        self.tail.refresh()
        up = self.fleet.up()
        long_running = [
            s for s in up if any(kind == "long" for _, kind, _ in self._running_for(s))
        ]
        slot = self._pick(params["u"], long_running, up)
        if slot is None or slot.record is None:
            return False
        running = self._running_for(slot)
        longs = sum(1 for _, kind, _ in running if kind == "long")
        record = self.fleet.term(slot, params["restart_after"])
        at = record.term_at or time.time()
        fault = self.record("term", at, at, pid=record.pid, slot=slot.index, long=longs)
        self.say_fault(
            fault,
            f"worker {slot.index} pid {record.pid} sent TERM with {longs} long "
            f"job(s) of {len(running)} running; restart {params['restart_after']}s "
            "after it exits",
        )
        return True

    def do_redis_down(self, params: dict[str, Any], queue: list[Planned]) -> bool:
        if not self.redis.up:
            return False
        t = time.time()
        if self._acl_fault is not None:  # a restart resets the default user (ACLs aren't saved)
            self._acl_fault.t_end = t
            self._acl_fault = None
        self.redis.stop(params["mode"])
        fault = self.record("redis_restart", t, t, mode=params["mode"], down=params["down"])
        how = "killed -9" if params["mode"] == "kill" else "stopped"
        self.say_fault(
            fault, f"redis-server {how}; starting again in {params['down']}s (same port, dir, AOF)"
        )
        heapq.heappush(
            queue,
            Planned(self.elapsed() + params["down"], -fault.n, "redis_up", {"fault": fault.n}),
        )
        return True

    def do_redis_up(self, params: dict[str, Any]) -> None:
        self.redis.start()
        fault = self.faults[params["fault"] - 1]
        fault.t_end = time.time()
        self.out.say(
            f"          redis-server up again after {fault.t_end - fault.t:.1f}s (fault #{fault.n})"
        )

    def do_pause(self, params: dict[str, Any]) -> bool:
        command: list[Any] = ["CLIENT", "PAUSE", params["ms"]]
        if params["mode"] == "WRITE":
            command.append("WRITE")
        t = time.time()
        self.admin_call(*command, timeout=FAULT_TIMEOUT)
        # the pause runs from when Redis executed the command: one sent during a pause of
        # ALL is itself held back until that one ends, and pauses for its full time from there
        ends = time.time() + params["ms"] / 1000
        fault = self.record("pause", t, ends, mode=params["mode"], ms=params["ms"])
        self.say_fault(fault, f"CLIENT PAUSE {params['ms']} {params['mode']}")
        return True

    def do_client_kill(self, params: dict[str, Any]) -> bool:
        first = float("inf")
        if params["mode"] == "type":
            killed = self.admin_call(
                "CLIENT",
                "KILL",
                "TYPE",
                "normal",
                "USER",
                "default",
                "SKIPME",
                "yes",
                timeout=FAULT_TIMEOUT,
            )
            text = f"CLIENT KILL TYPE normal USER default: {killed} connection(s)"
        else:
            listing = self.admin_call("CLIENT", "LIST", "TYPE", "normal", timeout=FAULT_TIMEOUT)
            ids = [
                fields["id"]
                for fields in (
                    dict(item.split("=", 1) for item in line.split(" ") if "=" in item)
                    for line in str(listing).splitlines()
                )
                if fields.get("user") == "default"
            ]
            rng = random.Random(params["u"])
            chosen = rng.sample(ids, max(1, int(len(ids) * params["fraction"]))) if ids else []
            killed, first = 0, time.time()
            for client_id in chosen:
                with contextlib.suppress(redis.ResponseError):
                    killed += int(
                        self.admin_call("CLIENT", "KILL", "ID", client_id, timeout=FAULT_TIMEOUT)
                    )
            text = f"CLIENT KILL ID x{len(chosen)} of {len(ids)}: {killed} connection(s)"
        # the connections die when Redis runs the command: at the reply (after a pause, if any)
        done = time.time()
        start = min(first, done - 0.05)
        fault = self.record("client_kill", start, done, mode=params["mode"], killed=killed)
        self.say_fault(fault, text)
        return True

    def do_acl_deny(self, params: dict[str, Any], queue: list[Planned]) -> bool:
        if self._acl_fault is not None:
            return False  # one denial at a time: each has its own restore
        t = time.time()
        self.admin_call("ACL", "SETUSER", "default", f"-{params['cmd']}", timeout=FAULT_TIMEOUT)
        fault = self.record("acl_deny", t, t + params["seconds"], cmd=params["cmd"])
        self._acl_fault = fault
        self.say_fault(fault, f"ACL SETUSER default -{params['cmd']} for {params['seconds']}s")
        heapq.heappush(
            queue,
            Planned(
                self.elapsed() + params["seconds"], -fault.n, "acl_restore", {"fault": fault.n}
            ),
        )
        return True

    def restore_acl(self) -> None:
        """``+@all`` for the default user; retried until Redis takes it (or is restarted)."""
        fault, self._acl_fault = self._acl_fault, None
        if fault is None:
            return  # already ended by a Redis restart
        for _ in range(40):
            if not self.redis.up:
                break  # restarted servers come back with the default user whole
            try:
                self.admin_call("ACL", "SETUSER", "default", "+@all", timeout=5.0)
                break
            except redis.RedisError:
                time.sleep(0.25)
        else:
            self.problems.append("could not restore the default user's ACL")
        fault.t_end = time.time()

    def elapsed(self) -> float:
        return time.time() - self.started_at

    def _apply(self, kind: str, params: dict[str, Any], queue: list[Planned]) -> bool:
        if kind in ("pause", "client_kill", "acl_deny", "redis_restart") and not self.redis.up:
            return False
        actions = {
            "kill9": lambda: self.do_kill9(params),
            "term": lambda: self.do_term(params),
            "redis_restart": lambda: self.do_redis_down(params, queue),
            "pause": lambda: self.do_pause(params),
            "client_kill": lambda: self.do_client_kill(params),
            "acl_deny": lambda: self.do_acl_deny(params, queue),
        }
        return actions[kind]()

    def inject(self, item: Planned, queue: list[Planned]) -> None:
        kind, params = item.kind, item.params
        if kind == "redis_up":
            self.do_redis_up(params)
            return
        if kind == "acl_restore":
            self.restore_acl()
            return
        done = False
        try:
            done = self._apply(kind, params, queue)
        except redis.RedisError as error:
            why = f"{type(error).__name__}: {error}"
        else:
            why = "Redis is down" if not self.redis.up else "no worker to hit"
        if done:
            return
        tries = int(params.get("tries", 0)) + 1
        if tries <= 4 and item.at + POSTPONE < self.settings.duration:
            heapq.heappush(
                queue, Planned(item.at + POSTPONE, item.order, kind, {**params, "tries": tries})
            )
        else:
            self.skipped += 1
            self.out.say(f"fault {kind} skipped ({why})")

    # -- status ----------------------------------------------------------------------------

    def redis_counts(self) -> str:
        if not self.redis.up:
            return "redis down"
        try:
            client = self.redis.admin(3.0)
            try:
                pipe = client.pipeline(transaction=False)
                for name in QUEUES:
                    pipe.llen(keys.queue(name))
                pipe.zcard(keys.SCHEDULE)
                pipe.zcard(keys.RETRY)
                pipe.zcard(keys.DEAD)
                queued_a, queued_b, scheduled, retry, dead = pipe.execute()
                inprogress = sum(
                    client.llen(key) for key in client.scan_iter(keys.INPROGRESS_PREFIX + "*")
                )
            finally:
                client.close()
        except redis.RedisError as error:
            return f"redis: {type(error).__name__}"
        return (
            f"queued {queued_a + queued_b} in progress {inprogress} scheduled {scheduled} "
            f"retry {retry} dead {dead}"
        )

    def status_line(self) -> str:
        self.tail.refresh()
        up = len(self.fleet.up())
        return (
            f"status ({self.phase}): pushed {self.producer.pushed} (unknown "
            f"{self.producer.unknown}) | runs started {self.tail.started} ok {self.tail.ok} "
            f"failed {self.tail.failed} | {self.redis_counts()} | workers up "
            f"{up}/{len(self.fleet.slots)} | faults {len(self.faults)}"
        )

    def status_loop(self) -> None:
        while not self.status_stop.wait(STATUS_EVERY):
            with contextlib.suppress(Exception):
                self.out.say(self.status_line())

    # -- phases ----------------------------------------------------------------------------

    def boot(self) -> None:
        self.redis.start()
        for slot in self.fleet.slots:
            self.fleet.spawn(slot)
        deadline = time.monotonic() + 60
        client = self.redis.admin()
        try:
            while client.scard(keys.PROCESSES) < len(self.fleet.slots):
                self.fleet.tick()
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not register within 60 s")
                time.sleep(0.1)
        finally:
            client.close()
        self.started_at = time.time()
        self.out.origin = self.started_at
        self.out.say(
            f"seed {self.settings.seed}: redis {self.redis.url} (AOF, appendfsync always), "
            f"{len(self.fleet.slots)} workers x {WORKER_CONFIG['concurrency']} threads"
            f"{f' (worker 0 a swarm of {SWARM_CHILDREN})' if self.settings.swarm else ''}, "
            f"presence TTL {self.presence_ttl():g}s, "
            f"{self.settings.duration:.0f}s of faults, evidence in {self.workdir}"
        )

    def run_faults(self) -> None:
        rng = random.Random(self.settings.seed)
        queue = plan_faults(rng, self.settings)
        heapq.heapify(queue)
        self.phase = "faults"
        self.producer.start()
        end = self.settings.duration
        while self.elapsed() < end or any(p.kind in ("redis_up", "acl_restore") for p in queue):
            if self.producer.error is not None:
                raise RuntimeError(f"producer died: {self.producer.error!r}")
            while queue and queue[0].at <= self.elapsed():
                item = heapq.heappop(queue)
                if item.at < end or item.kind in ("redis_up", "acl_restore"):
                    self.inject(item, queue)
            self.fleet.tick()
            time.sleep(TICK)
            if self.elapsed() > end + 60:
                break
        self.producer.stopping.set()
        self.producer.join(30)

    def calm_down(self) -> None:
        """No more faults: Redis up, ACL whole, every worker alive."""
        self.phase = "draining"
        if not self.redis.up:
            self.redis.start()
        self.restore_acl()
        self.disable_periodic()
        self.out.say(
            f"faults stopped ({len(self.faults)} injected, {self.skipped} skipped); "
            f"producer pushed {self.producer.pushed}; cron entries disabled; draining with "
            "every worker alive"
        )
        deadline = time.monotonic() + STUCK_AFTER + 30
        while not self.fleet.all_up() and time.monotonic() < deadline:
            self.fleet.restart_all_now()
            time.sleep(TICK)

    def disable_periodic(self) -> None:
        """Stop the cron entries (the checker judges slots until then), so the run can drain."""
        client = self.redis.admin()
        try:
            pjids = client.hkeys(keys.PERIODIC_SCHEDULE)
            if len(pjids) != len(PERIODIC):
                self.problems.append(f"{len(pjids)} cron entries published, not {len(PERIODIC)}")
            if pjids:
                client.sadd(keys.PERIODIC_DISABLED, *pjids)
        finally:
            client.close()
        self.periodic_disabled_at = time.time()

    def drained(self, client: redis.Redis) -> bool:
        self.fleet.tick()
        if not self.fleet.all_up():
            return False
        self.tail.refresh()
        if self.tail.running_anywhere(self.fleet.live_runners()):
            return False
        snap = snapshot(client)
        return not (
            sum(snap["queues"].values())
            or sum(snap["inprogress"].values())
            or snap["schedule"]
            or snap["retry"]
            or snap["unsettled"]
            or snap["repeat_orphans"]
        )

    def drain(self) -> bool:
        started = time.monotonic()
        deadline = started + self.settings.drain_timeout
        client = self.redis.admin()
        stable = 0
        try:
            while time.monotonic() < deadline:
                try:
                    stable = stable + 1 if self.drained(client) else 0
                except redis.RedisError:
                    stable = 0
                if stable >= 3:
                    self.drain_seconds = time.monotonic() - started
                    self.out.say(f"drained in {self.drain_seconds:.1f}s")
                    return True
                time.sleep(1.0)
        finally:
            client.close()
        self.drain_seconds = time.monotonic() - started
        self.problems.append(f"not drained within {self.settings.drain_timeout:.0f}s")
        self.out.say(f"NOT drained within {self.settings.drain_timeout:.0f}s")
        return False

    def finish(self) -> None:
        client = self.redis.admin()
        try:
            write_json(self.workdir / "snapshot-drained.json", snapshot(client, with_dead=True))
            self.phase = "stopping"
            self.fleet.final_stop_at = time.time()
            self.fleet.stop_all(timeout=STUCK_AFTER)
            write_json(self.workdir / "snapshot-stopped.json", snapshot(client))
        finally:
            client.close()

    def save(self) -> None:
        self.problems.extend(self.fleet.problems)
        write_json(self.workdir / "procs.json", [asdict(r) for r in self.fleet.records])
        write_json(self.workdir / "faults.json", [asdict(f) for f in self.faults])
        write_json(
            self.workdir / "run.json",
            {
                "seed": self.settings.seed,
                "mode": self.settings.mode,
                "duration": self.settings.duration,
                "workers": len(self.fleet.slots),
                "min_jobs": self.settings.min_jobs,
                "min_faults": self.settings.min_faults,
                "started_at": self.started_at,
                "config": self.settings.worker_config(),
                "presence_ttl": self.presence_ttl(),
                "swarm_slot": 0 if self.settings.swarm else None,
                "retry_after_lost_connection": RETRY_AFTER_LOST_CONNECTION,
                "faults_skipped": self.skipped,
                "periodic": PERIODIC,
                "periodic_disabled_at": self.periodic_disabled_at,
                "unique_refused": self.producer.refused,
                "drain_seconds": self.drain_seconds,
                "problems": self.problems,
                "redis_url": self.redis.url,
            },
        )
        self.redis.save_log(self.workdir)

    def run(self) -> chaos_check.Report:
        status = threading.Thread(target=self.status_loop, name="status", daemon=True)
        try:
            self.boot()
            status.start()
            self.run_faults()
            self.calm_down()
            if self.drain():
                self.finish()
            else:
                self.out.say(self.status_line())
        finally:
            for number in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C can't stop cleanup
                signal.signal(number, signal.SIG_IGN)
            self.status_stop.set()
            self.producer.stopping.set()
            self.fleet.kill_all()
            self.save()
            self.redis.cleanup()
        return chaos_check.check(self.workdir)


def snapshot(client: redis.Redis, with_dead: bool = False) -> dict[str, Any]:
    queues = {str(k): int(client.llen(k)) for k in client.scan_iter(keys.QUEUE_PREFIX + "*")}
    inprogress = {
        str(k): int(client.llen(k)) for k in client.scan_iter(keys.INPROGRESS_PREFIX + "*")
    }
    snap: dict[str, Any] = {
        "queues": queues,
        "inprogress": inprogress,
        "schedule": int(client.zcard(keys.SCHEDULE)),
        "retry": int(client.zcard(keys.RETRY)),
        "unsettled": int(client.llen(keys.UNSETTLED)),
        "repeat_orphans": int(client.llen(keys.REPEAT_ORPHANS)),
        "dead_count": int(client.zcard(keys.DEAD)),
        # locks still held, lock key -> owner jid
        "locks": {
            str(key): str(client.get(key))
            for pattern in (keys.UNIQUE_PREFIX + "*", keys.PERIODIC_RUNNING_PREFIX + "*")
            for key in client.scan_iter(pattern)
        },
    }
    if with_dead:
        dead = []
        for raw in client.zrange(keys.DEAD, 0, -1):
            try:
                dead.append(json.loads(raw))
            except ValueError:
                dead.append({"unparseable": str(raw)[:200]})
        snap["dead"] = dead
    return snap


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1, default=str) + "\n")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    settings = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="cogworker-chaos-"))
    for number in (signal.SIGINT, signal.SIGTERM):  # also when started with SIGINT ignored
        signal.signal(number, _interrupt)
    print(
        f"chaos: seed {settings.seed} ({settings.mode}); reproduce the fault plan with "
        f"--seed {settings.seed}",
        flush=True,
    )
    chaos = Chaos(settings, workdir)
    try:
        report = chaos.run()
    except KeyboardInterrupt:
        print(f"chaos: interrupted; evidence kept in {workdir}", flush=True)
        return 130
    except Exception as error:
        print(
            f"chaos: run aborted: {type(error).__name__}: {error}; evidence kept in {workdir}",
            flush=True,
        )
        return 1
    print(chaos_check.render(report), flush=True)
    if report.passed and not settings.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(
            f"chaos: evidence kept in {workdir} (re-check: .venv/bin/python "
            f"bench/chaos_check.py {workdir})",
            flush=True,
        )
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

