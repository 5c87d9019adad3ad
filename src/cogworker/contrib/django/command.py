"""``python manage.py cogworker run|swarm|web``: the ``cogworker`` command under Django.

The flags are the ``cogworker`` command's, with the same rules (worker flags before or after
``run`` / ``swarm``, ``run`` by default). A worker's config is ``settings.COGWORKER`` (the
process's config, built when Django started), then ``-C FILE`` if given, then the flags:
flags win over the settings, the settings over the defaults. Its jobs are the installed
apps' ``jobs`` modules, imported after the flags are applied (as the CLI imports ``-r``
last), so a ``configure_server`` block in one of them runs in the worker. ``-r MODULE`` is
optional here and honoured: that module is imported too. ``web`` serves the dashboard on the
settings' Redis unless ``--redis-url`` says otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from django.apps import apps  # type: ignore[import-untyped]

from cogworker import cli
from cogworker.config import Config
from cogworker.contrib.django.apps import CogworkerAppConfig
from cogworker.contrib.django.discovery import load_jobs
from cogworker.web.cli import web_command
from cogworker.worker import boot


def _app() -> CogworkerAppConfig:
    app = apps.get_app_config(CogworkerAppConfig.label)
    assert isinstance(app, CogworkerAppConfig)
    return app


def worker_config(flags: boot.WorkerFlags) -> tuple[Config, dict[str, Any]]:
    """The settings' config under the config file and the flags (``boot.build_config``)."""
    app = _app()
    given_environment = app.options.given.get("environment")
    if flags.environment is None and given_environment is not None:
        flags = dataclasses.replace(flags, environment=given_environment)
    return boot.build_config(flags, app.config)


DJANGO_BOOT = boot.Boot(
    configure=worker_config,
    load=lambda flags: load_jobs(flags.app),
    requires_app=False,
)


@click.pass_context
def _web(ctx: click.Context, /, redis_url: str | None, **options: Any) -> None:
    from cogworker.cli_context import chosen_redis_url

    chosen = chosen_redis_url(redis_url) or _app().config.redis_url
    ctx.invoke(web_command, redis_url=chosen, **options)


django_web = click.Command(
    "web",
    callback=_web,
    params=web_command.params,
    help="Serve the dashboard (needs the web extra) on the settings' Redis until TERM / INT.",
)

group = click.Group(
    "cogworker",
    commands=[cli.run_command, cli.swarm_command, django_web],
    params=cli.main_group.params,
    callback=cli.main_group.callback,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="cogworker under Django: the worker flags win over settings.COGWORKER.",
)


def main(argv: list[str], prog_name: str) -> None:
    """Run the group with one-line errors (``cli.main``)."""
    cli.main(argv, group=group, prog_name=prog_name, boot=DJANGO_BOOT)
