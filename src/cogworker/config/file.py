"""The YAML config file (``cogworker run -C config.yml``).

Keys are ``Config`` option names, plain (``concurrency: 5``) or in the Ruby gem's form with a
leading colon (``:concurrency: 5``), plus ``periodic`` (the cron entries). A key that is not
one of them, or one written twice (in either form), is an error naming it, and the closest
option name when there is one. Before parsing, ``${VAR}`` and ``${VAR:-default}`` are
replaced from the environment (the Ruby file's ERB step serves the same purpose)::

    :concurrency: ${CONCURRENCY:-5}
    queues:
      - critical,2
      - default
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cogworker.config import OPTION_NAMES, Config, ConfigError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

# keys read by later components (cron entries...), not Config options
EXTRA_KEYS = frozenset({"periodic"})
KNOWN_KEYS = OPTION_NAMES | EXTRA_KEYS


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


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key, line)
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, except that a key written twice in one mapping is an error (YAML
    itself would keep the last value without a word). Merge keys (``<<``) may be
    overridden: that is what they are for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            except TypeError:  # unhashable: the base class reports it
                pass
        return super().construct_mapping(node, deep)


def _option_name(file: Path, raw_key: Any) -> str:
    """The option a top-level key names; an unknown one is an error naming the nearest."""
    key = str(raw_key).lstrip(":")
    if key in KNOWN_KEYS:
        return key
    nearest = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
    hint = f" (did you mean {nearest[0]!r}?)" if nearest else " (not a cogworker option)"
    raise ConfigError(f"config file {file}: unknown key {raw_key!r}{hint}")


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the file into ``{option: value}``; an unknown or repeated key is an error."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"can't read config file {file}: {error.strerror}") from None
    try:
        data = yaml.load(expand_environment(text), Loader=_StrictLoader)  # a SafeLoader
    except _DuplicateKey as duplicate:
        raise ConfigError(
            f"config file {file}: key {duplicate.key!r} given twice (line {duplicate.line})"
        ) from None
    except yaml.YAMLError as error:
        problem = str(error).replace("\n", " ")
        raise ConfigError(f"config file {file} is not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {file} must hold a mapping of options, not a list or value")
    options: dict[str, Any] = {}
    spelled: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = _option_name(file, raw_key)
        if key in options:
            raise ConfigError(
                f"config file {file}: {spelled[key]!r} and {raw_key!r} both set {key}"
            )
        options[key], spelled[key] = _from_ruby(key, value), raw_key
    return options


def apply(config: Config, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load ``path`` into ``config`` and pin the options it sets (they are the operator's:
    ``Config.pin``); returns the keys that are not Config options."""
    options = load(path)
    extras = {key: options.pop(key) for key in list(options) if key in EXTRA_KEYS}
    try:
        config.update(options)
    except ConfigError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    config.pin(options)
    return extras
