"""Values as the JVM prints them, vectorised over Arrow arrays: what Spark's CSV writer puts in a field.

Spark formats a CSV field with Java: ``Double.toString``/``Float.toString`` for floating point (``1.0``,
``1.0E20``, ``9.9E-4``, ``NaN``, ``Infinity``), ``BigDecimal.toString`` for decimals (``0E-12`` below 1e-6),
and a ``java.time.format.DateTimeFormatter`` pattern for dates and timestamps (``yyyy-MM-dd'T'HH:mm:ss.SSSXXX``
by default, in the session time zone). Arrow's casts give the digits; this module lays them out the Java way.

One difference from the JVM, invisible to a reader: floating-point digits are the shortest that read back to the
same value (Java 17's ``Float.toString(1e16f)`` writes ``1.00000003E16`` and ``Double.MIN_VALUE`` ``4.9E-324``,
where this writes ``1.0E16`` and ``5.0E-324``; Java 19+ writes the shortest digits too).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError

# ---------------------------------------------------------------- floating point
# Arrow's cast to string writes the shortest digits that read back (as Java does), plainly for 1e-7 <= |x| < 1e21
# and as ``1.5e+20`` / ``2.5e-7`` outside. Java writes plainly only for 1e-3 <= |x| < 1e7, always with a
# fraction (``100.0``), and otherwise as ``D.DDDE[-]N`` with at least one digit after the point.
_SCI_NO_FRACTION = r"^(-?\d)e\+?(-?\d+)$"
_SCI_FRACTION = r"^(-?\d)\.(\d+)e\+?(-?\d+)$"
_PLAIN = r"^(?P<sign>-?)(?P<int>\d+)(?:\.(?P<frac>\d*))?$"
_INTEGER = r"^(-?\d+)$"


def java_floating_text(values: pa.Array) -> pa.Array:
    """``Double.toString`` (``Float.toString`` for float32) of every value; nulls stay null."""
    if pa.types.is_float16(values.type):
        values = values.cast(pa.float32())
    text = pc.cast(values, pa.string())
    # Plain range: Arrow's digits as they are, with ".0" when there is no fraction.
    out = pc.replace_substring_regex(text, _INTEGER, r"\1.0")
    magnitude = pc.abs(values)
    plain = pc.or_(pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7)), pc.equal(values, 0))
    if pc.all(plain).as_py() is not False:
        return out  # the common case: every value prints plainly (NaN and infinities are not in the plain range)
    finite = pc.is_finite(values)
    scientific = pc.and_(finite, pc.invert(plain))
    if pc.any(scientific).as_py():
        out = pc.if_else(scientific, _scientific(text), out)
    if not pc.all(finite).as_py():
        out = pc.if_else(pc.is_nan(values), "NaN", out)
        out = pc.if_else(pc.and_(pc.is_inf(values), pc.greater(values, 0)), "Infinity", out)
        out = pc.if_else(pc.and_(pc.is_inf(values), pc.less(values, 0)), "-Infinity", out)
    return out


def _scientific(text: pa.Array) -> pa.Array:
    """``D.DDDE[-]N`` from Arrow's shortest text of each value (only used where the value is finite and non-zero)."""
    # Arrow already wrote an exponent: only the layout changes.
    sci = pc.replace_substring_regex(text, _SCI_NO_FRACTION, r"\1.0E\2")
    sci = pc.replace_substring_regex(sci, _SCI_FRACTION, r"\1.\2E\3")
    # Arrow wrote it plainly (1e7 <= |x| < 1e21, or 1e-7 <= |x| < 1e-3): move the point.
    parts = pc.extract_regex(pc.if_else(pc.match_substring_regex(text, _PLAIN), text, "0"), _PLAIN)
    sign, whole, fraction = (parts.field(n) for n in ("sign", "int", "frac"))
    small = pc.equal(whole, "0")
    significant = pc.utf8_ltrim(fraction, "0")
    # |x| >= 1: digits are the whole part and the fraction; the exponent is the whole part's length - 1.
    big_digits = pc.utf8_rtrim(pc.binary_join_element_wise(whole, fraction, ""), "0")
    big_exponent = pc.cast(pc.subtract(pc.utf8_length(whole), 1), pa.string())
    # |x| < 1: digits follow the fraction's leading zeros; the exponent is -(zeros + 1).
    small_exponent = pc.cast(
        pc.negate(pc.add(pc.subtract(pc.utf8_length(fraction), pc.utf8_length(significant)), 1)), pa.string()
    )
    digits = pc.if_else(small, significant, big_digits)
    exponent = pc.if_else(small, small_exponent, big_exponent)
    head = pc.utf8_slice_codeunits(digits, 0, 1)
    tail = pc.utf8_slice_codeunits(digits, 1)
    tail = pc.if_else(pc.equal(tail, ""), "0", tail)
    moved = pc.binary_join_element_wise(sign, head, ".", tail, "E", exponent, "")
    return pc.if_else(pc.match_substring(text, "e"), sci, moved)


# ---------------------------------------------------------------- decimals
def java_decimal_text(values: pa.Array) -> pa.Array:
    """``BigDecimal.toString``: Arrow's decimal text follows the same rule (scientific below 1e-6)."""
    return pc.cast(values, pa.string())


# ---------------------------------------------------------------- date and time patterns
#: Spark's defaults for writing CSV (and JSON): CSVOptions.timestampFormatInWrite and friends.
DEFAULT_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
DEFAULT_TIMESTAMP_NTZ_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSS]"
DEFAULT_DATE_FORMAT = "yyyy-MM-dd"

_LETTERS = "yuMdDHhKkmsSaEXxZ"
_SUPPORTED = "y u M d D H h K k m s S a E X x Z"
_DATE_LETTERS = set("yuMdDE")
_OFFSET_LETTERS = set("XxZ")
#: 0001-01-01T00:00:00 and 10000-01-01T00:00:00 in seconds since the epoch.
_YEAR_1 = -62_135_596_800
_YEAR_10000 = 253_402_300_800
_UTC_NAMES = {"utc", "z", "gmt", "ut", "etc/utc", "etc/gmt", "etc/uct", "uct", "zulu", "etc/zulu", "universal"}
_JAVA_OFFSET_ZONE = re.compile(r"^(?:GMT|UTC|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def arrow_time_zone(zone: str) -> str:
    """A Java/Spark time zone id as pyarrow knows it: region ids as they are, ``UTC``/``Z``/``GMT`` as UTC,
    ``GMT+08:00``/``UTC+8``/``+0800`` as ``+08:00``. UsageError when pyarrow's time zone database lacks it."""
    text = zone.strip()
    if text.lower() in _UTC_NAMES:
        return "UTC"
    match = _JAVA_OFFSET_ZONE.match(text)
    if match:
        sign, hours, minutes, seconds = match.groups()
        if seconds and seconds != "00":
            raise UsageError(f"time zone {zone!r}: offsets with seconds are not supported; use a region such as "
                             "Europe/Paris or an offset such as +02:00")
        return f"{sign}{int(hours):02d}:{minutes or '00'}"
    try:
        pc.local_timestamp(pa.array([0], pa.timestamp("s", tz=text)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise UsageError(
            f"time zone {zone!r} is not in pyarrow's time zone database: use a region such as Europe/Paris, "
            "UTC, or an offset such as +02:00"
        ) from None
    return text


@dataclass(frozen=True)
class _Token:
    letter: str  # "" for literal text
    count: int = 0
    text: str = ""
    optional: bool = False


def _tokenize(pattern: str, *, option: str) -> list[_Token]:
    tokens: list[_Token] = []
    depth = 0
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            while end != -1 and end + 1 < len(pattern) and pattern[end + 1] == "'":
                end = pattern.find("'", end + 2)
            if end == -1:
                raise UsageError(f"csv option {option!r}: unterminated quote in pattern {pattern!r}")
            literal = pattern[i + 1:end].replace("''", "'") if end > i + 1 else "'"
            tokens.append(_Token("", text=literal, optional=depth > 0))
            i = end + 1
        elif c == "[":
            depth += 1
            i += 1
        elif c == "]":
            if depth == 0:
                raise UsageError(f"csv option {option!r}: ']' without '[' in pattern {pattern!r}")
            depth -= 1
            i += 1
        elif c.isascii() and c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            count = j - i
            if c not in _LETTERS:
                raise UsageError(
                    f"csv option {option!r}: pattern letter {c!r} in {pattern!r} is not supported by mpcommit's CSV "
                    f"writer; it supports {_SUPPORTED} (Java DateTimeFormatter meanings) and quoted 'text'"
                )
            _check_count(c, count, pattern=pattern, option=option)
            tokens.append(_Token(c, count, optional=depth > 0))
            i = j
        elif c in "#{}":
            raise UsageError(f"csv option {option!r}: {c!r} is reserved in date-time patterns ({pattern!r})")
        else:
            tokens.append(_Token("", text=c, optional=depth > 0))
            i += 1
    if depth:
        raise UsageError(f"csv option {option!r}: '[' without ']' in pattern {pattern!r}")
    return tokens


_MAX_COUNT = {"M": 4, "d": 2, "D": 3, "H": 2, "h": 2, "K": 2, "k": 2, "m": 2, "s": 2, "S": 9, "a": 1, "E": 4,
              "X": 5, "x": 5, "Z": 5}


def _check_count(letter: str, count: int, *, pattern: str, option: str) -> None:
    limit = _MAX_COUNT.get(letter)
    if limit is not None and count > limit:
        raise UsageError(f"csv option {option!r}: too many pattern letters {letter * count!r} in {pattern!r}")
    if letter == "Z" and count == 4:
        raise UsageError(f"csv option {option!r}: 'ZZZZ' (localized offset) is not supported; use XXX or xxx")


class DateTimePattern:
    """A Java ``DateTimeFormatter`` pattern compiled to Arrow compute calls.

    ``kind`` is ``timestamp`` (an instant, printed in a time zone), ``timestamp_ntz`` (wall-clock time, no zone)
    or ``date``. Letters that the kind cannot print are refused (an offset for a date, an hour in ``dateFormat``),
    unless they stand in an optional ``[...]`` section, which Java then leaves out.
    """

    def __init__(self, pattern: str, *, kind: str, option: str):
        self.pattern = pattern
        self.kind = kind
        tokens = _tokenize(pattern, option=option)
        kept: list[_Token] = []
        for t in tokens:
            unavailable = (t.letter in _OFFSET_LETTERS and kind != "timestamp") or (
                kind == "date" and t.letter and t.letter not in _DATE_LETTERS
            )
            if unavailable:
                if t.optional:
                    continue  # Java prints an optional section only when its fields exist
                what = "a time zone offset" if t.letter in _OFFSET_LETTERS else "a time of day"
                raise UsageError(
                    f"csv option {option!r}: pattern {pattern!r} asks for {what} ({t.letter * t.count!r}), which a "
                    f"{kind.replace('_', ' ')} does not have"
                )
            kept.append(t)
        if not any(t.letter for t in kept):
            raise UsageError(f"csv option {option!r}: pattern {pattern!r} prints no date or time field")
        self._tokens = kept
        self._iso_offset = pattern == DEFAULT_TIMESTAMP_FORMAT

    @property
    def alphabet(self) -> set[str] | None:
        """Every character the pattern can print, or None when that is open-ended (month and day names)."""
        chars = set("0123456789")
        for t in self._tokens:
            if not t.letter:
                chars.update(t.text)
            elif t.letter in _OFFSET_LETTERS:
                chars.update("+-:Z")
            elif t.letter in ("y", "u"):
                chars.add("+")
            elif t.letter in ("E", "a") or (t.letter == "M" and t.count >= 3):
                return None
        return chars

    def format(self, values: pa.Array, *, zone: str | None = None) -> pa.Array:
        """The text of each value (nulls stay null). Timestamps with a time zone are printed in ``zone`` (an Arrow
        time zone), else in their own; naive timestamps and dates as they are."""
        local, offset = _local(values, zone)
        ticks = local.cast(pa.int64())
        per_second = _PER_SECOND[local.type.unit]
        lowest, highest = pc.min(ticks).as_py(), pc.max(ticks).as_py()
        # Arrow's cast to string writes "YYYY-MM-DD HH:MM:SS[.fff...]" for years 1-9999, whose fields are then
        # cut out of it; Java signs years past 9999 ("+10000"), which only a zone east of UTC reaches.
        in_range = lowest is None or (lowest >= _YEAR_1 * per_second and highest < _YEAR_10000 * per_second)
        iso = pc.cast(local, pa.string()) if in_range else None
        fraction_digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[local.type.unit]
        seconds: list[pa.Array] = []  # computed when a field needs it

        def floored() -> pa.Array:
            if not seconds:
                seconds.append(pc.cast(pc.floor_temporal(local, unit="second"), pa.timestamp("s")))
            return seconds[0]

        parts: list[pa.Array | str] = []
        span: list[int] = []  # [start, end) of the ISO text being cut out as one piece

        def flush() -> None:
            if span:
                assert iso is not None
                parts.append(pc.utf8_slice_codeunits(iso, span[0], span[1]))
                span.clear()

        for t in self._tokens:
            piece = _iso_span(t, fraction_digits) if iso is not None else None
            if piece is None and span and not t.letter and t.text == _iso_char(span[1], fraction_digits):
                piece = (span[1], span[1] + 1)  # a separator that the ISO text has at that very place
            if piece is not None:
                if span and span[1] == piece[0]:
                    span[1] = piece[1]
                else:
                    flush()
                    span.extend(piece)
                continue
            flush()
            if t.letter == "S" and iso is not None:
                # More fraction digits than the values carry: Java pads with zeros.
                have = min(t.count, fraction_digits)
                if have:
                    parts.append(pc.utf8_slice_codeunits(iso, 20, 20 + have))
                parts.append("0" * (t.count - have))
                continue
            parts.append(self._field(t, local, floored, offset))
        flush()
        parts = [p for p in parts if not (isinstance(p, str) and p == "")]
        if all(isinstance(p, str) for p in parts):  # e.g. "XXX" alone in UTC: the same text for every value
            return pc.if_else(pc.is_valid(values), "".join(parts), pa.scalar(None, pa.string()))  # type: ignore[arg-type]
        if len(parts) == 1:
            return parts[0]  # type: ignore[return-value]
        return pc.binary_join_element_wise(*parts, "")

    def _field(self, t: _Token, local: pa.Array, floored: Callable[[], pa.Array],
               offset: pa.Array | int | None) -> pa.Array | str:
        c, n = t.letter, t.count
        if not c:
            return t.text
        if c in _OFFSET_LETTERS:
            assert offset is not None
            return _offset_text(offset, c, n, iso=self._iso_offset)
        if c == "S":
            return _fraction(local, n)
        name = _NAMES.get((c, n))
        if name is not None:
            return pc.strftime(floored(), format=name, locale="C")
        seconds = floored()
        if c in ("y", "u"):
            year = pc.year(seconds)
            if n == 2:
                return _pad(pc.subtract(year, pc.multiply(pc.divide(year, 100), 100)), 2)
            text = _pad(year, n)
            if n >= 4:
                text = pc.if_else(pc.greater(year, 10**n - 1), pc.binary_join_element_wise("+", text, ""), text)
            return text
        if c == "M":
            return _pad(pc.month(seconds), n)
        if c == "d":
            return _pad(pc.day(seconds), n)
        if c == "D":
            return _pad(pc.day_of_year(seconds), n)
        if c == "H":
            return _pad(pc.hour(seconds), n)
        if c == "k":
            hour = pc.hour(seconds)
            return _pad(pc.if_else(pc.equal(hour, 0), 24, hour), n)
        if c in ("h", "K"):
            hour12 = pc.subtract(pc.hour(seconds), pc.multiply(pc.divide(pc.hour(seconds), 12), 12))
            if c == "h":
                hour12 = pc.if_else(pc.equal(hour12, 0), 12, hour12)
            return _pad(hour12, n)
        if c == "m":
            return _pad(pc.minute(seconds), n)
        assert c == "s", c
        return _pad(pc.second(seconds), n)


#: Where each padded field stands in Arrow's text of a timestamp, "YYYY-MM-DD HH:MM:SS.fffffffff".
_ISO_SPANS = {("y", 4): (0, 4), ("u", 4): (0, 4), ("y", 2): (2, 4), ("u", 2): (2, 4), ("M", 2): (5, 7),
              ("d", 2): (8, 10), ("H", 2): (11, 13), ("m", 2): (14, 16), ("s", 2): (17, 19)}
_ISO_TEMPLATE = "0000-00-00 00:00:00."
#: Names, which strftime prints as Java does in Spark's default locale (en-US).
_NAMES = {("M", 3): "%b", ("M", 4): "%B", ("E", 1): "%a", ("E", 2): "%a", ("E", 3): "%a", ("E", 4): "%A",
          ("a", 1): "%p"}
_PER_SECOND = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}


def _iso_span(t: _Token, fraction_digits: int) -> tuple[int, int] | None:
    if t.letter == "S" and t.count <= fraction_digits:
        return (20, 20 + t.count)
    return _ISO_SPANS.get((t.letter, t.count))


def _iso_char(position: int, fraction_digits: int) -> str | None:
    """The separator at ``position`` of Arrow's text of a timestamp (None past its end or on a digit)."""
    if position == 19 and not fraction_digits:
        return None
    char = _ISO_TEMPLATE[position] if position < len(_ISO_TEMPLATE) else None
    return None if char == "0" else char


def _pad(values: pa.Array, width: int) -> pa.Array:
    text = pc.cast(values, pa.string())
    return pc.utf8_lpad(text, width=width, padding="0") if width > 1 else text


def _local(values: pa.Array, zone: str | None) -> tuple[pa.Array, pa.Array | int | None]:
    """Wall-clock time of each value (a naive timestamp) and, for instants, the zone's offset in seconds
    (0 for UTC, where every value has the same)."""
    t = values.type
    if pa.types.is_date(t):
        return values.cast(pa.timestamp("s")), None
    if t.tz is None:
        return values, None
    zone = zone if zone is not None else arrow_time_zone(t.tz)  # Spark may name the session's zone "GMT+08:00"
    if zone != t.tz:
        values = values.cast(pa.timestamp(t.unit, tz=zone))
    if values.type.tz == "UTC":
        return values.cast(pa.timestamp(t.unit)), 0
    local = pc.local_timestamp(values)
    per_second = _PER_SECOND[t.unit]
    delta = pc.subtract(local.cast(pa.int64()), values.cast(pa.int64()))
    return local, pc.divide(delta, per_second)


def _fraction(local: pa.Array, digits: int) -> pa.Array | str:
    """The first ``digits`` digits of the second's fraction, truncated as Java does."""
    unit = local.type.unit
    if unit == "s":
        return "0" * digits  # a null value stays null: the other parts of the text are null
    floored = pc.floor_temporal(local, unit="second")
    sub = pc.subtract(local.cast(pa.int64()), floored.cast(pa.int64()))
    scale = {"ms": 1_000_000, "us": 1_000, "ns": 1}[unit]
    nanos = pc.utf8_lpad(pc.cast(pc.multiply(sub, scale), pa.string()), width=9, padding="0")
    return pc.utf8_slice_codeunits(nanos, 0, digits)


def _offset_text(offset: pa.Array | int, letter: str, count: int, *, iso: bool) -> pa.Array | str:
    """A zone offset (seconds east of UTC, per value or one for all) as pattern letters X, x or Z print it."""
    if isinstance(offset, int):
        return _offset_text(pa.array([offset], pa.int64()), letter, count, iso=iso)[0].as_py()
    # Style: (minutes shown: "never"|"optional"|"always", separator, seconds shown: "never"|"optional", zero as "Z")
    if letter == "Z":
        style = {1: ("always", "", "never", False), 2: ("always", "", "never", False),
                 3: ("always", "", "never", False), 5: ("always", ":", "optional", True)}[count]
    else:
        style = {1: ("optional", "", "never"), 2: ("always", "", "never"), 3: ("always", ":", "never"),
                 4: ("always", "", "optional"), 5: ("always", ":", "optional")}[count] + (letter == "X",)
    minutes_shown, colon, seconds_shown, zero_is_z = style
    if iso:  # Spark's default pattern prints an offset's seconds when it has any (LMT before 1900)
        seconds_shown = "optional"
    negative = pc.less(offset, 0)
    total = pc.abs(offset)
    hours = pc.divide(total, 3600)
    minutes = pc.divide(pc.subtract(total, pc.multiply(hours, 3600)), 60)
    secs = pc.subtract(total, pc.add(pc.multiply(hours, 3600), pc.multiply(minutes, 60)))
    pieces: list[pa.Array | str] = [pc.if_else(negative, "-", "+"), _pad(hours, 2)]
    if minutes_shown == "always":
        pieces += [colon, _pad(minutes, 2)]
    elif minutes_shown == "optional":
        pieces.append(pc.if_else(pc.equal(minutes, 0), "", pc.binary_join_element_wise(colon, _pad(minutes, 2), "")))
    if seconds_shown == "optional":
        pieces.append(pc.if_else(pc.equal(secs, 0), "", pc.binary_join_element_wise(colon, _pad(secs, 2), "")))
    text = pc.binary_join_element_wise(*pieces, "")
    return pc.if_else(pc.equal(offset, 0), "Z", text) if zero_is_z else text

