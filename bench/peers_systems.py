"""The systems bench/peers.py compares, and how it starts, feeds and measures their workers.

Each system lives in its own virtualenv under ``.bench-venvs/<module>/``; its side of the
benchmark is bench/peers_<module>.py, imported there (never in the driver's interpreter).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
VENVS = CHECKOUT / ".bench-venvs"
COUNTER = "peers:incr"
LATENCIES = "peers:latency"
FIRST_START = "peers:first_start"
NAP_SECONDS = 0.02  # how long each job of the I/O-bound row sleeps
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class System:
    name: str
    module: str  # bench/peers_<module>.py
    requirements: tuple[str, ...]
    packages: tuple[str, ...]  # distributions whose versions the table names
    default_concurrency: int  # 0: no worker (the bare LPUSH floor)
    venv: str = ""  # its virtualenv under .bench-venvs/ (default: named after the module)
    source: Path | None = None  # cogworker only: the checkout it is installed from

    @property
    def python(self) -> Path:
        return VENVS / (self.venv or self.module) / "bin" / "python"


def baseline(checkout: Path) -> System:
    """cogworker as installed from another checkout (an earlier revision), measured beside
    this one: same job module, its own virtualenv."""
    return System(
        "cogworker baseline", "cog", (), ("cogworker", "redis"), 10, "cog-baseline", checkout
    )


SYSTEMS = (
    System("cogworker", "cog", (), ("cogworker", "redis"), 10),
    System("huey", "huey", ("huey>=3", "redis"), ("huey", "redis"), 1),
    System("dramatiq", "dramatiq", ("dramatiq[redis]",), ("dramatiq", "redis"), 8),
    System("bare LPUSH", "bare", ("redis",), ("redis",), 0),
)


def environment(url: str) -> dict[str, str]:
    """The checkout's src must not leak in: each system runs what its venv installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PYTHONPATH": str(HERE), "PEERS_REDIS_URL": url, "REDIS_URL": url}


def worker_command(system: System, concurrency: int) -> list[str]:
    python = str(system.python)
    if system.module == "cog":
        flags = ["-c", str(concurrency), "--log-level", "WARNING"]
        return [python, "-m", "cogworker", "run", "-r", "peers_cog", *flags]
    if system.module == "huey":
        consumer = str(system.python.parent / "huey_consumer")
        return [python, consumer, "peers_huey.huey", "-w", str(concurrency), "-q"]
    if system.module == "dramatiq":
        return [python, "-m", "dramatiq", "peers_dramatiq", "--processes", "1",
                "--threads", str(concurrency)]  # fmt: skip
    raise ValueError(f"{system.name} has no worker")


def enqueue(system: System, url: str, mode: str, count: int) -> float:
    """Run bench/peers_enqueue.py in the system's venv; the seconds it reports."""
    script = str(HERE / "peers_enqueue.py")
    command = [str(system.python), script, system.module, mode, str(count)]
    done = subprocess.run(
        command, env=environment(url), cwd=HERE, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system.name} enqueue {mode} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.strip())


class Worker:
    """A running worker process; its output goes to a file shown only when it fails."""

    def __init__(self, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.process = process
        self.log = log

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                tail = self.log.read().decode(errors="replace")[-800:]
                raise RuntimeError(f"worker never reached {what}: {tail}")
            time.sleep(0.002)

    def cpu_seconds(self) -> float:
        """user + system of its process tree, and of children the tree has reaped."""
        return sum(cpu_seconds(pid) for pid in process_tree(self.process.pid))

    def peak_rss_mb(self) -> float:
        """VmHWM summed over its process tree (dramatiq runs a parent beside its worker)."""
        return sum(peak_rss_mb(pid) for pid in process_tree(self.process.pid))


@contextlib.contextmanager
def running(system: System, url: str, concurrency: int) -> Iterator[Worker]:
    with tempfile.NamedTemporaryFile(prefix="peers-worker-") as log:
        command = worker_command(system, concurrency)
        process = subprocess.Popen(
            command, env=environment(url), cwd=HERE, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            yield Worker(process, log)
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def process_tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def cpu_seconds(pid: int) -> float:
    # utime, stime, cutime, cstime: fields 14-17 of /proc/<pid>/stat
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
