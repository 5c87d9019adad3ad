"""URLs under the dashboard's mount, and stored strings carried through links and forms.

Every URL is ``<root path>/<relative path>``: the root path is the prefix the host mounted the
dashboard under (``scope["root_path"]``), so no link is root-absolute unless the dashboard is
mounted at the root. A queue name travels in a path segment percent-encoded (a name with a
space, ``+``, ``/`` or ``%`` works); as the browser resolves ``.`` and ``..`` segments itself,
forms also carry the exact name in a field, which wins over the path.

A stored string (a job's raw entry, a queue name, a process identity) goes through HTML, a
form and back byte for byte only if it is plain text: HTML parsing rewrites carriage returns
and NULs, form submission rewrites line breaks, and bytes that are not UTF-8 (held as lone
surrogates U+DC80..U+DCFF once read) have no form in HTML at all. Such a value travels as
``<name>_b64`` instead: base64 of its exact bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request

_NOT_FORM_SAFE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def exact_bytes(text: str) -> bytes:
    """The bytes a string read from Redis stands for (surrogate escapes back to bytes)."""
    return text.encode("utf-8", "surrogateescape")


def form_safe(text: str) -> bool:
    return _NOT_FORM_SAFE.search(text) is None


def carried(name: str, value: str) -> tuple[str, str]:
    """The (field, value) pair that carries ``value`` exactly: itself if it is plain text,
    else ``<name>_b64`` with its bytes in base64."""
    if form_safe(value):
        return name, value
    return f"{name}_b64", base64.b64encode(exact_bytes(value)).decode("ascii")


class BadParameter(ValueError):
    """A parameter that can't be read (one line, naming it)."""


def read_carried(params: Mapping[str, Any], name: str) -> str | None:
    """The exact string ``carried`` sent as ``name`` or ``<name>_b64``; None if neither."""
    encoded = params.get(f"{name}_b64")
    if isinstance(encoded, str) and encoded:
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise BadParameter(f"{name}_b64 is not base64") from None
        return data.decode("utf-8", "surrogateescape")
    value = params.get(name)
    return value if isinstance(value, str) else None


def digest(text: str) -> str:
    """A short fingerprint of a stored entry, for links that name it without carrying it."""
    return hashlib.sha256(exact_bytes(text)).hexdigest()[:32]


def segment(name: str) -> str:
    """``name`` as one path segment (a dot-only name, which browsers would resolve, as ``-``:
    the form's own field then names it)."""
    if name.strip(".") == "":
        return "-"
    return quote(exact_bytes(name), safe="")


def root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def url(request: Request, relative: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """``<root path>/<relative>`` plus an encoded query (pairs with empty values dropped)."""
    pairs = [(key, value) for key, value in params if value != ""]
    query = urlencode([(k, exact_bytes(v)) for k, v in pairs]) if pairs else ""
    return f"{root(request)}/{relative.lstrip('/')}" + (f"?{query}" if query else "")


def route_path(request: Request) -> str:
    """The request's path below the mount (``/`` for the mount itself)."""
    path = str(request.scope.get("path", ""))
    prefix = root(request)
    if prefix and path.startswith(prefix):
        path = path[len(prefix) :]
    return path or "/"
