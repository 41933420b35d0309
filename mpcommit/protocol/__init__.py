"""The commit protocol, engine-neutral: where files go (layout), how a task attempt streams them as multipart
uploads and records them (writer, task, records/), how the driver commits, aborts or recovers a job (job,
commit, recovery), which jobs a destination holds and in what state (inventory), and the named checkpoints
where tests inject failures (faults).

An engine binding (``mpcommit.spark``) uses the protocol through the names below and the modules ``job``,
``task``, ``layout``, ``stream`` and ``faults``: the records it hands between driver and tasks, the commit's report,
an application's version. It never reaches into ``records/``, ``commit/`` or ``order`` (tests/test_boundaries.py),
so that those can change shape without an engine noticing. The names load when first asked for: a task's process
that only writes files does not load the commit's modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .commit import DEFAULT_COMMIT_THREADS, CommitReport
    from .commit.committed import HandedOverResults
    from .records.job import JobDescriptor, MergedFile
    from .records.manifest import INLINE_MAX_PARTS, InlineBudget, TaskResult, inline_parts_per_task
    from .records.order import Txn

#: Each public name and the module that defines it.
_PUBLIC = {
    "CommitReport": ".commit", "DEFAULT_COMMIT_THREADS": ".commit",
    "HandedOverResults": ".commit.committed",
    "JobDescriptor": ".records.job", "MergedFile": ".records.job",
    "INLINE_MAX_PARTS": ".records.manifest", "InlineBudget": ".records.manifest", "TaskResult": ".records.manifest",
    "inline_parts_per_task": ".records.manifest",
    "Txn": ".records.order",
}

__all__ = ["CommitReport", "DEFAULT_COMMIT_THREADS", "HandedOverResults", "INLINE_MAX_PARTS", "InlineBudget",
           "JobDescriptor", "MergedFile", "TaskResult", "Txn", "inline_parts_per_task"]
assert sorted(__all__) == sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
