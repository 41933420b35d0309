"""What can go wrong while merging files. Every one of them skips the bin concerned and leaves its sources
as they are: a merge never loses data, at worst it does not happen."""

from __future__ import annotations

from ..errors import MpcommitError


class MergeError(MpcommitError):
    """A bin could not be merged; its sources are left as they are."""


class MergePlanError(MergeError):
    """A merge that cannot be made into a legal multipart upload (too large, too many parts)."""


class SourceChangedError(MergeError):
    """A source was changed or deleted after the merge was planned (its ETag no longer matches)."""


class UnsupportedFormatError(MergeError):
    """Files of a format or compression that cannot be merged."""


class UnreadableSourceError(MergeError):
    """A source that is not what its name says (not Parquet, a corrupt gzip member, no header line...)."""


class MixedSchemaError(MergeError):
    """Sources whose schemas (Parquet) or header lines (CSV) differ."""
