"""The ``cogworker`` command.

    cogworker run -r app.jobs [-c 10] [-q critical,2 -q default] [-t 25] [-C cogworker.yml]
                  [-L worker.log] [-e production] [--redis-url URL] [--log-level INFO]
    cogworker -r app.jobs ...            (the same: ``run`` is the default command)
    cogworker demo                       (a worker and some jobs on a private Redis)

Flags win over the config file; the app module (``-r``) is imported last and may still
change settings in a ``configure_server`` block. Any error in a flag, the config file or the
app module exits non-zero with one line on stderr.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import redis

from cogworker import __version__, admin_cli, config_file, connection, logs, proctitle, registry
from cogworker.config import Config, ConfigError, expand_queues, set_default_config
from cogworker.periodic.entries import PeriodicError

ENV_NAMES = ("APP_ENV", "RAILS_ENV", "RACK_ENV")


class AppLoadError(Exception):
    """The app module named by ``-r`` couldn't be found or raised while loading."""


def _module_name_for(path: Path) -> str:
    """A dotted module name for ``path``: relative to the working directory when inside it."""
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path.stem
    parts = [*relative.parent.parts, path.stem]
    valid = all(part.isidentifier() for part in parts)
    return ".".join(parts) if valid else path.stem


def load_app(target: str) -> None:
    """Import the app: a dotted module name, a ``.py`` file, or a package directory."""
    path = Path(target)
    if path.is_dir():
        path = path / "__init__.py"
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise AppLoadError(f"can't load app {target!r}: no such file")
        _load_file(path)
        return
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name and target.startswith(error.name):
            raise AppLoadError(
                f"can't load app {target!r}: no module named {error.name!r}"
            ) from None
        raise AppLoadError(f"loading {target!r} failed: {_describe(error)}") from error
    except Exception as error:
        raise AppLoadError(f"loading {target!r} failed: {_describe(error)}") from error


def _load_file(path: Path) -> None:
    name = _module_name_for(path) if path.name != "__init__.py" else path.parent.name
    for directory in (str(path.resolve().parent), os.getcwd()):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AppLoadError(f"can't load app {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise AppLoadError(f"loading {str(path)!r} failed: {_describe(error)}") from error
    # producers may know the module by either name: register its jobs under both
    if path.stem != name and path.name != "__init__.py":
        sys.modules.setdefault(path.stem, module)
        registry.alias_module(name, path.stem)


def _describe(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _worker_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "-r",
            "--require",
            "app",
            metavar="MODULE_OR_FILE",
            help="App module (dotted name), .py file or package directory.",
        ),
        click.option(
            "-c",
            "--concurrency",
            type=click.IntRange(min=1),
            help="Processor threads (default 10).",
        ),
        click.option(
            "-q",
            "--queue",
            "queues",
            multiple=True,
            metavar="NAME[,WEIGHT]",
            help="Queue to read, repeatable; a weight makes it be tried first more often.",
        ),
        click.option(
            "-t",
            "--timeout",
            type=click.FloatRange(min=0),
            help="Shutdown timeout in seconds (default 25).",
        ),
        click.option(
            "-C",
            "--config",
            "config_path",
            type=click.Path(dir_okay=False),
            help="YAML config file.",
        ),
        click.option(
            "-L",
            "--logfile",
            type=click.Path(dir_okay=False),
            help="Append log lines to this file instead of stdout.",
        ),
        click.option("-e", "--environment", help="Environment name (default development)."),
        click.option("--redis-url", help="Redis URL (default $REDIS_URL or localhost)."),
        click.option(
            "--log-level",
            type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
            help="Log level (default INFO; per-job lines are INFO).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def build_config(
    *,
    concurrency: int | None,
    queues: tuple[str, ...],
    timeout: float | None,
    config_path: str | None,
    environment: str | None,
    redis_url: str | None,
    log_level: str | None,
) -> tuple[Config, dict[str, Any]]:
    """The worker's config (defaults, then the config file, then the flags), and the config
    file's sections that must wait for the app's code (cron entries name its jobs)."""
    env = environment or next((os.environ[n] for n in ENV_NAMES if os.environ.get(n)), None)
    env = env or "development"
    for name in ENV_NAMES:  # before the config file, whose ${VAR}s may read them
        os.environ[name] = env
    config = Config(environment=env)
    extras = config_file.apply(config, config_path) if config_path else {}
    config.server = True
    flags: dict[str, Any] = {
        "concurrency": concurrency,
        "shutdown_timeout": timeout,
        "redis_url": redis_url,
        "log_level": log_level.upper() if log_level else None,
    }
    config.update({name: value for name, value in flags.items() if value is not None})
    if queues:
        config.queues = expand_queues(queues, "-q")
    return config, extras


def run_worker(app: str | None, logfile: str | None, **settings: Any) -> None:
    config, extras = build_config(**settings)
    set_default_config(config)
    try:
        logs.setup(config.log_level, logfile)
    except OSError as error:
        raise ConfigError(f"can't open log file {logfile}: {error.strerror}") from None
    if config.redis_url is None:  # $REDIS_URL is used: check it like the option
        Config(redis_url=connection.resolve_url(None))
    if not app:
        raise click.UsageError("missing -r MODULE_OR_FILE: the module that defines your jobs")
    load_app(app)
    if "periodic" in extras:
        config.periodic.register_from_config(extras["periodic"])
    logs.setup(config.log_level, logfile)  # the app may have changed the level
    from cogworker.worker.launcher import Launcher

    launcher = Launcher(config)
    launcher.install_signal_handlers()
    launcher.run()
    logs.flush_output()
    # don't wait for threads still stuck in a job: their work is back on its queue
    os._exit(0)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@_worker_options
@click.version_option(__version__, "-V", "--version", prog_name="cogworker")
@click.pass_context
def main_group(
    ctx: click.Context, /, app: str | None, logfile: str | None, **settings: Any
) -> None:
    """cogworker: reliable Redis-backed background jobs."""
    if ctx.invoked_subcommand is None:
        run_worker(app, logfile, **settings)


@main_group.command("run")
@_worker_options
def run_command(app: str | None, logfile: str | None, **settings: Any) -> None:
    """Run a worker process."""
    run_worker(app, logfile, **settings)


@main_group.command("swarm")
@_worker_options
def swarm_command(app: str | None, logfile: str | None, **settings: Any) -> None:
    """Run COGWORKER_COUNT worker processes under a supervisor (same flags as run)."""
    from cogworker.swarm import Swarm

    config, _ = build_config(**settings)  # validate flags and file before forking
    if not app:
        raise click.UsageError("missing -r MODULE_OR_FILE: the module that defines your jobs")
    count_text = os.environ.get("COGWORKER_COUNT", "1")
    try:
        count = max(int(count_text), 1)
    except ValueError:
        raise ConfigError(f"COGWORKER_COUNT must be a whole number, got {count_text!r}") from None
    try:
        logs.setup(config.log_level, logfile)
    except OSError as error:
        raise ConfigError(f"can't open log file {logfile}: {error.strerror}") from None
    swarm = Swarm(
        count,
        lambda slot: _run_swarm_child(app, logfile, slot, settings),
        shutdown_timeout=config.shutdown_timeout,
        max_memory_mb=config.max_memory,
        phased=os.environ.get("PHASED_RESTART") == "true",
    )
    swarm.install_signal_handlers()
    tag = f" {config.tag}" if config.tag else ""
    proctitle.set_title(f"cogworker {__version__} swarm{tag} [{count} children]")
    swarm.run()


def _run_swarm_child(app: str, logfile: str | None, slot: int, settings: dict[str, Any]) -> None:
    """A forked child: forget the parent's per-process state, then boot a full worker."""
    from cogworker import locks, redis_errors
    from cogworker.worker import recovery

    redis_errors.reporter.reset()
    locks.deferred.clear()
    recovery.reset()
    run_worker(app, logfile, **settings)


@main_group.command("demo")
@click.option("--jobs", default=20, show_default=True, help="How many demo jobs to enqueue.")
def demo_command(jobs: int) -> None:
    """Start a private Redis and a worker, enqueue demo jobs and watch them run."""
    from cogworker import demo

    sys.exit(demo.main(jobs))


for _admin_command in admin_cli.COMMANDS:
    main_group.add_command(_admin_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors, no tracebacks, non-zero exit codes."""
    try:
        main_group.main(args=argv, prog_name="cogworker", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.Abort:
        sys.exit(130)
    except click.ClickException as error:
        click.echo(f"cogworker: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except (ConfigError, AppLoadError, PeriodicError) as error:
        click.echo(f"cogworker: {error}", err=True)
        sys.exit(1)
    except redis.RedisError as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        click.echo(f"cogworker: Redis error: {detail}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
