#!/usr/bin/env python3
"""Developer tasks, needing only Python >= 3.11 and git: ``python3 dev.py test`` / ``demo``.

Creates ``.venv`` on first use and installs the project with its dev extras into it
(again only when pyproject.toml changed), then runs the task inside it.

    python3 dev.py test [PYTEST ARGS]   ruff, mypy --strict, lint-imports, then the pytest suite
    python3 dev.py lint                 ruff, mypy --strict and lint-imports only
    python3 dev.py demo                 a worker and some jobs on a private Redis
    python3 dev.py bench [NAME ...]     the benchmarks under bench/ (chaos: fault injection)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".cogworker-installed"
# what `dev.py bench` runs by default; `dev.py bench chaos` runs the fault-injection suite
BENCHMARKS = ("enqueue", "worker", "periodic", "api", "web", "history_pages", "metrics_by_class")


def run(*command: str | Path) -> None:
    result = subprocess.run([str(part) for part in command], cwd=ROOT)
    if result.returncode != 0:
        sys.exit(result.returncode)


def ensure_environment() -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"cogworker needs Python >= 3.11, this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print("dev.py: creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print("dev.py: installing cogworker[dev] into .venv", flush=True)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(wanted)


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


def main(argv: list[str]) -> None:
    task, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if task not in ("test", "demo", "bench", "lint"):
        print(__doc__)
        sys.exit(0 if task == "help" else 2)
    ensure_environment()
    if task in ("test", "lint"):
        print("dev.py: ruff", flush=True)
        run(BIN / "ruff", "check", "src", "tests", "bench", "tools", "examples")
        print("dev.py: mypy --strict", flush=True)
        run(BIN / "mypy")
        print("dev.py: lint-imports (the layering in pyproject.toml)", flush=True)
        run(BIN / "lint-imports", "--no-cache")
        if task == "lint":
            return
        print("dev.py: pytest", flush=True)
        run(PYTHON, "-m", "pytest", *browser_selection(rest), *rest)
    elif task == "demo":
        run(PYTHON, "-m", "cogworker", "demo", *rest)
    else:
        names = rest or list(BENCHMARKS)
        for name in names:
            print(f"dev.py: bench/{name}.py", flush=True)
            run(PYTHON, ROOT / "bench" / f"{name}.py")


if __name__ == "__main__":
    main(sys.argv[1:])
