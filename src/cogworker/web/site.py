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
    """A tab: its label in the header, its page (relative to the mount) and its routes.
    Adding a tab is one more entry in the list given to ``cogworker.web.app``."""

    label: str
    path: str
    routes: Callable[[Site], Sequence[BaseRoute]]
