"""Writing through mpcommit's own API, as the tests' jobs do: one task attempt writing a few files."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mpcommit import Job, TaskAttempt, TaskResult

#: Files are written in pieces of this size, as a stream would arrive.
CHUNK = 1 << 20


def text_file(task: TaskAttempt, partition: str) -> Any:
    return task.create(partition=partition, ext="txt")


def write_task(job: Job, task_id: int, files: Mapping[str, bytes] | Iterable[tuple[str, bytes]], *,
               attempt: int = 0, commit: bool = True,
               open_file: Callable[[TaskAttempt, str], Any] = text_file) -> TaskResult | None:
    """One attempt of task ``task_id`` writing ``files`` -- ``{partition: data}`` or (partition, data) pairs,
    ``""`` for the root -- one file each, whose rows are its lines. ``open_file(task, partition)`` makes a file
    (a text file by default). Returns ``task.commit()``'s result; with ``commit=False``, the attempt is left as
    a crashed one leaves it: its uploads pending, no manifest, and None is returned."""
    pairs = files.items() if isinstance(files, Mapping) else files
    with job.spec.task(task_id, attempt) as task:
        for partition, data in pairs:
            out = open_file(task, partition)
            try:
                for start in range(0, len(data) or 1, CHUNK):
                    out.write(data[start : start + CHUNK])
                out.rows = data.count(b"\n")
            except BaseException:
                out.abort()
                raise
            out.close()
        if commit:
            return task.commit()
        # Detach the uploads from the attempt so that leaving the `with` block does not abort them (a killed
        # process would not).
        task._uploads.clear()
        return None


def lines_of_partitions(tag: object, partitions: Iterable[str]) -> dict[str, bytes]:
    """One line per partition, naming ``tag`` and the partition."""
    return {p: f"{tag} {p}\n".encode() for p in partitions}
