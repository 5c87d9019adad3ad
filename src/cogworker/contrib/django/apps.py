"""The Django app: reads ``settings.COGWORKER`` into the process's default config at start."""

from __future__ import annotations

from django.apps import AppConfig, apps  # type: ignore[import-untyped]
from django.conf import settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]

from cogworker.config import Config, ConfigError, set_default_config
from cogworker.contrib.django.conf import SETTING, DjangoOptions, read_settings


class CogworkerAppConfig(AppConfig):  # type: ignore[misc]
    name = "cogworker.contrib.django"
    label = "cogworker"
    verbose_name = "cogworker"

    config: Config
    options: DjangoOptions

    def ready(self) -> None:
        try:
            self.config, self.options = read_settings(
                getattr(settings, SETTING, None), settings.DATABASES
            )
        except ConfigError as error:
            # Django's own way to refuse settings; the message is one line naming the key
            raise ImproperlyConfigured(f"settings.{SETTING}: {error}") from None
        set_default_config(self.config)


def config() -> Config:
    """The config built from ``settings.COGWORKER`` when Django started."""
    app = apps.get_app_config(CogworkerAppConfig.label)
    assert isinstance(app, CogworkerAppConfig)
    return app.config
