"""The CLI offers the admin commands by name and imports them only when one is asked for:
the table it uses must be exactly ``cogworker.admin.COMMANDS``, and a worker must not load
them (nor the read API behind them)."""

from __future__ import annotations

import subprocess
import sys

from cogworker import admin
from cogworker.cli import admin as admin_cli


def test_the_table_names_every_admin_command_and_nothing_else() -> None:
    assert {name: admin_cli.load(name) for name in admin_cli.COMMAND_MODULES} == {
        command.name: command for command in admin.COMMANDS
    }
    assert admin_cli.load("no-such-command") is None


def test_the_cli_and_the_worker_runtime_load_no_admin_command_nor_the_read_api() -> None:
    code = (
        "import sys, cogworker.cli, cogworker.worker.launcher\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cogworker.api', "
        "'cogworker.admin.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
