"""Flask: ``Cogworker(app)``, or ``ext = Cogworker()`` then ``ext.init_app(app)`` in a factory.

Options come from ``app.config["COGWORKER"]``, a dict of ``cogworker.Config`` option names
(``{"redis_url": ..., "queues": ["mail", "default"]}``); an unknown or invalid one raises
ConfigError naming it, and so does any ``COGWORKER_*`` key of ``app.config`` (they are not
read, and an option must never be quietly ignored).

In a web process the extension builds the app's Config and Client (jobs run by
``cogworker.testing``'s inline mode or ``drain`` run in the app context too) and, unless
``set_default=False``, installs the config as the process default (``Job.perform_async``
then pushes to it). ``client()`` and ``config()`` give the current app's.

In a worker (``cogworker run -r yourapp``, where ``yourapp`` builds the app at import: for a
factory, a module holding ``app = create_app()``) the extension configures the worker's own
config, which the CLI built from its flags and ``-C`` file: ``app.config["COGWORKER"]`` is
applied over the defaults, except the options the command line set (they win); and every job
runs inside ``app.app_context()`` (``current_app``, ``g``, extensions bound to the app).
``set_default=False`` is refused there (ConfigError): the worker's config is the process
default its jobs run under, so the app it loads can't leave it alone.

``mount_dashboard(app, guard=...)`` serves the dashboard under a prefix: ``guard(request)``
runs in a request context of the app (``session``, ``g``, a login manager's ``current_user``
work) and returns True to let the request through, False to refuse it with 403, or a
Response (a redirect to the login page, say) to send instead; it must not read the body.
It needs the ``web`` extra. Without ``settings=`` its session secret is derived from
``app.secret_key`` when the app has one (set it before mounting), so every web process of the
site accepts the others' cookies; ``$COGWORKER_SESSION_SECRET`` wins over it, as under Django.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from flask import Flask, Request, current_app, request
from werkzeug.wrappers import Response

from cogworker.client import Client
from cogworker.config import OPTION_NAMES, Config, ConfigError, default_config, set_default_config
from cogworker.config.options import unknown_option

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from cogworker.middleware import JobInstance
    from cogworker.web import WebSettings
    from cogworker.web.application import Dashboard
    from cogworker.wire import Payload

__all__ = [
    "CONFIG_KEY",
    "Cogworker",
    "FlaskAppContext",
    "Guard",
    "app_options",
    "client",
    "config",
    "mount_dashboard",
]

CONFIG_KEY = "COGWORKER"
EXTENSION_KEY = "cogworker"
Guard = Callable[[Request], "bool | Response"]
"""Decides on a dashboard request: True lets it through, False answers 403, a Response is sent
instead (a redirect to the login page, say)."""

logger = logging.getLogger("cogworker")


@dataclass(frozen=True)
class _AppState:
    config: Config
    client: Client


class FlaskAppContext:
    """Server middleware: each job runs inside ``app.app_context()``. It is put first in the
    chain, so the middleware after it (status, history, the user's own) sees the app too."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def __call__(
        self,
        worker: JobInstance | None,
        job: Payload,
        queue: str,
        call_next: Callable[[], None],
    ) -> None:
        with self.app.app_context():
            call_next()


class Cogworker:
    """The Flask extension; see the module docstring."""

    def __init__(self, app: Flask | None = None, *, set_default: bool = True) -> None:
        self.set_default = set_default
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(f"cogworker is already set up on Flask app {app.name!r}")
        options = app_options(app)
        worker = default_config()
        if worker.server:
            if not self.set_default:
                raise ConfigError(
                    f"Cogworker(app, set_default=False) can't be honoured in a worker (Flask "
                    f"app {app.name!r}): the worker's jobs run under its own config, which "
                    "the extension sets from app.config"
                )
            settings = _configure_worker(worker, app, options)
        else:
            settings = _web_config(options)
            # the web process runs jobs only in cogworker.testing's modes: in the context too
            settings.server_middleware.prepend(FlaskAppContext, app)
            if self.set_default:
                set_default_config(settings)
        app.extensions[EXTENSION_KEY] = _AppState(settings, Client(settings))

    @property
    def config(self) -> Config:
        """The current app's config."""
        return config()

    @property
    def client(self) -> Client:
        """The current app's client."""
        return client()


def app_options(app: Flask) -> dict[str, Any]:
    """``app.config["COGWORKER"]`` checked: a mapping of Config option names (values are
    checked when the config takes them). Raises ConfigError naming what is wrong."""
    stray = sorted(k for k in app.config if isinstance(k, str) and k.startswith(CONFIG_KEY + "_"))
    if stray:
        raise ConfigError(
            f"app.config[{stray[0]!r}] is not read: put cogworker options in "
            f'app.config["{CONFIG_KEY}"] = {{"option_name": value}}'
        )
    given = app.config.get(CONFIG_KEY, {})
    if not isinstance(given, Mapping):
        raise ConfigError(
            f'app.config["{CONFIG_KEY}"] must be a dict of cogworker options, got {given!r}'
        )
    for name in given:
        if name not in OPTION_NAMES:
            raise ConfigError(f'app.config["{CONFIG_KEY}"]: {unknown_option(name)}')
    return dict(given)


@contextlib.contextmanager
def _blamed_on_app_config() -> Iterator[None]:
    """A ConfigError raised inside names ``app.config["COGWORKER"]`` as its source."""
    try:
        yield
    except ConfigError as error:
        raise ConfigError(f'app.config["{CONFIG_KEY}"]: {error}') from None


def _web_config(options: Mapping[str, Any]) -> Config:
    """A new config with ``options``. Without a redis_url of the app's, ``$REDIS_URL`` is read,
    and a bad one names itself rather than the app's settings."""
    if options.get("redis_url") is None:
        settings = Config()
        with _blamed_on_app_config():
            settings.update(options)
        return settings
    with _blamed_on_app_config():
        return Config(**options)  # redis_url first: $REDIS_URL is never read


def _configure_worker(worker: Config, app: Flask, options: Mapping[str, Any]) -> Config:
    """The worker's config with ``options`` applied under the command line's, and its jobs run
    in ``app``'s context. One Flask app per worker: a second is refused."""
    arguments = worker.server_middleware.arguments(FlaskAppContext)
    if arguments is not None and arguments[0] is not app:
        raise RuntimeError(
            f"this worker already runs its jobs in Flask app {arguments[0].name!r}: "
            f"a worker process serves one Flask app, not also {app.name!r}"
        )
    with _blamed_on_app_config():
        kept = sorted(worker.update_unpinned(options))  # the flags and -C file win
    worker.server_middleware.prepend(FlaskAppContext, app)
    applied = sorted(set(options) - set(kept))
    logger.info(
        'flask app %r: jobs run in its app context; app.config["%s"] set %s; '
        "the command line's value kept for %s",
        app.name,
        CONFIG_KEY,
        ", ".join(applied) or "nothing",
        ", ".join(kept) or "nothing",
    )
    return worker


def _state(app: Flask | None) -> _AppState:
    target = current_app if app is None else app  # current_app: raises outside an app context
    found = target.extensions.get(EXTENSION_KEY)
    if not isinstance(found, _AppState):
        raise RuntimeError(
            f"cogworker is not set up on Flask app {target.name!r}: call Cogworker(app) or "
            "ext.init_app(app) first"
        )
    return found


def config(app: Flask | None = None) -> Config:
    """The config of ``app`` (default: the current app)."""
    return _state(app).config


def client(app: Flask | None = None) -> Client:
    """The client of ``app`` (default: the current app)."""
    return _state(app).client


# -- the dashboard ---------------------------------------------------------------------------


def mount_dashboard(
    app: Flask,
    *,
    guard: Guard | None,
    prefix: str = "/cogworker",
    settings: WebSettings | None = None,
) -> Dashboard:
    """Serve the dashboard for ``app``'s config under ``prefix``, each request decided by
    ``guard`` (None: no guard, for a dashboard the host protects in front of Flask). The
    requests go past Flask's views and ``before_request`` hooks: the guard is the gate."""
    from a2wsgi import ASGIMiddleware

    from cogworker import web

    if not prefix.startswith("/") or prefix.endswith("/"):
        raise ValueError(f"prefix must start with '/' and not end with one, got {prefix!r}")
    if guard is not None and not callable(guard):
        raise TypeError(f"guard must be a callable (request) -> bool | Response, got {guard!r}")
    dashboard = web.app(config(app), settings if settings is not None else _app_settings(app))
    # a2wsgi types its own WSGI environ; it is the standard one
    served = cast("WSGIApplication", ASGIMiddleware(dashboard))  # type: ignore[arg-type]
    app.wsgi_app = _GuardedMount(  # type: ignore[method-assign]
        app, app.wsgi_app, served, prefix, guard
    )
    return dashboard


def _app_settings(app: Flask) -> WebSettings:
    """The dashboard's default settings: its session secret from ``app.secret_key`` unless
    ``$COGWORKER_SESSION_SECRET`` is set (a random one per process if neither is)."""
    from cogworker.web import WebSettings
    from cogworker.web.settings import SECRET_ENV

    secret = app.secret_key
    if os.environ.get(SECRET_ENV) or not secret:
        return WebSettings()
    key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    derived = hmac.new(key, b"cogworker.contrib.flask.dashboard session", hashlib.sha256)
    return WebSettings(session_secret=derived.hexdigest())


class _GuardedMount:
    """WSGI: requests under ``prefix`` go to ``mounted`` once ``guard`` allows them; the rest
    to ``host``."""

    def __init__(
        self,
        app: Flask,
        host: WSGIApplication,
        mounted: WSGIApplication,
        prefix: str,
        guard: Guard | None,
    ) -> None:
        self.app, self.host, self.mounted = app, host, mounted
        self.prefix, self.guard = prefix, guard

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            return self.host(environ, start_response)
        refusal = self._refusal(environ)
        if refusal is not None:
            return refusal(environ, start_response)
        inner = {
            **environ,
            "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + self.prefix,
            "PATH_INFO": path[len(self.prefix) :],
        }
        return self.mounted(inner, start_response)

    def _refusal(self, environ: WSGIEnvironment) -> Response | None:
        """None to let the request through, else the response to send."""
        if self.guard is None:
            return None
        with self.app.request_context(environ):
            decision = self.guard(request)
            if decision is True:
                return None
            if decision is False:
                return Response("Forbidden\n", 403, mimetype="text/plain")
            if isinstance(decision, Response):
                # as for a view's answer: after_request hooks run, the session is saved
                return self.app.process_response(decision)  # type: ignore[arg-type]
            raise TypeError(
                f"the dashboard guard {self.guard!r} must return True, False or a Response, "
                f"got {decision!r}"
            )
