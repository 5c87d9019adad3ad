"""Running ``python -m cogworker swarm`` in tests: the supervisor, its output, its children
(shared by the swarm test modules; not a test module)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from conftest import wait_for
from runtime_support import (
    cogworker_env,
    kill_session,
    live_children,
    registered_identity,
    spawn_cogworker,
)


@dataclass
class Supervisor:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> set[int]:
        return live_children(self.pid)

    def send(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait_output(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        try:
            return wait_for(lambda: re.search(pattern, self.output()), timeout)
        except AssertionError:
            raise AssertionError(f"{pattern!r} not in output:\n{self.output()}") from None

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"supervisor still running:\n{self.output()}") from None


StartSwarm = Callable[..., Supervisor]


@contextlib.contextmanager
def swarms(
    tmp_path: Path, redis_url: str, jobs_source: str, base_config: str
) -> Iterator[StartSwarm]:
    """Start swarms reading ``swarm_jobs`` (``jobs_source``) with ``base_config`` plus what
    each start adds; every one of them (and all they forked) is killed at the end."""
    (tmp_path / "swarm_jobs.py").write_text(jobs_source)
    started: list[Supervisor] = []

    def start(
        count: int = 2, timeout: str = "1", extra_config: str = "", phased: bool = False
    ) -> Supervisor:
        index = len(started)
        config = tmp_path / f"swarm-{index}.yml"
        config.write_text(base_config + extra_config)
        env = cogworker_env(redis_url, COGWORKER_COUNT=str(count))
        env.pop("PHASED_RESTART", None)
        if phased:
            env["PHASED_RESTART"] = "true"
        log = tmp_path / f"swarm-{index}.out"
        args = ["swarm", "-r", "swarm_jobs", "-C", str(config), "-t", timeout]
        supervisor = Supervisor(spawn_cogworker(args, tmp_path, log, env), log)
        started.append(supervisor)
        return supervisor

    try:
        yield start
    finally:
        for supervisor in started:
            kill_session(supervisor.process)  # the supervisor and every child it forked
        for supervisor in started:
            print(f"--- swarm {supervisor.pid}:\n{supervisor.output()}")


def ready(r: redis.Redis, supervisor: Supervisor, count: int = 2) -> dict[int, str]:
    """Wait until ``count`` children run and each has registered; pid -> identity."""

    def registered() -> dict[int, str] | None:
        assert supervisor.process.poll() is None, supervisor.output()
        children = supervisor.children()
        if len(children) != count:
            return None
        found = {pid: registered_identity(r, pid) for pid in children}
        if not all(found.values()):
            return None
        return {pid: str(identity) for pid, identity in found.items()}

    return dict(wait_for(registered, timeout=30))


