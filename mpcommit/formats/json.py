"""JSON Lines, as Spark's ``json`` format writes it: one object per row, ``\\n`` after each.

pyarrow has no JSON writer, so rows go through orjson. Values follow Spark's JSON writer: null fields are left
out (``ignoreNullFields``, default true), timestamps ``2024-01-02T03:04:05.678Z`` (UTC; microseconds kept where
Spark would drop them; see :func:`~.base.spark_timestamp_text`), dates
``yyyy-mm-dd``, decimals exact numbers, binary base64, maps objects, and NaN/Infinity quoted strings (JSON
has no literal for them). Intervals have no JSON form Spark reads back and are refused.

One difference in text, not in value: doubles are orjson's shortest form (``-2.5e+20``, ``100.0``) where Spark
writes Java's (``-2.5E20``). Spark reads both as the same double; only a column that also holds NaN or an
infinity is inferred as strings (by Spark's own files too), and its numbers then read as differently spelled
strings. Matching Java's spelling would cost a Python call per value (measured: about 8 us, doubling the write).
"""

from __future__ import annotations

import base64
import decimal
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from .base import (
    TEXT_COMPRESSION,
    FileFormat,
    FormatWriter,
    Options,
    is_interval,
    open_text_stream,
    refuse_types,
    spark_timestamp_text,
)

_DUMPS_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class JsonFormat(FileFormat):
    """JSON Lines; options ``compression``, ``ignoreNullFields``, ``lineSep``."""

    name = "json"
    content_type = "application/x-ndjson"

    compression: str = "none"
    ignore_null_fields: bool = True
    line_sep: str = "\n"

    def __post_init__(self) -> None:
        if self.compression not in TEXT_COMPRESSION:
            raise UsageError(f"json does not support compression {self.compression!r}")
        if self.line_sep not in ("\n", "\r\n", "\r"):
            raise UsageError(f"json option 'lineSep' must be \\n, \\r\\n or \\r, got {self.line_sep!r}")

    @classmethod
    def from_options(cls, options: Options) -> "JsonFormat":
        return cls(
            compression=options.compression(choices=TEXT_COMPRESSION, default="none"),
            ignore_null_fields=options.flag("ignoreNullFields", default=True),
            line_sep=options.text("lineSep", default="\n"),
        )

    @property
    def extension(self) -> str:
        return f"json{TEXT_COMPRESSION[self.compression][1]}"

    def check_schema(self, schema: pa.Schema) -> None:
        refuse_types(schema, fmt="json", refuse=_has_interval, why="intervals have no JSON form that reads back")

    def open(self, sink: BinaryIO, schema: pa.Schema) -> FormatWriter:
        return _JsonFileWriter(sink, schema, self)


def _has_interval(t: pa.DataType) -> bool:
    if is_interval(t):
        return True
    return any(_has_interval(t.field(i).type) for i in range(t.num_fields)) if pa.types.is_nested(t) else False


class _JsonFileWriter(FormatWriter):
    def __init__(self, sink: BinaryIO, schema: pa.Schema, fmt: JsonFormat):
        self._stream = open_text_stream(sink, TEXT_COMPRESSION[fmt.compression][0])
        self._names = schema.names
        self._skip_nulls = fmt.ignore_null_fields
        self._eol = fmt.line_sep.encode()
        self._converters = [_converter(f.type, fmt.ignore_null_fields) for f in schema]
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        columns = [self._column(_spark_text(batch.column(i)), conv) for i, conv in enumerate(self._converters)]
        names, skip = self._names, self._skip_nulls
        eol, dumps = self._eol, orjson.dumps
        lines = []
        for values in zip(*columns):
            if skip:
                row = {n: v for n, v in zip(names, values) if v is not None}
            else:
                row = dict(zip(names, values))
            lines.append(dumps(row, default=_default, option=_DUMPS_OPTIONS))
        self._stream.write(eol.join(lines) + eol)
        self.rows += batch.num_rows

    @staticmethod
    def _column(array: pa.Array, conv: Convert | None) -> list[Any]:
        values = array.to_pylist()
        if conv is None:
            return values
        if pa.types.is_floating(array.type) and pc.all(pc.is_finite(array)).as_py() is not False:
            return values  # the common case: no NaN or Infinity, nothing to convert
        return [conv(v) for v in values]

    def close(self) -> None:
        self._stream.close()


def _spark_text(array: pa.Array) -> pa.Array:
    """Top-level timestamps as Spark spells them: Spark's JSON reader infers timestamps as strings (its
    ``inferTimestamp`` is off by default), which should then be the strings it would have written itself."""
    return spark_timestamp_text(array) if pa.types.is_timestamp(array.type) else array


def _default(value: Any) -> Any:
    """What orjson cannot serialize by itself."""
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(str(value))  # exact, as a JSON number (Spark writes decimals unquoted)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")  # Spark writes binary as base64
    if hasattr(value, "isoformat"):
        return value.isoformat()  # pandas.Timestamp and other datetime-likes
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def _float(value: Any) -> Any:
    if value is None or math.isfinite(value):
        return value
    # Jackson (Spark's JSON writer) writes these as quoted strings.
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _converter(t: pa.DataType, skip_nulls: bool) -> Convert | None:
    """A function fixing one value of type ``t`` for orjson, or None when ``to_pylist`` already fits."""
    if pa.types.is_floating(t):
        return _float
    if pa.types.is_map(t):
        key = _converter(t.key_type, skip_nulls)
        item = _converter(t.item_type, skip_nulls)

        def convert_map(v: Any) -> Any:
            if v is None:
                return None
            return {(key(k) if key else k): (item(x) if item else x) for k, x in v}

        return convert_map
    if pa.types.is_struct(t):
        fields = [(t.field(i).name, _converter(t.field(i).type, skip_nulls)) for i in range(t.num_fields)]
        if not skip_nulls and all(c is None for _, c in fields):
            return None

        def convert_struct(v: Any) -> Any:
            if v is None:
                return None
            out = {}
            for name, conv in fields:
                x = v.get(name)
                if conv is not None:
                    x = conv(x)
                if x is not None or not skip_nulls:
                    out[name] = x
            return out

        return convert_struct
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or (
        hasattr(pa.types, "is_list_view") and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t))
    ):
        item = _converter(t.value_type, skip_nulls)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if pa.types.is_dictionary(t):
        return _converter(t.value_type, skip_nulls)
    return None
