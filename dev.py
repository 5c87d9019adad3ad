#!/usr/bin/env python3
"""Developer tasks, needing only Python >= 3.11 and git: ``python3 dev.py test`` / ``demo``.

Creates ``.venv`` on first use and installs into it exactly what ``requirements/dev.lock``
pins (every package with its hashes), then cogworker itself, editable; again only when the
lock or pyproject.toml changed. Then it runs the task inside it.

    python3 dev.py test [--fast] [PYTEST ARGS]
                                 ruff, mypy --strict, lint-imports, then the pytest suite:
                                 all of it (what CI runs); --fast: the quick set (no browser,
                                 chaos, Sentinel, TLS, swarm or worker-subprocess tests);
                                 test paths given: exactly those
    python3 dev.py test --newest [--fast] [PYTEST ARGS]
                                 the same in .venv-newest, on the newest release of every
                                 dependency pyproject.toml allows (ruff, mypy and
                                 import-linter stay at their locked versions)
    python3 dev.py lint [--newest]
                                 ruff, mypy --strict and lint-imports only
    python3 dev.py lock          re-resolve requirements/dev.lock to the newest releases
                                 pyproject.toml and requirements/dev.in allow
    python3 dev.py demo          a worker and some jobs on a private Redis
    python3 dev.py bench [NAME ...]
                                 the benchmarks under bench/ (chaos: fault injection)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
LOCK = ROOT / "requirements" / "dev.lock"
LOCK_INPUT = ROOT / "requirements" / "dev.in"
# what `dev.py bench` runs by default; `dev.py bench chaos` runs the fault-injection suite
BENCHMARKS = ("enqueue", "worker", "periodic", "api", "web", "history_pages", "metrics_by_class")
# the lint tools keep their locked versions under --newest: a new ruff or mypy rule is a
# chore for the next lock refresh, not a broken release of a dependency
LINT_TOOLS = ("ruff", "mypy", "import-linter", "grimp", "types-pyyaml")


class Environment:
    """One virtual environment of the project's: ``.venv`` (locked) or ``.venv-newest``."""

    def __init__(self, name: str) -> None:
        self.path = ROOT / name
        self.bin = self.path / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / "python"
        self.stamp = self.path / ".cogworker-installed"

    def create(self) -> None:
        if not self.python.exists():
            print(f"dev.py: creating {self.path.name}", flush=True)
            venv.EnvBuilder(with_pip=True).create(self.path)

    def pip(self, *args: str | Path) -> None:
        run(self.python, "-m", "pip", "--disable-pip-version-check", "install", "--quiet", *args)


def run(*command: str | Path) -> None:
    result = subprocess.run([str(part) for part in command], cwd=ROOT)
    if result.returncode != 0:
        sys.exit(result.returncode)


def fingerprint(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def locked_environment() -> Environment:
    """``.venv`` holding exactly the lock's packages (hash-checked), and cogworker editable."""
    environment = Environment(".venv")
    environment.create()
    wanted = fingerprint(LOCK, ROOT / "pyproject.toml")
    if environment.stamp.exists() and environment.stamp.read_text() == wanted:
        return environment
    print(f"dev.py: installing {LOCK.relative_to(ROOT)} into .venv", flush=True)
    # --no-deps: the lock is complete, so pip resolves nothing on its own; the build backend
    # is in the lock too, hence no build isolation (which would fetch the newest setuptools)
    environment.pip("--require-hashes", "--no-deps", "-r", LOCK)
    environment.pip("--no-deps", "--no-build-isolation", "-e", ".")
    run(environment.python, "-m", "pip", "--disable-pip-version-check", "check")
    environment.stamp.write_text(wanted)
    return environment


def locked_versions(names: tuple[str, ...]) -> list[str]:
    """``name==version`` lines of the lock for ``names``."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", LOCK.read_text(), re.MULTILINE)
    return [f"{name}=={version}" for name, version in pins if name.lower() in names]


def newest_environment() -> Environment:
    """``.venv-newest``: the newest releases pyproject.toml admits, upgraded on every run (a
    new upstream release is what this is for), the lint tools pinned as locked."""
    environment = Environment(".venv-newest")
    environment.create()
    print("dev.py: upgrading .venv-newest to the newest releases pyproject.toml allows", flush=True)
    environment.pip("--upgrade", "pip")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("\n".join(locked_versions(LINT_TOOLS)) + "\n")
    try:
        environment.pip(
            "--upgrade", "--upgrade-strategy", "eager", "-c", constraints.name, "-e", ".[dev]"
        )
    finally:
        os.unlink(constraints.name)
    # what this run is on, for the note: the versions differ from one day to the next
    run(environment.python, "-m", "pip", "--disable-pip-version-check", "list", "--format=freeze")
    return environment


def refresh_lock() -> None:
    """Re-resolve the lock, for every supported CPython and platform at once (universal)."""
    environment = locked_environment()
    print(f"dev.py: resolving {LOCK.relative_to(ROOT)} (newest allowed releases)", flush=True)
    run(
        environment.bin / "uv", "pip", "compile", "--quiet", "--universal", "--generate-hashes",
        "--upgrade", "--python-version", "3.11", "--extra", "dev",
        "--custom-compile-command", "python3 dev.py lock",
        "pyproject.toml", LOCK_INPUT.relative_to(ROOT), "-o", LOCK.relative_to(ROOT),
    )  # fmt: skip
    print("dev.py: lock written; `python3 dev.py test` installs and checks it", flush=True)


def lint(environment: Environment) -> None:
    print("dev.py: ruff", flush=True)
    run(environment.bin / "ruff", "check", "src", "tests", "bench", "tools", "examples", "dev.py")
    print("dev.py: mypy --strict", flush=True)
    run(environment.bin / "mypy")
    print("dev.py: lint-imports (the layering in pyproject.toml)", flush=True)
    run(environment.bin / "lint-imports", "--no-cache")


def browser_selection(pytest_args: list[str]) -> list[str]:
    """Leave the browser tests out, saying so, on a machine without chromium; never in CI
    (CI installs chromium, and a missing one must fail there, not pass unseen)."""
    if os.environ.get("CI") or shutil.which("chromium") or "-m" in pytest_args:
        return []
    print(
        "dev.py: no chromium on this machine: the browser tests are left out "
        "(apt-get install chromium to run them; CI always runs them)",
        flush=True,
    )
    return ["-m", "not browser"]


def pytest_arguments(rest: list[str], fast: bool) -> list[str]:
    if fast:
        if "-m" in rest:
            sys.exit("dev.py: --fast selects by marker (-m 'not slow'): give it or -m, not both")
        return ["-m", "not slow", *rest]
    return [*browser_selection(rest), *rest]


def main(argv: list[str]) -> None:
    task, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if task not in ("test", "demo", "bench", "lint", "lock"):
        print(__doc__)
        sys.exit(0 if task == "help" else 2)
    if sys.version_info < (3, 11):  # noqa: UP036 (dev.py runs under whatever python3 is)
        sys.exit(f"cogworker needs Python >= 3.11, this is {sys.version.split()[0]}")
    newest = "--newest" in rest
    fast = "--fast" in rest
    rest = [arg for arg in rest if arg not in ("--newest", "--fast")]
    if (newest and task not in ("test", "lint")) or (fast and task != "test"):
        sys.exit(f"dev.py: --newest is for test and lint, --fast for test, not for {task}")
    if task == "lock":
        refresh_lock()
        return
    environment = newest_environment() if newest else locked_environment()
    if task in ("test", "lint"):
        lint(environment)
        if task == "lint":
            return
        print("dev.py: pytest" + (" (the fast set)" if fast else ""), flush=True)
        run(environment.python, "-m", "pytest", *pytest_arguments(rest, fast))
    elif task == "demo":
        run(environment.python, "-m", "cogworker", "demo", *rest)
    else:
        for name in rest or list(BENCHMARKS):
            print(f"dev.py: bench/{name}.py", flush=True)
            run(environment.python, ROOT / "bench" / f"{name}.py")


if __name__ == "__main__":
    main(sys.argv[1:])
