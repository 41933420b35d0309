"""Tables inside tables: one answer to "which table's commit order holds this key".

A table is a destination without its trailing ``col=value`` folders (:func:`~.layout.table_of`): ``s3://b/t`` and
``s3://b/t/dt=1`` write into one table and take their places in one commit order. A folder below a table that is
not a ``col=value`` folder (``s3://b/t/sub``) would be a table of its own, with an order of its own that the
enclosing table's jobs never read -- and then two orders could both claim its keys: an overwrite of ``t`` deleting
the files of a job of ``t/sub`` it cannot see, a compaction of ``t`` merging them. So:

* a new destination whose table lies inside another table -- a prefix above it holds a commit order -- is refused
  by name when its job is created (:func:`refuse_inside_another_table`), and a partition given as a path must be
  ``col=value`` folders (:func:`~.layout.normalize_partition`): a table's own jobs never write such a folder;
* a table nested inside another one from before (or made in the instant between the two checks) is never acted on
  from outside: what an overwrite or a compaction of the enclosing table deletes or merges leaves out every key
  under a nested table's root (:class:`NestedTables`, from the same listing that finds what to delete, read after
  the job took its place -- so a nested job that took its place first is seen, and one that takes it later has
  placed nothing in that listing), and one with a job in flight makes such a job refuse before its journal.
"""

from __future__ import annotations

from ..errors import UsageError
from ..store.s3 import S3Store
from .layout import HIDDEN_ROOT, ORDER_ROOT, Destination, Table, is_hidden_name, table_of
from .records.order import parse_checkpoint_name, parse_order_name


def nested_table_of(table: Table, key: str) -> str | None:
    """The URI of another table whose records ``key`` is (a commit order or job records in a folder below
    ``table`` that is not one of its partitions), else None."""
    rel = key[len(table.root):] if key.startswith(table.root) else key
    segments = rel.split("/")
    for i, segment in enumerate(segments[:-1]):
        ours = f"{segment}/" == ORDER_ROOT.split("/", 1)[0] + "/" or (
            f"{segment}/{segments[i + 1]}/" == HIDDEN_ROOT)
        if ours and i > 0:
            folder = Destination(table.bucket, "/".join(p for p in (table.prefix, *segments[:i]) if p))
            if table_of(folder) != table:
                return folder.uri
            return None
        if is_hidden_name(segment):
            return None
    return None


def root_of(table: Table, uri: str) -> str:
    """The key prefix ("a/b/") of the table at ``uri`` in ``table``'s bucket."""
    prefix = uri.split("://", 1)[1].partition("/")[2]
    return f"{prefix}/" if prefix else ""


class NestedTables:
    """Other tables inside a scope, told from the keys of a listing of it: their commit orders and job records.
    Nothing under a nested table's root is deleted or merged from outside (:meth:`covers`); one with a job in
    flight (an open place, or a job's records) makes an overwrite or compaction of the enclosing table refuse."""

    def __init__(self, table: Table):
        self.table = table
        self._roots: dict[str, str] = {}  # URI -> key prefix
        self._places: dict[str, set[int]] = {}
        self._ended: dict[str, set[int]] = {}
        self._through: dict[str, int] = {}
        self._jobs: dict[str, set[str]] = {}

    def add(self, key: str) -> None:
        other = nested_table_of(self.table, key)
        if other is None:
            return
        root = self._roots.setdefault(other, root_of(self.table, other))
        rel = key[len(root):]
        if rel.startswith(ORDER_ROOT):
            name = rel[len(ORDER_ROOT):]
            parsed = parse_order_name(name)
            if parsed is not None:
                (self._ended if parsed[1] else self._places).setdefault(other, set()).add(parsed[0])
            through = parse_checkpoint_name(name)
            if through is not None:
                self._through[other] = max(through, self._through.get(other, 0))
        elif rel.startswith(HIDDEN_ROOT):
            self._jobs.setdefault(other, set()).add(rel.split("/")[2] if rel.count("/") >= 2 else "")

    def covers(self, key: str) -> bool:
        """Whether ``key`` lies under a nested table's root seen so far."""
        return any(key.startswith(root) for root in self._roots.values())

    @property
    def roots(self) -> list[str]:
        return sorted(self._roots.values())

    def in_flight(self) -> dict[str, str]:
        """{table URI: why} for every nested table with a job in flight."""
        out: dict[str, str] = {}
        for uri, places in self._places.items():
            through = self._through.get(uri, 0)
            open_places = {p for p in places - self._ended.get(uri, set()) if p > through}
            if open_places:
                out[uri] = f"place {min(open_places)} of its commit order is open"
        for uri, jobs in self._jobs.items():
            out.setdefault(uri, f"job {sorted(jobs)[0]} has records there")
        return out


#: Tables found inside no other table, per store endpoint, for the life of the process: a stream's micro-batches
#: and a scheduler's jobs on one table ask once. (A table that became enclosing since is still caught by the second
#: rule: what its jobs delete or merge leaves this table's keys alone.)
_FREE: set[tuple[str, Table]] = set()


def enclosing_table(store: S3Store, table: Table) -> Table | None:
    """The table ``table`` lies inside, if any: the nearest prefix above it (up to the bucket's root) that holds a
    commit order. One small listing per folder above it, once per table and process."""
    if (store.endpoint, table) in _FREE:
        return None
    segments = table.prefix.split("/") if table.prefix else []
    for depth in range(len(segments) - 1, -1, -1):
        above = Table(table.bucket, "/".join(segments[:depth]))
        if store.list_children(table.bucket, above.order_root, limit=1):
            return above
    _FREE.add((store.endpoint, table))
    return None


def refuse_inside_another_table(store: S3Store, destination: Destination) -> None:
    """Refuse a destination whose table lies inside another table, unless it is a partition of it (``col=value``
    folders, which :func:`~.layout.table_of` takes off): its jobs would take places in an order the enclosing
    table's jobs never read."""
    table = table_of(destination)
    outer = enclosing_table(store, table)
    if outer is None:
        return
    inside = table.prefix[len(outer.root):]
    raise UsageError(
        f"{destination.uri} lies inside the table {outer.uri} (it has a commit order), in the folder {inside!r}, "
        "which is not a partition of it (a partition is col=value folders, such as dt=2024-01-01). A table inside "
        "a table would have a commit order of its own, which that table's jobs never read, and each could delete "
        f"or merge the other's rows. Write it as a partition of {outer.uri} (partition_by, or a URI such as "
        f"{outer.uri}/col=value), or as a table of its own outside it. Nothing was written.")
