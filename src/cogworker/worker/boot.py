"""Booting a worker process: its config, its app, then the launcher (or a swarm of them).

The config is the defaults (or a framework integration's base config), then the ``-C`` file,
then the flags; the options the file and the flags set are pinned on it (``Config.pin``), so
an app's own settings applied later can't override what the operator asked for. The app module
is imported last. ``Boot`` says where the config and the jobs come from: the CLI's own, or an
integration's (``cogworker.contrib.django``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from cogworker import __version__, logs, registry
from cogworker.config import Config, ConfigError, expand_queues, set_default_config
from cogworker.process_state import state
from cogworker.registry import App, load_app
from cogworker.worker import proctitle

if TYPE_CHECKING:
    from cogworker.worker.swarm import Child

ENV_NAMES = ("APP_ENV", "RAILS_ENV", "RACK_ENV")

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
        from cogworker.config import (
            file as config_file,  # with PyYAML (about 1 MB): only when there is a file
        )

        extras = config_file.apply(config, flags.config_path)
    config.server = True
    given: dict[str, Any] = {
        "concurrency": flags.concurrency,
        "shutdown_timeout": flags.timeout,
        "redis_url": flags.redis_url,
        "log_level": flags.log_level,
    }
    set_by_flags = {name: value for name, value in given.items() if value is not None}
    config.update(set_by_flags)
    config.pin(set_by_flags)
    if flags.queues:
        config.queues = expand_queues(flags.queues, "-q")
        config.pin(["queues"])
    if flags.environment is not None:
        config.pin(["environment"])
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
    _run_shutdown_handlers(config)
    logs.flush_output()
    # don't wait for threads still stuck in a job: their work is back on its queue (and
    # atexit handlers don't run: what must happen at exit is a shutdown handler)
    os._exit(0)


def _run_shutdown_handlers(config: Config) -> None:
    for handler in config.shutdown_handlers:
        try:
            handler()
        except Exception as error:
            name = type(error).__name__
            logger.warning("shutdown handler %r failed: %s: %s", handler, name, error)


def run_swarm(flags: WorkerFlags, *, boot: Boot = CLI_BOOT) -> None:
    from cogworker.fetch.strategy import keeps_in_progress
    from cogworker.worker.recovery.reaped import ReapedChildren
    from cogworker.worker.swarm import Swarm

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
        recovery=ReapedChildren(config) if keeps_in_progress(config) else None,
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
