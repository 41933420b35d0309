"""Which files to merge into which: Hive's small-file rule, per partition directory, packed into bins.

Pure and deterministic: the same listing always gives the same plan (a re-run after a crash, or a
``--dry-run`` followed by the real run, plans the same bins). Files are never merged across partition
directories, nor across formats or compressions (``group``).

Hive's rule (``hive.merge.smallfiles.avgsize`` / ``hive.merge.size.per.task``): a partition is merged when
the average size of its files is below the small-file threshold; its files are then combined into outputs
of about the target size.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import UsageError
from ..sizing import MAX_OBJECT_SIZE
from ..units import parse_size

#: ``hive.merge.smallfiles.avgsize``: merge a partition when its average file is smaller than this.
HIVE_SMALL_FILE_AVG = 16_000_000
#: ``hive.merge.size.per.task``: the size merged files are packed up to.
HIVE_TARGET_SIZE = 256_000_000
#: A bin never takes more files than this: bounds the requests and the footer of one merged file.
DEFAULT_MAX_FILES_PER_BIN = 10_000


@dataclass(frozen=True)
class MergePolicy:
    """When and how far to merge small files (Hive's defaults: 16,000,000 and 256,000,000 bytes).

    ``small_file_avg``: a partition is merged when the average size of its files is below this.
    ``target_size``: merged files are packed up to this many bytes.
    """

    small_file_avg: int = HIVE_SMALL_FILE_AVG
    target_size: int = HIVE_TARGET_SIZE

    def __post_init__(self) -> None:
        for name in ("small_file_avg", "target_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UsageError(f"MergePolicy.{name} must be a positive number of bytes, got {value!r}")
        if self.target_size > MAX_OBJECT_SIZE:
            raise UsageError(f"MergePolicy.target_size {self.target_size} exceeds S3's 5 TiB object limit")

    @classmethod
    def parse(cls, *, small_file_avg: str | int | None = None, target_size: str | int | None = None) -> "MergePolicy":
        """From sizes as users write them (``16MB``, ``256MiB``, bytes); None keeps Hive's default."""
        return cls(
            small_file_avg=HIVE_SMALL_FILE_AVG if small_file_avg is None else parse_size(small_file_avg),
            target_size=HIVE_TARGET_SIZE if target_size is None else parse_size(target_size),
        )


@dataclass(frozen=True)
class Candidate:
    """One data file as the planner sees it.

    ``group`` keeps apart files that cannot be merged with each other (format and compression).
    ``mergeable`` is False for files that count towards a partition's average but cannot be a source
    (at commit time: files still in uncompleted multipart uploads, which cannot be copied from).
    """

    key: str
    size: int
    etag: str = ""
    partition: str = ""
    group: str = ""
    mergeable: bool = True


@dataclass(frozen=True)
class Bin:
    """Files of one partition and group to merge into one, in the order given (sorted by key)."""

    partition: str
    group: str
    sources: tuple[Candidate, ...]

    @property
    def size(self) -> int:
        return sum(c.size for c in self.sources)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.sources)


def should_merge(sizes: Iterable[int], policy: MergePolicy) -> bool:
    """Hive's test: more than one file and an average size below the small-file threshold."""
    values = list(sizes)
    return len(values) > 1 and sum(values) < policy.small_file_avg * len(values)


def pack(files: Iterable[Candidate], target_size: int, *, max_files: int = DEFAULT_MAX_FILES_PER_BIN) -> list[tuple[Candidate, ...]]:
    """Pack files into bins of at most ``target_size`` bytes (best fit, largest files first).

    Files of ``target_size`` or more are left out (they are big enough as they are); bins of a single
    file are dropped (nothing to merge). Each bin lists its files by key; bins are ordered by their first
    key. Ties are broken by key, so the result depends only on the set of files.
    """
    if max_files < 2:
        raise UsageError("a bin must be allowed at least 2 files")
    order = sorted((f for f in files if f.size < target_size), key=lambda f: (-f.size, f.key))
    contents: list[list[Candidate]] = []
    room: list[tuple[int, int]] = []  # (bytes still free, bin index), sorted: best fit = smallest room that fits
    for f in order:
        at = bisect.bisect_left(room, (f.size, -1))
        if at < len(room):
            free, index = room.pop(at)
        else:
            free, index = target_size, len(contents)
            contents.append([])
        contents[index].append(f)
        if len(contents[index]) < max_files:
            bisect.insort(room, (free - f.size, index))
    bins = [tuple(sorted(c, key=lambda f: f.key)) for c in contents if len(c) > 1]
    return sorted(bins, key=lambda b: b[0].key)


def plan_bins(
    files: Iterable[Candidate], policy: MergePolicy, *, max_files: int = DEFAULT_MAX_FILES_PER_BIN
) -> list[Bin]:
    """The bins to merge: per (partition, group) whose average file size is below the threshold.

    The average counts every file of the partition and group, mergeable or not (as Hive counts every
    output file); only mergeable files are packed.
    """
    groups: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    seen: set[str] = set()
    for f in files:
        if f.key in seen:
            raise UsageError(f"{f.key!r} is listed twice")
        if f.size < 0:
            raise UsageError(f"{f.key!r} has a negative size")
        seen.add(f.key)
        groups[(f.partition, f.group)].append(f)
    bins: list[Bin] = []
    for (partition, group) in sorted(groups):
        members = groups[(partition, group)]
        if not should_merge((f.size for f in members), policy):
            continue
        for sources in pack([f for f in members if f.mergeable], policy.target_size, max_files=max_files):
            bins.append(Bin(partition, group, sources))
    return bins


def explain_no_bins(files: Iterable[Candidate], policy: MergePolicy) -> str:
    """Why :func:`plan_bins` found nothing to merge in ``files``, in words for a person: the first rule that every
    partition failed -- too few files, an average file at or above the threshold, or files too large to pair
    within the target size."""
    groups: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for f in files:
        groups[(f.partition, f.group)].append(f)
    if not groups:
        return "no data files of a known format"
    several = {k: v for k, v in groups.items() if len(v) > 1}
    if not several:
        return "no partition holds more than one file of one format"
    small = {k: v for k, v in several.items() if should_merge((f.size for f in v), policy)}
    if not small:
        return f"no partition's average file is under the small-file threshold of {policy.small_file_avg:,} bytes"
    return (f"{len(small)} partition(s) average under the small-file threshold of {policy.small_file_avg:,} bytes, "
            f"but no two of their files fit together within the target size of {policy.target_size:,} bytes: raise "
            "the target size to merge them")
