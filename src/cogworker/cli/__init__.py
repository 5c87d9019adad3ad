"""The ``cogworker`` command: the root group and the worker commands (here), and the table of
admin commands, each imported only when it runs (``admin``).

    cogworker run -r app.jobs [-c 10] [-q critical,2 -q default] [-t 25] [-C cogworker.yml]
                  [-L worker.log] [-e production] [--redis-url URL] [--log-level INFO]
    cogworker -r app.jobs ...            (the same: ``run`` is the default command)
    cogworker -c 4 swarm -r app.jobs     (worker flags may come before or after run / swarm)
    cogworker demo                       (a worker and some jobs on a private Redis)

Flags win over the config file; the app module (``-r``) is imported last and may still
change settings in a ``configure_server`` block. No flag is dropped or quietly changed: a
worker flag given before ``run`` / ``swarm`` counts as if given after it; one given before
another command is refused (only ``--redis-url`` is passed on to the admin commands); a flag
given twice with different values is refused; the ``-q`` of both sides are combined, in order.
Any error in a flag, the environment, the config file or the app module exits non-zero with
one line on stderr.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import click
import redis

from cogworker import __version__
from cogworker.cli import admin as admin_cli
from cogworker.cli_context import REDIS_URL_META
from cogworker.config import ConfigError
from cogworker.periodic.entries import PeriodicError
from cogworker.registry import AppLoadError
from cogworker.web.cli import web_command
from cogworker.worker.boot import CLI_BOOT, Boot, WorkerFlags, run_swarm, run_worker

__all__ = ["Boot", "WorkerFlags", "label", "main", "main_group", "merge"]

WORKER_COMMANDS = ("run", "swarm")
_GROUP_FLAGS_META = "cogworker.group_worker_flags"


# parameter name -> (flags, click settings); -q is the one repeatable flag
_FLAGS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "app": (
        ("-r", "--require"),
        {"metavar": "MODULE_OR_FILE", "help": "App module (dotted name), .py file or package."},
    ),
    "concurrency": (
        ("-c", "--concurrency"),
        {"type": click.IntRange(min=1), "help": "Processor threads (default 10)."},
    ),
    "queues": (
        ("-q", "--queue"),
        {
            "metavar": "NAME[,WEIGHT]",
            "help": "Queue to read, repeatable; a weight (a positive integer) makes it be "
            "tried first that many times as often.",
        },
    ),
    "timeout": (
        ("-t", "--timeout"),
        {"type": click.FloatRange(min=0), "help": "Shutdown timeout in seconds (default 25)."},
    ),
    "config_path": (
        ("-C", "--config"),
        {"type": click.Path(dir_okay=False), "help": "YAML config file."},
    ),
    "logfile": (
        ("-L", "--logfile"),
        {"type": click.Path(dir_okay=False), "help": "Append log lines to this file."},
    ),
    "environment": (("-e", "--environment"), {"help": "Environment name (default development)."}),
    "redis_url": (("--redis-url",), {"help": "Redis URL (default $REDIS_URL or localhost)."}),
    "log_level": (
        ("--log-level",),
        {
            "type": click.Choice(
                ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False
            ),
            "help": "Log level (default INFO; per-job lines are INFO).",
        },
    ),
}


def label(name: str) -> str:
    """How a worker flag is spelled in messages: ``-c/--concurrency``."""
    return "/".join(_FLAGS[name][0])


def _one_value(ctx: click.Context, param: click.Parameter, values: tuple[Any, ...]) -> Any:
    """The value of a flag that takes one: the same value twice is fine, two are refused."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        shown = " and ".join(repr(value) for value in distinct)
        raise click.UsageError(
            f"{label(str(param.name))} given twice with different values: {shown}"
        )
    if distinct and distinct[0] == "" and param.name in ("config_path", "logfile"):
        raise click.UsageError(f"{label(str(param.name))} needs a file name, got ''")
    return distinct[0] if distinct else None


def _worker_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for name, (flags, settings) in reversed(_FLAGS.items()):
        callback = None if name == "queues" else _one_value
        function = click.option(*flags, name, multiple=True, callback=callback, **settings)(
            function
        )
    return function


def merge(command: str, before: WorkerFlags, after: WorkerFlags) -> WorkerFlags:
    """The flags given before ``command`` and after it, as one set (see the module doc)."""
    merged: dict[str, Any] = {"queues": before.queues + after.queues}
    for name in (f.name for f in dataclasses.fields(WorkerFlags) if f.name != "queues"):
        first, second = getattr(before, name), getattr(after, name)
        if first is not None and second is not None and first != second:
            raise click.UsageError(
                f"{label(name)} given twice with different values: {first!r} before "
                f"{command} and {second!r} after it"
            )
        merged[name] = first if first is not None else second
    return WorkerFlags(**merged)


def _boot() -> Boot:
    """The ``Boot`` a command runs with: an integration's, handed down as the click context's
    ``obj`` (``main(boot=...)``), else the CLI's own."""
    context = click.get_current_context(silent=True)
    found = context.find_object(Boot) if context is not None else None
    return found if found is not None else CLI_BOOT


# -- commands ----------------------------------------------------------------------------------


class _Commands(click.Group):
    """The worker commands defined here, and the admin commands loaded by name on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *admin_cli.COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or admin_cli.load(cmd_name)


@click.group(
    cls=_Commands,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@_worker_options
@click.version_option(__version__, "-V", "--version", prog_name="cogworker")
@click.pass_context
def main_group(ctx: click.Context, /, **given: Any) -> None:
    """cogworker: reliable Redis-backed background jobs."""
    flags = WorkerFlags(**given)
    command = ctx.invoked_subcommand
    ctx.meta[REDIS_URL_META] = flags.redis_url
    if command is None:
        run_worker(flags, boot=_boot())
    elif command in WORKER_COMMANDS:
        ctx.meta[_GROUP_FLAGS_META] = flags
    else:
        passed_on = () if command == "demo" else ("redis_url",)
        refused = [name for name in flags.given() if name not in passed_on]
        if refused and command == "demo":
            raise click.UsageError(
                f"{label(refused[0])} does not apply to demo, which starts its own Redis and worker"
            )
        if refused:
            raise click.UsageError(
                f"{label(refused[0])} does not apply to {command}: it is a flag of run and "
                "swarm (before other commands only --redis-url is taken)"
            )


def _flags_for(command: str, **given: Any) -> WorkerFlags:
    before = click.get_current_context().meta.get(_GROUP_FLAGS_META, WorkerFlags())
    return merge(command, before, WorkerFlags(**given))


@main_group.command("run")
@_worker_options
def run_command(**given: Any) -> None:
    """Run a worker process."""
    run_worker(_flags_for("run", **given), boot=_boot())


@main_group.command("swarm")
@_worker_options
def swarm_command(**given: Any) -> None:
    """Run COGWORKER_COUNT worker processes under a supervisor (same flags as run)."""
    run_swarm(_flags_for("swarm", **given), boot=_boot())


@main_group.command("demo")
@click.option(
    "--jobs",
    default=20,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many greeting jobs to enqueue.",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=None,
    help="Serve the dashboard too (default: when the web extra is installed).",
)
@click.option(
    "--keep/--no-keep",
    default=None,
    help="After the jobs, keep the dashboard and worker running (enqueueing now and then) "
    "until Ctrl-C (default: when run in a terminal).",
)
def demo_command(jobs: int, dashboard: bool | None, keep: bool | None) -> None:
    """Start a private Redis, a worker and the dashboard; enqueue demo jobs and watch them run."""
    from cogworker.local import demo

    sys.exit(demo.main(jobs, dashboard=dashboard, keep=keep))


main_group.add_command(web_command)  # imports nothing of the web extra until it runs


def main(
    argv: list[str] | None = None,
    *,
    group: click.Group = main_group,
    prog_name: str = "cogworker",
    boot: Boot = CLI_BOOT,
) -> None:
    """Entry point: one-line errors, no tracebacks, non-zero exit codes. (An integration runs
    its own ``group`` of these commands with its ``boot``: ``manage.py cogworker``.)"""
    try:
        group.main(args=argv, prog_name=prog_name, standalone_mode=False, obj=boot)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.Abort:
        sys.exit(130)
    except click.ClickException as error:
        click.echo(f"{prog_name}: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except (ConfigError, AppLoadError, PeriodicError) as error:
        click.echo(f"{prog_name}: {error}", err=True)
        sys.exit(1)
    except redis.RedisError as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        click.echo(f"{prog_name}: Redis error: {detail}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
