"""What every file format has in common: the writer protocol, option parsing and stream compression.

A :class:`FileFormat` is a small, frozen, picklable value (it travels to workers inside the task closure).
It knows its file extension, refuses a schema it cannot hold (``check_schema``, called before any upload
starts) and opens a :class:`FormatWriter` over a binary file object -- in practice the streaming
:class:`~mpcommit.protocol.writer.MultipartWriter`. Format writers never close the file object they write to: the
caller owns it and decides whether it is finished (handed to the driver) or aborted.
"""

from __future__ import annotations

import abc
import difflib
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError

#: Stream compression of the text formats (CSV, JSON Lines, text): Spark's option value -> (pyarrow codec,
#: extension suffix). The suffixes are those Hadoop's codecs use, so Spark and Hive read the files back.
TEXT_COMPRESSION: dict[str, tuple[str | None, str]] = {
    "none": (None, ""),
    "gzip": ("gzip", ".gz"),
    "bzip2": ("bz2", ".bz2"),
    "zstd": ("zstd", ".zst"),
}
_COMPRESSION_ALIASES = {"uncompressed": "none", "gz": "gzip", "bz2": "bzip2", "zstandard": "zstd"}

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class UnknownOptionError(UsageError):
    """Options a format does not know: ``unknown`` as given, ``accepts`` the names it takes (``aliases`` besides),
    so that a caller that knows other options too (the data source's) can say which one was meant."""

    def __init__(self, message: str, *, unknown: tuple[str, ...], accepts: tuple[str, ...],
                 aliases: tuple[str, ...] = ()):
        super().__init__(message)
        self.unknown = unknown
        self.accepts = accepts
        self.aliases = aliases


def _fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(".", "")


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate a misspelt option name most likely meant (case, ``_``, ``-`` and ``.`` aside), or None when
    none is near (difflib's ratio under 0.75: ``partitionby_cols`` -> ``partitionBy``, ``bogus`` -> nothing)."""
    folded = {_fold(c): c for c in candidates}
    hit = difflib.get_close_matches(_fold(name), list(folded), n=1, cutoff=0.75)
    return folded[hit[0]] if hit else None


def did_you_mean(unknown: Iterable[str], candidates: Iterable[str]) -> str:
    """``"; did you mean 'header'?"`` for the unknown names that have a likely meaning, else ``""``."""
    names, pool = list(unknown), list(candidates)
    guesses = [(name, closest(name, pool)) for name in names]
    said = [repr(meant) if len(names) == 1 else f"{meant!r} for {name!r}" for name, meant in guesses if meant]
    return f"; did you mean {', '.join(said)}?" if said else ""


class Options:
    """Case-insensitive reader of a writer's options (Spark treats option names case-insensitively).

    Values may be strings (as PySpark's ``.option("header", "true")`` passes them), bools or numbers.
    Each format takes the names it knows; :meth:`finish` refuses whatever is left, so that a misspelt option
    fails loudly instead of being ignored.
    """

    def __init__(self, options: Mapping[str, Any] | None, *, what: str):
        self._what = what
        self._values: dict[str, tuple[str, Any]] = {}
        for name, value in (options or {}).items():
            if not isinstance(name, str):
                raise UsageError(f"{what} option names must be strings, got {name!r}")
            folded = name.lower()
            if folded in self._values:
                raise UsageError(f"{what} option {name!r} is given twice (option names ignore case)")
            self._values[folded] = (name, value)
        self._known: list[str] = []
        self._aliases: list[str] = []

    def _take(self, *names: str) -> tuple[str, Any] | None:
        """The first of ``names`` present (aliases); refuses two aliases given at once."""
        self._known.append(names[0])
        self._aliases.extend(names[1:])
        found = [(n, self._values.pop(n.lower())) for n in names if n.lower() in self._values]
        if len(found) > 1:
            raise UsageError(f"{self._what} options {found[0][1][0]!r} and {found[1][1][0]!r} mean the same; give one")
        return found[0][1] if found else None

    def text(self, *names: str, default: str) -> str:
        value = self.optional_text(*names)
        return default if value is None else value

    def optional_text(self, *names: str) -> str | None:
        """Like :meth:`text`, but None when the option is absent (so that an explicit "" can be told apart)."""
        got = self._take(*names)
        if got is None or got[1] is None:
            return None
        if not isinstance(got[1], str):
            raise UsageError(f"{self._what} option {got[0]!r} must be a string, got {got[1]!r}")
        return got[1]

    def flag(self, *names: str, default: bool) -> bool:
        got = self._take(*names)
        if got is None or got[1] is None:
            return default
        name, value = got
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise UsageError(f"{self._what} option {name!r} must be true or false, got {value!r}")

    def integer(self, *names: str, default: int, minimum: int = 0) -> int:
        got = self._take(*names)
        if got is None or got[1] is None:
            return default
        name, value = got
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise UsageError(f"{self._what} option {name!r} must be an integer >= {minimum}, got {value!r}")
        return number

    def compression(self, *, choices: Mapping[str, Any], default: str) -> str:
        raw = self.text("compression", "codec", default=default)
        value = raw.strip().lower()
        value = _COMPRESSION_ALIASES.get(value, value)
        if value not in choices:
            raise UsageError(
                f"{self._what} does not support compression {raw!r}: use one of {', '.join(sorted(choices))}"
            )
        return value

    def finish(self) -> None:
        """Refuse every option no one took."""
        if self._values:
            unknown = tuple(original for original, _ in self._values.values())
            raise UnknownOptionError(
                f"{self._what} does not know option(s) {', '.join(map(repr, unknown))}; it accepts: "
                f"{', '.join(self._known)}{did_you_mean(unknown, [*self._known, *self._aliases])}",
                unknown=unknown, accepts=tuple(self._known), aliases=tuple(self._aliases))


class FormatWriter(abc.ABC):
    """Writes record batches of one schema as one file into a binary file object it does not own."""

    rows: int = 0

    @abc.abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (whose schema is the one the writer was opened with)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Finish the file (footer, compressor trailer) into the file object; leaves the file object open."""

    @property
    def buffered_bytes(self) -> int:
        """Bytes held by this writer that have not reached the file object yet (for memory accounting)."""
        return 0


@dataclass(frozen=True)
class FileFormat(abc.ABC):
    """A configured file format: name, extension, what it can hold, and how to write it."""

    name: ClassVar[str]
    #: The Content-Type uploaded objects carry.
    content_type: ClassVar[str] = "application/octet-stream"

    @property
    @abc.abstractmethod
    def extension(self) -> str:
        """The file name's ending after ``part-TTTTT-JOBID.cNNN.``, e.g. ``snappy.parquet`` or ``csv.gz``."""

    @abc.abstractmethod
    def check_schema(self, schema: pa.Schema) -> None:
        """Raise UsageError, naming the column, when the format cannot hold a column of ``schema``."""

    @abc.abstractmethod
    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        """Start a file over ``sink``; the schema has been checked by :meth:`check_schema`."""


# ---------------------------------------------------------------- shared helpers
class NonClosingSink(io.RawIOBase):
    """A view of a binary file object whose ``close`` does not close it.

    pyarrow closes the stream under a ``CompressedOutputStream`` when it is closed; the multipart writer
    under it must stay open, because closing it is what hands the upload to the task commit.
    """

    def __init__(self, target: BinaryIO):
        super().__init__()
        self._target = target

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._target.write(data)
        return memoryview(data).nbytes

    def tell(self) -> int:
        return self._target.tell()

    def flush(self) -> None:
        pass


def open_text_stream(sink: BinaryIO, codec: str | None) -> Any:
    """The stream a text format writes to, plain or compressing. Closing it finishes the compressed stream
    but leaves ``sink`` open."""
    if codec is None:
        return NonClosingSink(sink)
    return pa.CompressedOutputStream(NonClosingSink(sink), codec)


_TIMESTAMP_TEXT = "%Y-%m-%dT%H:%M:%S"


def spark_timestamp_text(values: pa.Array) -> pa.Array:
    """Timestamps as Spark's CSV and JSON writers spell them by default -- ``yyyy-MM-dd'T'HH:mm:ss.SSS``, then
    ``Z`` for a timestamp with a time zone, in UTC -- except that sub-millisecond digits are kept (six of them):
    Spark's own default drops them, and its reader takes both. Spark writes a zoned timestamp in the session's
    time zone (``+01:00``...); this always writes UTC, the same instant."""
    t = values.type
    if t.unit == "s":
        values = values.cast(pa.timestamp("ms", tz=t.tz))
    if t.tz is not None:
        values = values.cast(pa.timestamp(values.type.unit, tz="UTC"))
    millis = values.cast(pa.timestamp("ms", tz=values.type.tz), safe=False)
    text = pc.strftime(millis, format=_TIMESTAMP_TEXT)  # %S prints the unit's fraction: here .SSS
    if values.type.unit != "ms":
        finer = pc.not_equal(millis.cast(values.type), values)
        text = pc.if_else(finer, pc.strftime(values, format=_TIMESTAMP_TEXT), text)
    return pc.binary_join_element_wise(text, "Z", "") if t.tz is not None else text


def refuse_types(schema: pa.Schema, *, fmt: str, refuse: Any, why: str) -> None:
    """Raise UsageError for the first column whose type matches ``refuse`` (a predicate on pa.DataType)."""
    for field in schema:
        if refuse(field.type):
            raise UsageError(
                f"{fmt} cannot hold column {field.name!r} of type {field.type}: {why}. "
                "Convert it first (e.g. to_json() or cast to string), or choose format 'parquet'. Nothing was written."
            )


def is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t) or (pa.types.is_dictionary(t) and pa.types.is_nested(t.value_type))


def is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or (
        hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t)
    )


def is_interval(t: pa.DataType) -> bool:
    return pa.types.is_duration(t) or pa.types.is_interval(t)


def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or (
        hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t)
    )
