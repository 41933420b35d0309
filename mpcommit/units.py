"""Sizes and durations as people write and read them: ``16MB``, ``16MiB``, ``7d`` in; ``1.5m``, ``1.2 MB`` out.
Pure; used by the CLI's options, the compaction policy and the messages that name an age or a size."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from .errors import UsageError


def parse_size(text: str | int) -> int:
    """``16MB`` (decimal), ``16MiB`` (binary), or a byte count. Raises UsageError naming the problem."""
    if isinstance(text, int):
        if text < 0:
            raise UsageError(f"size {text} is negative")
        return text
    units = {
        "": 1, "b": 1,
        "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
        "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
        "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
    }
    raw = text.strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in units or value < 0 or num == "":
        raise UsageError(f"{text!r} is not a size: write 16MB (decimal), 16MiB (binary) or a number of bytes")
    return int(value * units[unit])


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``24h``, ``7d`` → seconds. Raises UsageError naming the problem."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    raw = text.strip().lower()
    if len(raw) >= 2 and raw[-1] in units:
        try:
            value = float(raw[:-1])
        except ValueError:
            value = -1.0
        if value >= 0:
            return value * units[raw[-1]]
    raise UsageError(f"{text!r} is not a duration: write 90s, 30m, 24h or 7d")


def parse_wait(text: str) -> float:
    """A duration as :func:`parse_duration`, or ``forever`` (``math.inf``): how long to wait for a live job."""
    if text.strip().lower() in ("forever", "inf", "none"):
        return math.inf
    try:
        return parse_duration(text)
    except UsageError:
        raise UsageError(f"{text!r} is not a wait: write 90s, 30m, 24h, 7d or forever") from None


def short_duration(seconds: float) -> str:
    """``90`` -> ``"1.5m"``: a duration in its largest unit, for messages about a job's idle time."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def human_bytes(n: int | None) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as S3's console shows sizes); None -> ``"?"``."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if value < 1000 or unit == "PB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def utc(value: datetime) -> datetime:
    """A store's timestamp as an aware UTC datetime (botocore gives aware ones; some servers' are naive: UTC)."""
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def epoch_ms(value: datetime) -> int:
    """Milliseconds since the epoch of a store's timestamp."""
    return int(utc(value).timestamp() * 1000)
