"""Small-file compaction as multipart merges: many small data files become one, assembled in a multipart
upload whose parts are, wherever possible, server-side copies of the sources.

- :mod:`.planner` (pure): which files go together (per partition directory, Hive's small-file rule).
- :mod:`.parts` (pure): which bytes are copied server-side and which pass through the client.
- :mod:`.kinds`: what a data file is (format, compression) from its name.
- :mod:`.merge_plan`: per format, how a bin's sources become one file: segments, assembler, rows; with the
  small reads that planning needs (CSV headers, last bytes, Parquet footers).
- :mod:`.lines` (CSV and newline rules), :mod:`.codecs` (streamed compression), :mod:`.assemblers` (what a
  merge does to its fetched pieces, by transform), :mod:`.parquet_rewrite` (small Parquet files rewritten),
  :mod:`.parquet_concat` and :mod:`.thrift_compact` (row groups concatenated under a rewritten footer).
- :mod:`.executor`: runs one merge as an uncompleted multipart upload.
- :mod:`.standalone`: ``mpcommit compact`` -- compact an existing dataset as a job of its own.
- :mod:`.commit_merge`: merge small task outputs at job commit, before anything becomes visible.
"""

from .errors import (
    MergeError,
    MergePlanError,
    MixedSchemaError,
    SourceChangedError,
    UnreadableSourceError,
    UnsupportedFormatError,
)
from .planner import HIVE_SMALL_FILE_AVG, HIVE_TARGET_SIZE, MergePolicy

__all__ = [
    "HIVE_SMALL_FILE_AVG", "HIVE_TARGET_SIZE", "MergeError", "MergePlanError", "MergePolicy", "MixedSchemaError",
    "SourceChangedError", "UnreadableSourceError", "UnsupportedFormatError", "compact",
]


def __getattr__(name: str):  # the standalone job pulls in the whole committer: import it on first use
    if name == "compact":
        from .standalone import compact

        return compact
    raise AttributeError(name)
