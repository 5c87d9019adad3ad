"""``cogworker web``: serve the dashboard with uvicorn.

    cogworker web --port 9292 --host 127.0.0.1 [--redis-url URL] [--root-path /jobs]

Behind a reverse proxy that serves the dashboard under a prefix and strips it before
forwarding, ``--root-path`` names that prefix so the pages link through it.

This module imports nothing from the ``web`` extra until the command runs, so the CLI loads
without it and the command can say in one line what is missing.
"""

from __future__ import annotations

import signal
from typing import NoReturn

import click

from cogworker import connection, logs
from cogworker.cli_context import chosen_redis_url
from cogworker.config import Config, ConfigError


@click.command("web")
@click.option("--port", type=click.IntRange(0, 65535), default=9292, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--redis-url",
    help="Redis URL (default: the one before the command name, $REDIS_URL or localhost).",
)
@click.option(
    "--root-path",
    default="",
    help="The prefix a reverse proxy serves the dashboard under and strips (e.g. /jobs): "
    "links carry it.",
)
@click.option(
    "--proxy-headers/--no-proxy-headers",
    default=False,
    show_default=True,
    help="Trust X-Forwarded-Proto/For from --forwarded-allow-ips (behind a TLS proxy).",
)
@click.option(
    "--forwarded-allow-ips",
    default="127.0.0.1",
    show_default=True,
    help="Proxies whose forwarded headers are trusted.",
)
def web_command(
    port: int,
    host: str,
    redis_url: str | None,
    root_path: str,
    proxy_headers: bool,
    forwarded_allow_ips: str,
) -> None:
    """Serve the dashboard (needs the web extra) until TERM / INT."""
    from cogworker.web import app, missing_extra

    problem = missing_extra()
    if problem is not None:
        raise click.ClickException(problem)
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise click.BadParameter("must start with / and not end with one", param_hint="--root-path")
    import uvicorn

    try:
        config = Config(redis_url=chosen_redis_url(redis_url))
        logs.setup(config.log_level)
        dashboard = app(config)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    shown = f" (reached through a proxy at {root_path}/)" if root_path else ""
    click.echo(
        f"cogworker web: serving http://{host}:{port}/{shown} "
        f"on {connection.redacted_url(config.redis_url)} (TERM or Ctrl-C stops it)"
    )
    # uvicorn shuts down gracefully on TERM / INT, then re-sends the signal to the handler that
    # was there before it: this one, so the command ends normally once the server is down
    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), _stopped)
    uvicorn.run(
        dashboard,
        host=host,
        port=port,
        root_path=root_path,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
        access_log=False,
        log_level="warning",
    )
    _stopped()


def _stopped(*_: object) -> NoReturn:
    click.echo("cogworker web: stopped")
    raise SystemExit(0)
