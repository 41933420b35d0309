"""CSV text as Spark's DataFrameWriter writes it, so that ``spark.read.csv`` with the same options reads back
exactly the rows written. Vectorised with pyarrow.compute: a batch becomes one buffer without a Python loop
over its values.

Spark writes CSV with univocity's writer; measured on Spark 4.3 (``df.write.csv`` of tricky values under each
option), its rules are:

* A field is enclosed in the quote character (``"``) when it contains the separator, ``\\n``, ``\\r``, a
  character of ``lineSep``, or -- with ``escapeQuotes`` (the default) -- the quote character; when it starts
  with the quote character (even with ``escapeQuotes=false``); always with ``quoteAll``.
* Inside a quoted field a quote becomes escape + quote (``"q\\"x"`` with the default escape ``\\``; ``"q""x"``
  with ``escape='"'``), and an escape character becomes ``charToEscapeQuoteEscaping`` + escape (``\\\\``; by
  default that character is the escape itself, or none when escape and quote are the same). Unquoted fields
  are written as they are: ``a\\b`` stays ``a\\b``, and with ``escapeQuotes=false`` so does ``q"x``.
* A null is ``nullValue`` (default empty) and an empty string ``emptyValue`` (default ``""``), both laid out
  like any other field (``quoteAll`` quotes them), except that one already enclosed in quotes is written as is.

Whitespace at either end of a value (a character up to U+0020) is trimmed by default, as Spark's writer does
(``ignoreLeadingWhiteSpace`` and ``ignoreTrailingWhiteSpace`` are true for writing: ``" a "`` is written ``a``).
With either option false the whitespace is kept, and the field quoted where Spark leaves it bare, so that a
reader that trims unquoted fields keeps it too.

Where Spark's own output does not read back, this writes what does (each checked with Spark's reader):

* With ``lineSep="\\r\\n"`` Spark turns a ``\\n`` inside a value into ``\\r\\n`` (so ``a\\nb`` reads back as
  ``a\\r\\nb``); here a value's line breaks are written as they are.
* Spark's default ``emptyValue`` for writing is ``""`` even when ``quote`` is another character, which then
  reads back as the two characters ``""``; here it is two of the configured quote character.

What no CSV writer can fix, Spark's reader included: with the default options a null and an empty string both
read back as null (give ``nullValue``, e.g. ``\\N``, to tell them apart), and a string equal to ``nullValue``
reads back as null. Given a ``charToEscapeQuoteEscaping`` other than the escape character, Spark's reader
misreads values holding that character (with ``#``, ``a#,b`` reads back as null and swallows the next row) or
an escape character not before a quote; the bytes written are Spark's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: What univocity (Spark's CSV library) counts as whitespace: every character up to the space, but NUL.
_WHITESPACE = "".join(chr(c) for c in range(1, 0x21))
_WHITESPACE_CLASS = r"[\x{1}-\x{20}]"


def _re(text: str) -> str:
    """``text`` as an RE2 pattern matching it literally."""
    return "".join(f"\\x{{{ord(c):x}}}" for c in text)


@dataclass(frozen=True)
class CsvQuoting:
    """How one CSV field is laid out: when it is quoted, how it is escaped, what nulls and empties become."""

    sep: str = ","
    quote: str = '"'
    escape: str = "\\"
    #: ``charToEscapeQuoteEscaping``; None for none (Spark's ``\\u0000``).
    escape_escape: str | None = "\\"
    line_sep: str = "\n"
    escape_quotes: bool = True
    quote_all: bool = False
    trim_leading: bool = False
    trim_trailing: bool = False
    null_value: str = ""
    #: None: two quote characters.
    empty_value: str | None = None

    def __post_init__(self) -> None:
        specials = set("\n\r") | set(self.line_sep) | (set(self.sep) if len(self.sep) == 1 else set())
        if self.escape_quotes:
            specials.add(self.quote)
        alternatives = [f"[{_re(''.join(sorted(specials)))}]", f"^{_re(self.quote)}"]
        if len(self.sep) > 1:
            alternatives.append(_re(self.sep))
        if not self.trim_leading:
            alternatives.append(f"^{_WHITESPACE_CLASS}")
        if not self.trim_trailing:
            alternatives.append(f"{_WHITESPACE_CLASS}$")
        object.__setattr__(self, "_needs_quotes", "|".join(alternatives))
        # The same test on the UTF-8 bytes with numpy, when every character it looks for is ASCII (a UTF-8
        # byte below 0x80 is always a whole character): the bytes looked for anywhere, and tables for the first
        # and last byte of a value.
        if len(self.sep) == 1 and all(ord(c) < 0x80 for c in specials | {self.quote}):
            anywhere = tuple(sorted(ord(c) for c in specials))  # compared byte by byte: faster than a table lookup
            first = np.zeros(256, dtype=bool)
            first[ord(self.quote)] = True
            last = np.zeros(256, dtype=bool)
            if not self.trim_leading:
                first[1:0x21] = True
            if not self.trim_trailing:
                last[1:0x21] = True
            object.__setattr__(self, "_byte_tables", (anywhere, first, last))
        else:
            object.__setattr__(self, "_byte_tables", None)
        object.__setattr__(self, "_special_chars", specials | set(self.quote) | set(self.sep) | set(_WHITESPACE))
        object.__setattr__(self, "_null_text", self._special(self.null_value))
        empty = self.quote * 2 if self.empty_value is None else self._special(self.empty_value)
        object.__setattr__(self, "_empty_text", empty)

    # ------------------------------------------------------------ public
    def fields(self, text: pa.Array, *, alphabet: set[str] | None = None) -> pa.Array:
        """The CSV field of every value of a string array: quoted and escaped as needed, nulls and empty strings
        replaced. The result has no nulls. ``alphabet``: the characters the values can hold, when known (numbers,
        dates): values that cannot need quotes are not searched."""
        if alphabet is not None and not self.quote_all and alphabet.isdisjoint(self._special_chars):  # type: ignore[attr-defined]
            return pc.fill_null(text, self._null_text) if text.null_count else text  # type: ignore[attr-defined]
        text = self._trim(text)
        out = self._quoted(text)
        if _has_empty(text):
            out = pc.if_else(pc.equal(text, ""), self._empty_text, out)  # type: ignore[attr-defined]
        if text.null_count:
            out = pc.fill_null(out, self._null_text)  # type: ignore[attr-defined]
        return out

    @property
    def null_text(self) -> str:
        return self._null_text  # type: ignore[attr-defined,no-any-return]

    # ------------------------------------------------------------ pieces
    def _trim(self, text: pa.Array) -> pa.Array:
        if self.trim_leading:
            text = pc.utf8_ltrim(text, characters=_WHITESPACE)
        if self.trim_trailing:
            text = pc.utf8_rtrim(text, characters=_WHITESPACE)
        return text

    def _quoted(self, text: pa.Array) -> pa.Array:
        """Quote and escape the values that need it; the others as they are."""
        if self.quote_all:
            return self._enclose(self._escaped(text))
        needs, count = self._needs_quotes_mask(text)
        if count == 0:
            return text
        if count == len(text):
            return self._enclose(self._escaped(text))
        quoted = self._enclose(self._escaped(pc.filter(text, needs)))
        return pc.replace_with_mask(text, needs, quoted)

    def _needs_quotes_mask(self, text: pa.Array) -> tuple[pa.Array, int]:
        """True for each value that must be quoted (false for nulls), and how many are."""
        tables = self._byte_tables  # type: ignore[attr-defined]
        if tables is None or not pa.types.is_string(text.type):
            mask = pc.fill_null(pc.match_substring_regex(text, self._needs_quotes), False)  # type: ignore[attr-defined]
            return mask, pc.sum(mask).as_py() or 0
        anywhere, first, last = tables
        n = len(text)
        offsets, data = _string_buffers(text)
        start, end = int(offsets[0]), int(offsets[-1])
        needs = np.zeros(n, dtype=bool)
        values = data[start:end]
        special = values == anywhere[0]
        for byte in anywhere[1:]:
            special |= values == byte
        hits = np.flatnonzero(special)
        if len(hits):
            needs[np.searchsorted(offsets, hits + start, side="right") - 1] = True
        filled = offsets[1:] > offsets[:-1]
        if filled.any():
            heads, tails = offsets[:-1][filled], offsets[1:][filled] - 1
            needs[filled] |= first[data[heads]] | last[data[tails]]
        if text.null_count:
            needs &= np.asarray(text.is_valid())
        count = int(needs.sum())
        return (pa.array(needs) if 0 < count < n else needs), count  # type: ignore[return-value]

    def _enclose(self, text: pa.Array) -> pa.Array:
        return pc.binary_join_element_wise(self.quote, text, self.quote, "")

    def _escaped(self, text: pa.Array) -> pa.Array:
        """Escape a quoted field's quotes and escape characters, in one pass over each value (as univocity does:
        a character it inserts is never escaped again)."""
        q, e, ee = self.quote, self.escape, self.escape_escape
        if e == q or ee is None:
            return pc.replace_substring(text, q, e + q)
        if ee != q:
            # Escape characters first: the second pass inserts only escape characters, which it does not look for.
            return pc.replace_substring(pc.replace_substring(text, e, ee + e), q, e + q)
        # charToEscapeQuoteEscaping is the quote itself: the two replacements would touch each other's output.
        table = {q: e + q, e: ee + e}
        return pa.array(
            [None if v is None else "".join(table.get(c, c) for c in v) for v in text.to_pylist()], pa.string()
        )

    def _special(self, value: str) -> str:
        """How ``nullValue`` or ``emptyValue`` is written: like a field, unless already enclosed in quotes."""
        if len(value) >= 2 and value[0] == self.quote and value[-1] == self.quote:
            return value
        return str(self._quoted(self._trim(pa.array([value], pa.string())))[0].as_py())


def _string_buffers(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (this array's slice of them) and the UTF-8 bytes of a string array, as numpy views."""
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset:text.offset + len(text) + 1]
    data_buffer = text.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets, data


def _has_empty(text: pa.Array) -> bool:
    """Whether any (non-null) value is the empty string."""
    if not pa.types.is_string(text.type):
        return bool(pc.min(pc.binary_length(text)).as_py() == 0)
    offsets, _ = _string_buffers(text)
    empty = offsets[1:] == offsets[:-1]
    if text.null_count:
        empty &= np.asarray(text.is_valid())
    return bool(empty.any())


def join_rows(fields: list[pa.Array], *, sep: str, line_sep: str) -> pa.Buffer:
    """The bytes of the rows whose fields (non-null string arrays of one length) are given column by column."""
    last = pc.binary_join_element_wise(fields[-1], line_sep, "")
    rows = pc.binary_join_element_wise(*fields[:-1], last, sep) if len(fields) > 1 else last
    if isinstance(rows, pa.ChunkedArray):
        rows = rows.combine_chunks()
    return _values_buffer(rows)


def _values_buffer(strings: pa.Array) -> pa.Buffer:
    """The concatenated values of a string array without nulls: a slice of its data buffer, no copy."""
    if len(strings) == 0:
        return pa.py_buffer(b"")
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int64 if pa.types.is_large_string(strings.type) else np.int32)
    first, last = int(offsets[strings.offset]), int(offsets[strings.offset + len(strings)])
    data = strings.buffers()[2]
    return data.slice(first, last - first) if data is not None else pa.py_buffer(b"")
