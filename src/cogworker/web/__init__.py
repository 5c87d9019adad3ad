"""The dashboard: an ASGI app made by one call, mountable under any prefix.

    from cogworker.web import WebSettings, app
    dashboard = app(config)                                   # serve it: uvicorn, hypercorn...
    fastapi_app.mount("/cogworker", dashboard)                # or mount it in a host app
    dashboard.use(MyAuthMiddleware, realm="ops")              # an auth layer around every route
    dashboard.register(MyExtension(), name="reports", tab="Reports", index="reports")

It needs the ``web`` extra (``pip install 'cogworker[web]'``); importing this package does
not, so ``cogworker web`` can say so in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cogworker.config import Config
from cogworker.web.settings import WebSettings

if TYPE_CHECKING:
    from cogworker.web.application import Dashboard

REQUIRED_MODULES = ("starlette", "jinja2", "python_multipart", "uvicorn")


def missing_extra() -> str | None:
    """Why the dashboard can't run here (a module of the ``web`` extra is missing), or None."""
    import importlib

    for name in REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return (
                f"the dashboard needs the web extra (module {name!r} is missing): "
                "pip install 'cogworker[web]'"
            )
    return None


def app(config: Config, settings: WebSettings | None = None) -> Dashboard:
    """The dashboard for ``config``'s Redis; add tabs and routes with ``register``
    (``cogworker.web.extensions``)."""
    problem = missing_extra()
    if problem is not None:
        raise ImportError(problem)
    if not isinstance(config, Config):
        raise TypeError(f"app() needs a cogworker.Config (got {type(config).__name__})")
    from cogworker.web.application import Dashboard

    chosen = WebSettings() if settings is None else settings
    return Dashboard(config, chosen)


__all__ = ["WebSettings", "app", "missing_extra"]
