"""A write that names a catalog table (``table=``, the data source's option ``table``): its destination, format and
partition columns from the table where the write leaves them out (:func:`resolve`, in the doors that may leave them
out), and checked against it where it gives them (:func:`check`, where every door's write starts) -- before anything
is written.

This is the catalog route to a table Spark reads natively (``CREATE TABLE db.t (...) USING parquet PARTITIONED BY
(dt) LOCATION 's3a://...'``): ``writer(df, table="db.t").mode("append").save()`` takes everything from the session
catalog, and ``df.write.format("mpcommit").option("table", "db.t").option("catalog", "glue")...save()`` from Glue
(a data source cannot reach the session's catalog). The commit then registers the partitions it made, as every
``table=`` write does (:mod:`mpcommit.catalog.sync`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from .request import Settings


@dataclasses.dataclass(frozen=True)
class Target:
    """What a write into a table needs besides its data, and the settings with the catalog resolved."""

    path: str
    format: str
    partition_by: tuple[str, ...]
    settings: Settings


def resolve(settings: Settings, *, path: str | None, fmt: str | None, partition_by: Sequence[str] | None,
            default_catalog: str, spark: Any = None) -> Target | None:
    """The write's path, format and partition columns with what the table of ``settings.table`` says where the
    write leaves them out (``fmt``: mpcommit's name of the format asked for, None when it did not say; no partition
    columns: the table's). None when the write names no table or leaves nothing out: then nothing is asked of the
    catalog here, and :func:`check` does it where the write starts. The catalog is resolved once here and kept in
    the returned settings where it is an object that stays in this process (a data source's Glue catalog stays the
    picklable spec it came as)."""
    if settings.table is None or (path is not None and fmt is not None and partition_by):
        return None
    from ..catalog.plan import write_layout
    from ..catalog.sync import check_target

    given = settings.catalog if settings.catalog is not None else default_catalog
    build = getattr(given, "build", None)  # a data source's GlueCatalogSpec: its client is made here
    name, catalog = check_target(settings.table, build(settings.s3) if callable(build) else given, s3=settings.s3,
                                 spark=spark)
    layout = getattr(catalog, "layout", None)
    if layout is None:  # a Catalog of the caller's own that only registers: the write says everything itself
        if path is None:
            raise UsageError(f"table {name}: the {getattr(catalog, 'name', type(catalog).__name__)} catalog given does "
                             "not say where its tables are (it has no layout()): give the path. Nothing was written.")
        return None
    where, chosen, columns = write_layout(layout(name), path=path, fmt=fmt, partition_by=partition_by)
    kept = dataclasses.replace(settings, layout_checked=True)
    if not callable(build):
        kept = dataclasses.replace(kept, catalog=catalog)
    return Target(where, chosen, columns, kept)


def check(table: Any, catalog: Any, *, path: str, fmt: str, partition_by: Sequence[str]) -> None:
    """Refuse a write that contradicts its table (another location, format or partition columns) before anything
    is written: where the write starts, for every door, with the catalog it registers in (one that cannot say
    where its tables are is not asked)."""
    from ..catalog.plan import write_layout

    layout = getattr(catalog, "layout", None)
    if layout is not None:
        write_layout(layout(table), path=path, fmt=fmt, partition_by=partition_by)
