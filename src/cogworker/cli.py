"""The ``cogworker`` command.

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
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
import redis

from cogworker import __version__, admin_cli, logs, proctitle, registry
from cogworker.cli_context import REDIS_URL_META
from cogworker.config import Config, ConfigError, expand_queues, set_default_config
from cogworker.periodic.entries import PeriodicError
from cogworker.process_state import state
from cogworker.registry import App, AppLoadError, load_app
from cogworker.web.cli import web_command

if TYPE_CHECKING:
    from cogworker.swarm import Child

__all__ = [
    "AppLoadError",
    "Boot",
    "WorkerFlags",
    "build_config",
    "load_app",
    "main",
    "run_worker",
]

ENV_NAMES = ("APP_ENV", "RAILS_ENV", "RACK_ENV")
WORKER_COMMANDS = ("run", "swarm")
_GROUP_FLAGS_META = "cogworker.group_worker_flags"

logger = logging.getLogger("cogworker")


@dataclass(frozen=True)
class WorkerFlags:
    """The worker flags as given on the command line; None / () where not given."""

    app: str | None = None
    concurrency: int | None = None
    queues: tuple[str, ...] = ()
    timeout: float | None = None
    config_path: str | None = None
    logfile: str | None = None
    environment: str | None = None
    redis_url: str | None = None
    log_level: str | None = None

    def given(self) -> list[str]:
        """The names of the flags that were given, in declaration order."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) not in (None, ())]


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


# -- environment and config --------------------------------------------------------------------


def _environment(flag: str | None) -> str:
    """``-e``, else the one value of APP_ENV / RAILS_ENV / RACK_ENV, else development."""
    if flag is not None:
        return flag
    found = {name: os.environ[name] for name in ENV_NAMES if os.environ.get(name)}
    if len(set(found.values())) > 1:
        shown = ", ".join(f"{name}={value!r}" for name, value in found.items())
        raise ConfigError(f"{shown} disagree: pass -e ENVIRONMENT or make them agree")
    return next(iter(found.values()), "development")


def build_config(flags: WorkerFlags, base: Config | None = None) -> tuple[Config, dict[str, Any]]:
    """The worker's config (``base``, by default the defaults, then the config file, then the
    flags), and the config file's sections that must wait for the app's code (cron entries
    name its jobs)."""
    env = _environment(flags.environment)
    config = Config() if base is None else base
    config.environment = env  # validates it before it is exported
    for name in ENV_NAMES:  # before the config file, whose ${VAR}s may read them
        os.environ[name] = env
    extras: dict[str, Any] = {}
    if flags.config_path:
        from cogworker import config_file  # with PyYAML (about 1 MB): only when there is a file

        extras = config_file.apply(config, flags.config_path)
    config.server = True
    given: dict[str, Any] = {
        "concurrency": flags.concurrency,
        "shutdown_timeout": flags.timeout,
        "redis_url": flags.redis_url,
        "log_level": flags.log_level,
    }
    config.update({name: value for name, value in given.items() if value is not None})
    if flags.queues:
        config.queues = expand_queues(flags.queues, "-q")
    return config, extras


def swarm_count() -> int:
    """``COGWORKER_COUNT``: how many children a swarm forks (unset or empty: 1)."""
    text = os.environ.get("COGWORKER_COUNT", "").strip()
    if not text:
        return 1
    try:
        count = int(text)
    except ValueError:
        raise ConfigError(f"COGWORKER_COUNT must be a whole number, got {text!r}") from None
    if count < 1:
        raise ConfigError(f"COGWORKER_COUNT must be at least 1, got {text!r}")
    return count


def phased_restart() -> bool:
    """``PHASED_RESTART``: ``true`` restarts a swarm's children one at a time on USR2."""
    text = os.environ.get("PHASED_RESTART", "")
    if text not in ("", "true", "false"):
        raise ConfigError(f"PHASED_RESTART must be 'true' or 'false', got {text!r}")
    return text == "true"


def _refuse_swarm_settings(config: Config) -> None:
    """A plain ``run`` has no supervisor: refuse what only a swarm would honour."""
    if swarm_count() != 1:
        raise ConfigError(
            f"COGWORKER_COUNT={os.environ['COGWORKER_COUNT'].strip()} asks for several "
            "worker processes, but run starts one: use cogworker swarm, or unset it"
        )
    if phased_restart():
        raise ConfigError("PHASED_RESTART=true applies to cogworker swarm only: unset it")
    if config.max_memory is not None:
        raise ConfigError(
            f"max_memory ({config.max_memory:g} MB) is enforced by cogworker swarm only: "
            "run has no supervisor to replace the worker; remove it or use swarm"
        )


def _setup_logs(config: Config, logfile: str | None) -> None:
    try:
        logs.setup(config.log_level, logfile)
    except OSError as error:
        raise ConfigError(f"can't open log file {logfile}: {error.strerror}") from None


# -- running workers ---------------------------------------------------------------------------

MISSING_APP = "missing -r MODULE_OR_FILE: the module that defines your jobs"


def _load_required_app(flags: WorkerFlags) -> App:
    if not flags.app:
        raise click.UsageError(MISSING_APP)
    return load_app(flags.app)


@dataclass(frozen=True)
class Boot:
    """Where a worker's config and jobs come from. The CLI's own: the defaults, the config
    file and the flags, then the ``-r`` module, which is required. A framework integration
    hands its own to the commands as the click context's ``obj`` (``cogworker.contrib.django``:
    its settings under the flags, the installed apps' jobs modules)."""

    configure: Callable[[WorkerFlags], tuple[Config, dict[str, Any]]] = build_config
    load: Callable[[WorkerFlags], App] = _load_required_app
    requires_app: bool = True


CLI_BOOT = Boot()


def _boot() -> Boot:
    context = click.get_current_context(silent=True)
    found = context.find_object(Boot) if context is not None else None
    return found if found is not None else CLI_BOOT


def run_worker(flags: WorkerFlags, *, child: Child | None = None, boot: Boot = CLI_BOOT) -> None:
    """Boot a worker in this process; ``child`` when it is a swarm's child."""
    supervised = child is not None
    from cogworker.worker.malloc_arenas import cap_malloc_arenas

    cap_malloc_arenas()  # before the app or the worker starts a thread
    config, extras = boot.configure(flags)
    set_default_config(config)
    if not supervised:
        _refuse_swarm_settings(config)
    _setup_logs(config, flags.logfile)
    if boot.requires_app and not flags.app:
        raise click.UsageError(MISSING_APP)
    app = boot.load(flags)
    if not supervised:
        _refuse_swarm_settings(config)  # again: the app may have set max_memory
    registry.allow_imports(*app.packages, *config.job_packages)
    if not app.job_classes:
        logger.warning(
            "app module %r registered no job class: every job will fail as an unknown job "
            "class unless its class is in a module under %s",
            app.target,
            ", ".join(sorted({*app.packages, *config.job_packages})),
        )
    if "periodic" in extras:
        config.periodic.register_from_config(extras["periodic"])
    _setup_logs(config, flags.logfile)  # the app may have changed the level
    from cogworker.worker.launcher import Launcher

    launcher = Launcher(config, child=child)
    launcher.install_signal_handlers()
    launcher.run()
    logs.flush_output()
    # don't wait for threads still stuck in a job: their work is back on its queue
    os._exit(0)


def run_swarm(flags: WorkerFlags, *, boot: Boot = CLI_BOOT) -> None:
    from cogworker.swarm import Swarm
    from cogworker.worker.recovery.reaped import ReapedChildren

    config, _ = boot.configure(flags)  # validate flags and file before forking
    config.check_liveness()
    if boot.requires_app and not flags.app:
        raise click.UsageError(MISSING_APP)
    count, phased = swarm_count(), phased_restart()
    _setup_logs(config, flags.logfile)
    swarm = Swarm(
        count,
        lambda child: _run_swarm_child(flags, child, boot),
        # basic fetch keeps no in-progress list: there is nothing to requeue
        recovery=ReapedChildren(config) if config.fetch == "reliable" else None,
        shutdown_timeout=config.shutdown_timeout,
        max_memory_mb=config.max_memory,
        phased=phased,
    )
    swarm.install_signal_handlers()
    tag = f" {config.tag}" if config.tag else ""
    proctitle.set_title(f"cogworker {__version__} swarm{tag} [{count} children]")
    swarm.run()


def _run_swarm_child(flags: WorkerFlags, child: Child, boot: Boot) -> None:
    """A forked child: forget the parent's per-process state, then boot a full worker."""
    state.reset()
    run_worker(flags, child=child, boot=boot)


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
    from cogworker import demo

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
