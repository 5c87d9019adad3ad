"""The YAML config file (``cogworker run -C config.yml``).

Keys are ``Config`` option names, plain (``concurrency: 5``) or in the Ruby gem's form with a
leading colon (``:concurrency: 5``). Before parsing, ``${VAR}`` and ``${VAR:-default}`` are
replaced from the environment (the Ruby file's ERB step serves the same purpose)::

    :concurrency: ${CONCURRENCY:-5}
    queues:
      - critical,2
      - default
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cogworker.config import OPTION_NAMES, Config, ConfigError

logger = logging.getLogger("cogworker")

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

# keys read by later components (cron entries...), not Config options
EXTRA_KEYS = frozenset({"periodic"})


def expand_environment(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace ``${VAR}`` / ``${VAR:-default}``; an unset variable without default is an error."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(f"config file uses ${{{name}}}, which is not set")
            return default
        return value

    return _VARIABLE.sub(replace, text)


def _from_ruby(key: str, value: Any) -> Any:
    """Values as a Ruby config file writes them: ``:basic`` symbols, numeric strings."""
    if isinstance(value, str) and value.startswith(":") and key in ("fetch", "log_level"):
        return value[1:]
    if key == "concurrency" and isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the file into ``{option: value}``; unknown keys are logged and left out."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"can't read config file {file}: {error.strerror}") from None
    try:
        data = yaml.safe_load(expand_environment(text))
    except yaml.YAMLError as error:
        problem = str(error).replace("\n", " ")
        raise ConfigError(f"config file {file} is not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {file} must hold a mapping of options, not a list or value")
    options: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).lstrip(":")
        if key in OPTION_NAMES or key in EXTRA_KEYS:
            options[key] = _from_ruby(key, value)
        else:
            logger.warning("config file %s: unknown key %r ignored", file, raw_key)
    return options


def apply(config: Config, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load ``path`` into ``config``; returns the keys that are not Config options."""
    options = load(path)
    extras = {key: options.pop(key) for key in list(options) if key in EXTRA_KEYS}
    try:
        config.update(options)
    except ConfigError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    return extras
