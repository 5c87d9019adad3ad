"""What every tab's routes are built with: the config, the settings, Redis and the templates;
and ``Tab``, one entry of the header's navigation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis
from starlette.routing import BaseRoute

from cogworker.config import Config
from cogworker.web.rendering import Renderer
from cogworker.web.settings import WebSettings


@dataclass(frozen=True)
class Site:
    config: Config
    settings: WebSettings
    renderer: Renderer
    redis: Callable[[], redis.Redis]


@dataclass(frozen=True)
class Tab:
    """A built-in tab: its label in the header, its page (relative to the mount) and its
    routes (a host adds its own with ``Dashboard.register``)."""

    label: str
    path: str
    routes: Callable[[Site], Sequence[BaseRoute]]
