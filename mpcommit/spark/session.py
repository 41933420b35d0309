"""What Spark's writer takes from the session rather than from a write's options, read where each door can read it.

``df.write`` follows a handful of ``spark.sql.*`` settings when an option does not say otherwise (the format,
Parquet's codec, the partition overwrite mode, ``maxRecordsPerFile``, Parquet's timestamp type). The fluent writer
reads them from the DataFrame's session. A Python data source cannot: Spark plans and commits it in Python
processes of their own, which see the write's options and nothing of the session. Spark does hand every setting a
session has set to the write's tasks (as local properties of the tasks), so the data source plans with Spark's
defaults, notes which of them it took, and its tasks compare those with what the session set: a difference is
refused before a task writes anything, naming the option that says it on the write
(:meth:`SessionSettings.check_in_task`). The same inputs then never give different files through two doors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import UsageError

#: Each setting: (the session's key, Spark's default, the write option that says the same on one write).
SETTINGS: dict[str, tuple[str, str, str]] = {
    "source_default": ("spark.sql.sources.default", "parquet", "format"),
    "parquet_codec": ("spark.sql.parquet.compression.codec", "snappy", "compression"),
    "partition_overwrite": ("spark.sql.sources.partitionOverwriteMode", "STATIC", "partitionOverwriteMode"),
    "max_records_per_file": ("spark.sql.files.maxRecordsPerFile", "0", "maxRecordsPerFile"),
    "timestamp_type": ("spark.sql.parquet.outputTimestampType", "INT96", "outputTimestampType"),
}

Lookup = Callable[[str], "str | None"]


class SessionSettingError(UsageError):
    """A session setting the data source could not see would have changed the write (see the module)."""


@dataclass(frozen=True)
class SessionSettings:
    """The session's values of :data:`SETTINGS` (Spark's defaults where the session sets none), and which of them
    a write took (``consulted``: where no option said otherwise)."""

    source_default: str = "parquet"
    parquet_codec: str = "snappy"
    partition_overwrite: str = "STATIC"
    max_records_per_file: str = "0"
    timestamp_type: str = "INT96"
    #: The session's time zone and Arrow string types: how Spark hands the rows to Python (no option changes them).
    time_zone: str | None = None
    large_var_types: bool = False
    #: Whether these are the session's values (False: Spark's defaults, the session unseen: a data source's driver).
    seen: bool = True

    @classmethod
    def of(cls, lookup: Lookup) -> "SessionSettings":
        """From ``lookup(key)`` (the session's value, or None where it sets none)."""
        values = {}
        for name, (key, default, _option) in SETTINGS.items():
            found = lookup(key)
            values[name] = default if found is None else str(found)
        large = lookup("spark.sql.execution.arrow.useLargeVarTypes")
        return cls(**values, time_zone=lookup("spark.sql.session.timeZone"),
                   large_var_types=str(large).strip().lower() == "true" if large is not None else False)

    @classmethod
    def of_session(cls, spark: object) -> "SessionSettings":
        conf = spark.conf  # type: ignore[attr-defined]
        return cls.of(lambda key: conf.get(key, None))

    @classmethod
    def unseen(cls) -> "SessionSettings":
        """Spark's defaults, for a process that cannot see the session (a Python data source's planning)."""
        return cls(seen=False)

    @classmethod
    def of_task(cls) -> "SessionSettings":
        """What the session set, as Spark hands it to a running task."""
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls.unseen()
        return cls.of(context.getLocalProperty)

    def check_in_task(self, consulted: Iterable[str], *, door: str = "the mpcommit data source") -> None:
        """In a task of a write planned with :meth:`unseen` values: refuse when the session set one of the
        ``consulted`` settings to something else than the plan took."""
        if self.seen:
            return
        session = SessionSettings.of_task()
        if not session.seen:
            return
        for name in consulted:
            key, _default, option = SETTINGS[name]
            planned, actual = getattr(self, name), getattr(session, name)
            if str(planned).strip().lower() != str(actual).strip().lower():
                raise SessionSettingError(
                    f"the session sets {key}={actual}, and {door} cannot see session settings when it plans a "
                    f"write (Spark runs it in a Python process of its own), so it would have written with "
                    f"{planned!r}. Say it on the write: .option({option!r}, {actual!r}) (or the same in the "
                    "OPTIONS of a SQL view). Nothing was written.")


class Recorder:
    """Reads settings for one write's translation and remembers which it took."""

    def __init__(self, settings: SessionSettings):
        self.settings = settings
        self.consulted: set[str] = set()

    def __call__(self, name: str) -> str:
        if name not in SETTINGS:
            raise KeyError(name)
        self.consulted.add(name)
        return str(getattr(self.settings, name))
