"""Where things live under a destination: data keys, the job's hidden prefix, Hive partition paths.

Pure functions over strings; no I/O. Every data key carries its job id, so that a listing of pending
uploads can be attributed to one job exactly, never by prefix alone.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote

from ..errors import InvalidUriError, UsageError

SCHEMES = ("s3://", "s3a://", "s3n://")
HIDDEN_ROOT = "_temporary/mpcommit/"
SUCCESS_NAME = "_SUCCESS"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

#: S3's rule for bucket names: 3-63 characters of lowercase letters, digits, dots and hyphens, beginning and
#: ending with a letter or digit.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_JOB_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_JOB_ID_PART = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# part-TTTTT-JOBID.cNNN.EXT
_DATA_NAME_RE = re.compile(rf"^part-(\d{{5,}})-({_JOB_ID_PART})\.c(\d{{3,}})\.(.+)$")
_EXT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")

# Hive's FileUtils.escapePathName / Spark's ExternalCatalogUtils: control characters and these.
_HIVE_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^') | {chr(c) for c in range(0x01, 0x20)}


@dataclass(frozen=True, order=True)
class Destination:
    """An S3 bucket and a key prefix (no leading or trailing slash; empty for the bucket's root)."""

    bucket: str
    prefix: str

    @property
    def root(self) -> str:
        """The key prefix every object of the destination starts with ("" or "prefix/")."""
        return f"{self.prefix}/" if self.prefix else ""

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def hidden_root(self) -> str:
        """Where every mpcommit job of this destination keeps its records."""
        return f"{self.root}{HIDDEN_ROOT}"

    @property
    def success_key(self) -> str:
        return f"{self.root}{SUCCESS_NAME}"

    def contains(self, key: str) -> bool:
        """True when ``key`` is a clean key strictly below this destination (no ``.``/``..`` or empty segments)."""
        if not key.startswith(self.root) or key == self.root:
            return False
        rel = key[len(self.root):]
        return _clean_relative(rel)

    def __str__(self) -> str:
        return self.uri


def parse_uri(uri: str) -> Destination:
    """Parse ``s3://bucket/prefix`` (also ``s3a://``, ``s3n://``) into a :class:`Destination`."""
    if not isinstance(uri, str):
        raise InvalidUriError(f"expected an S3 URI string such as s3://bucket/table, got {type(uri).__name__}")
    scheme = next((s for s in SCHEMES if uri.lower().startswith(s)), None)
    if scheme is None:
        raise InvalidUriError(
            f"{uri!r} is not an S3 URI: use s3://bucket/prefix (s3a:// and s3n:// are accepted too)"
        )
    rest = uri[len(scheme):]
    bucket, _, prefix = rest.partition("/")
    if not bucket or not _BUCKET_RE.match(bucket):
        raise InvalidUriError(
            f"{uri!r} has no valid bucket name: S3 bucket names are 3-63 characters of lowercase letters, digits, "
            "dots and hyphens, beginning and ending with a letter or digit"
        )
    prefix = prefix.strip("/")
    if prefix and not _clean_relative(prefix):
        raise InvalidUriError(f"{uri!r} has an empty, '.' or '..' path segment; give a plain prefix")
    if prefix == "_temporary" or prefix.startswith("_temporary/") or "/_temporary/" in f"/{prefix}/":
        raise InvalidUriError(f"{uri!r} points into a hidden _temporary folder; give the table's own prefix")
    return Destination(bucket, prefix)


def _clean_relative(rel: str) -> bool:
    if not rel or rel.startswith("/"):
        return False
    parts = rel.split("/")
    # A trailing slash (a "directory marker") is the only empty segment allowed.
    if parts[-1] == "":
        parts = parts[:-1]
    return all(p not in ("", ".", "..") for p in parts)


# ---------------------------------------------------------------- job ids
def new_job_id() -> str:
    """A random job id. Never derived from the clock: Spark's same-second ids collided (SPARK-33402)."""
    return str(uuid.uuid4())


def is_job_id(value: str) -> bool:
    return bool(_JOB_ID_RE.match(value))


def check_job_id(value: str) -> str:
    if not isinstance(value, str) or not is_job_id(value):
        raise UsageError(f"{value!r} is not an mpcommit job id (a UUID such as 123e4567-e89b-42d3-a456-426614174000)")
    return value


# ---------------------------------------------------------------- the job's hidden prefix
@dataclass(frozen=True)
class JobPaths:
    """The keys of one job's records under ``PREFIX/_temporary/mpcommit/JOBID/``."""

    destination: Destination
    job_id: str

    @property
    def root(self) -> str:
        return f"{self.destination.hidden_root}{self.job_id}/"

    @property
    def descriptor(self) -> str:
        return f"{self.root}job.json"

    @property
    def journal(self) -> str:
        return f"{self.root}journal.json"

    @property
    def tasks(self) -> str:
        return f"{self.root}tasks/"

    @property
    def staged(self) -> str:
        return f"{self.root}staged/"

    def task_manifest(self, task_id: int, attempt: int, nonce: str) -> str:
        return f"{self.tasks}task-{task_id:05d}-a{attempt}-{nonce}.json"

    def staged_key(self, task_id: int, attempt: int, nonce: str, relative_key: str) -> str:
        """Where a small file of one task attempt waits for a commit-time merge."""
        return f"{self.staged}task-{task_id:05d}-a{attempt}-{nonce}/{relative_key}"


    @property
    def heartbeat(self) -> str:
        """Rewritten every few seconds while a process works for the job (driver or recoverer)."""
        return f"{self.root}alive.json"

    @property
    def finishing(self) -> str:
        """Held by the one process that carries out the job's journal for ``recover`` (see commit.turn)."""
        return f"{self.root}finishing.json"


# ---------------------------------------------------------------- the table a destination belongs to
#: Where a table keeps its commit order (protocol/order.py), below the table's root.
ORDER_ROOT = "_mpcommit/order/"


@dataclass(frozen=True, order=True)
class Table:
    """The table a destination belongs to: the destination without its trailing Hive partition folders
    (``s3://b/t/dt=1`` writes into table ``s3://b/t``), so that a job writing one partition's URI and a job
    writing the whole table take their places in one commit order."""

    bucket: str
    prefix: str

    @property
    def root(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    @property
    def uri(self) -> str:
        return Destination(self.bucket, self.prefix).uri

    @property
    def order_root(self) -> str:
        return f"{self.root}{ORDER_ROOT}"

    def path_of(self, destination: Destination, rel: str = "") -> str:
        """Where ``rel`` (a path relative to ``destination``, "" for all of it) lies inside this table."""
        inside = destination.prefix[len(self.prefix):].strip("/") if destination.prefix != self.prefix else ""
        return "/".join(p for p in (inside, rel) if p)

    def destination(self, path: str) -> Destination:
        """The destination at ``path`` inside this table."""
        return Destination(self.bucket, "/".join(p for p in (self.prefix, path) if p))


def table_of(destination: Destination) -> Table:
    """The table of a destination: its trailing ``col=value`` folders (Hive partitions) taken off."""
    segments = destination.prefix.split("/") if destination.prefix else []
    while segments and _is_partition_folder(segments[-1]):
        segments.pop()
    return Table(destination.bucket, "/".join(segments))


def _is_partition_folder(segment: str) -> bool:
    name, sep, _value = segment.partition("=")
    return bool(sep and name)


def paths_overlap(a: str, b: str) -> bool:
    """Whether two paths inside a table ("" for all of it) share any key: one equals or contains the other."""
    return not a or not b or a == b or b.startswith(f"{a}/") or a.startswith(f"{b}/")


def job_id_of_hidden_key(destination: Destination, key: str) -> str | None:
    """The job id of a key under the destination's hidden prefix, else None."""
    return _job_id_below(destination.hidden_root, key)


def _job_id_below(hidden_root: str, key: str) -> str | None:
    if not key.startswith(hidden_root):
        return None
    candidate = key[len(hidden_root):].split("/", 1)[0]
    return candidate if is_job_id(candidate) else None


# ---------------------------------------------------------------- data keys
@dataclass(frozen=True)
class DataName:
    task_id: int
    job_id: str
    file_number: int
    ext: str


def data_file_name(*, task_id: int, job_id: str, file_number: int, ext: str) -> str:
    """``part-TTTTT-JOBID.cNNN.EXT``."""
    check_ext(ext)
    if task_id < 0 or file_number < 0:
        raise UsageError("task_id and file_number must not be negative")
    return f"part-{task_id:05d}-{job_id}.c{file_number:03d}.{ext}"


def parse_data_name(name: str) -> DataName | None:
    m = _DATA_NAME_RE.match(name)
    if not m:
        return None
    return DataName(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4))


def job_id_of_key(destination: Destination, key: str) -> str | None:
    """The job that owns ``key``: by the data file name, or by the hidden prefix it sits under."""
    return job_id_of_hidden_key(destination, key) or _job_id_of_name(key)


def _job_id_of_name(key: str) -> str | None:
    parsed = parse_data_name(key.rsplit("/", 1)[-1])
    return parsed.job_id if parsed else None


class KeyOwner(NamedTuple):
    """The job a key carries, and the root ("" or "prefix/") of that job's destination when the key says it."""

    job_id: str | None
    root: str | None


def owner_of_key(key: str) -> KeyOwner:
    """:func:`job_id_of_key` for a key whose destination is not known (a listing of pending uploads over any
    prefix): a key under some ``ROOT_temporary/mpcommit/JOBID/`` names the job and ROOT; a data file
    ``part-TTTTT-JOBID.cNNN.EXT`` names its job only (its root is found from the job's records)."""
    start = 0
    while (at := key.find(HIDDEN_ROOT, start)) >= 0:
        if at == 0 or key[at - 1] == "/":  # a whole path segment, not "ab_temporary/..."
            job_id = _job_id_below(key[:at] + HIDDEN_ROOT, key)
            if job_id is not None:
                return KeyOwner(job_id, key[:at])
        start = at + 1
    return KeyOwner(_job_id_of_name(key), None)


def check_ext(ext: str) -> str:
    if not isinstance(ext, str) or not _EXT_RE.match(ext) or ".." in ext:
        raise UsageError(f"{ext!r} is not a file extension: use letters, digits, '.', '-', '_' (e.g. snappy.parquet)")
    return ext


def is_hidden_name(name: str) -> bool:
    """Readers (Spark, Hive, pyarrow) skip files and folders whose names start with '_' or '.'."""
    return name.startswith(("_", "."))


def is_hidden_key(destination: Destination, key: str) -> bool:
    """True for keys a reader of the table skips: any path segment below the destination starting with '_' or '.'."""
    rel = key[len(destination.root):] if key.startswith(destination.root) else key
    return any(is_hidden_name(seg) for seg in rel.split("/") if seg)


# ---------------------------------------------------------------- Hive partitions
def escape_partition_value(value: object) -> str:
    """Escape one partition value as Hive does; None and "" become ``__HIVE_DEFAULT_PARTITION__``."""
    if value is None:
        return DEFAULT_PARTITION
    text = value if isinstance(value, str) else _format_value(value)
    if text == "":
        return DEFAULT_PARTITION
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPED else ch for ch in text)


def _format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def unescape_partition_value(text: str) -> str | None:
    if text == DEFAULT_PARTITION:
        return None
    return unquote(text)


def partition_path(columns: Sequence[str], values: Sequence[object]) -> str:
    """``col1=v1/col2=v2`` with Hive's escaping of names and values."""
    if len(columns) != len(values):
        raise UsageError(f"{len(columns)} partition columns but {len(values)} values")
    return "/".join(f"{escape_partition_value(c)}={escape_partition_value(v)}" for c, v in zip(columns, values))


def normalize_partition(partition: str | Mapping[str, object] | Iterable[tuple[str, object]] | None) -> str:
    """Accept a ready path (``"dt=2024-01-01"``), a mapping or pairs of (column, value); return the path as
    Spark's writer spells it. A path is read as ``col=value`` folders and written again with Hive's escaping, so
    that one partition has one spelling however it was given (``dt=a=b``, ``dt=a%3db`` and ``{"dt": "a=b"}`` are
    all ``dt=a%3Db``): an append and an overwrite meaning one partition then write one folder, and their places
    in the table's order overlap. A folder that is not ``col=value`` is refused by name: below a table it would
    be a table of its own, with an order of its own."""
    if partition is None or partition == "":
        return ""
    if isinstance(partition, str):
        path = partition.strip("/")
        if not _clean_relative(path):
            raise UsageError(f"partition {partition!r} has an empty, '.' or '..' segment")
        if any(ord(ch) < 0x20 or ch == "\x7f" for ch in path):
            # Keys with control characters break S3's XML listings of pending uploads (and with them the commit);
            # as a path, which of them the caller meant escaped cannot be told.
            raise UsageError(f"partition {partition!r} has a control character; pass {{column: value}} to have it "
                             "escaped")
        pairs = []
        for segment in path.split("/"):
            name, sep, value = segment.partition("=")
            if not sep or not name:
                raise UsageError(
                    f"partition {partition!r}: {segment!r} is not a col=value folder. A partition path is made of "
                    "col=value folders (dt=2024-01-01/country=DE), as Spark's writer makes them; pass "
                    "{column: value} to have values with '/' or '=' escaped. Nothing was written.")
            pairs.append((unquote(name), unescape_partition_value(value)))
    else:
        pairs = list(partition.items()) if isinstance(partition, Mapping) else list(partition)
    path = partition_path([c for c, _ in pairs], [v for _, v in pairs])
    if any(is_hidden_name(seg) for seg in path.split("/")):
        raise UsageError(f"partition {path!r}: a column name starting with '_' or '.' makes a folder readers skip")
    return path


def canonical_partition_folder(segment: str) -> str:
    """A ``col=value`` folder as Spark's writer spells it (:func:`normalize_partition` of one folder)."""
    return normalize_partition(segment)


def parse_partition_path(path: str) -> dict[str, str | None]:
    """``dt=2024-01-01/country=DE`` → ``{"dt": "2024-01-01", "country": "DE"}`` (unescaped)."""
    out: dict[str, str | None] = {}
    for seg in path.strip("/").split("/"):
        if not seg:
            continue
        name, sep, value = seg.partition("=")
        if not sep:
            raise UsageError(f"{seg!r} in {path!r} is not a col=value partition directory")
        out[unquote(name)] = unescape_partition_value(value)
    return out
