"""What every persisted record shares: a kind and version, orjson encoding, and strict decoding.

A record that fails to decode raises a ManifestError subclass naming the record and the problem; nothing
downstream ever sees a bare dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from ...errors import ManifestCorruptError, ManifestVersionError

T = TypeVar("T")


def dumps(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload)


def loads_object(data: bytes, *, what: str, where: str) -> dict[str, Any]:
    """Decode JSON bytes into a dict, or raise ManifestCorruptError naming ``what`` and ``where``."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ManifestCorruptError(
            f"{what} at {where} is not valid JSON ({exc}); it may be truncated. It was not acted upon."
        ) from exc
    if not isinstance(value, dict):
        raise ManifestCorruptError(f"{what} at {where} is not a JSON object; it was not acted upon.")
    return value


def check_kind(obj: dict[str, Any], *, kind: str, versions: tuple[int, ...], what: str, where: str) -> int:
    """Check ``kind`` and ``version``: an unknown version is refused, never guessed at."""
    found_kind = obj.get("kind")
    if found_kind != kind:
        raise ManifestCorruptError(f"{what} at {where} has kind {found_kind!r}, expected {kind!r}")
    version = obj.get("version")
    if version not in versions:
        raise ManifestVersionError(
            f"{what} at {where} has format version {version!r}; this mpcommit reads versions {list(versions)}. "
            "Upgrade mpcommit to read it; nothing was completed or deleted for it."
        )
    assert isinstance(version, int)
    return version


class Reader:
    """Typed field access over one decoded object, with errors that name the record and field."""

    def __init__(self, obj: dict[str, Any], *, what: str, where: str):
        self.obj = obj
        self.what = what
        self.where = where

    def _fail(self, name: str, expected: str) -> ManifestCorruptError:
        got = self.obj.get(name, "<missing>")
        return ManifestCorruptError(
            f"{self.what} at {self.where}: field {name!r} must be {expected}, got {_short(got)}"
        )

    def str(self, name: str, *, optional: bool = False) -> Any:
        value = self.obj.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self._fail(name, "a string")
        return value

    def int(self, name: str, *, optional: bool = False, minimum: int = 0) -> Any:
        value = self.obj.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self._fail(name, f"an integer >= {minimum}")
        return value

    def list(self, name: str, item: Callable[[Any, str], T], *, optional: bool = False) -> tuple[T, ...]:
        value = self.obj.get(name)
        if value is None and optional:
            return ()
        if not isinstance(value, list):
            raise self._fail(name, "a list")
        return tuple(item(v, f"{self.where}: {name}[{i}]") for i, v in enumerate(value))

    def obj_of(self, value: Any, where: str) -> "Reader":
        if not isinstance(value, dict):
            raise ManifestCorruptError(f"{self.what} at {where} must be an object, got {_short(value)}")
        return Reader(value, what=self.what, where=where)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
