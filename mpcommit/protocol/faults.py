"""Named points in the protocol where tests make the process fail (a raised exception or SIGKILL).

Production code calls ``checkpoint(name, index)`` at each step; it does nothing unless a test installed a
hook with :func:`installed` or set ``MPCOMMIT_FAULT`` (for subprocesses that are killed outright), e.g.
``MPCOMMIT_FAULT=commit.after_complete:3:kill`` -- kill the process after the 3rd complete.

Points: writer.created, writer.part_uploaded (k), task.before_commit, task.after_commit, commit.after_place
(the job holds its place in the table's commit order, its journal not yet claimed), commit.after_journal,
commit.after_turn (the finisher -- the driver or a `recover` -- holds the job's finishing turn, nothing completed
yet), commit.after_complete (k), commit.after_replace_listing (an overwrite listed the scope it replaces, the
later jobs not yet read), commit.before_replace (an overwrite judged what is older, nothing deleted yet),
commit.before_delete_batch (k), commit.before_success, commit.after_success, commit.during_cleanup,
rollback.after_claim (a rollback holds the journal key, nothing aborted yet), order.before_collect (a job tidying
the order read it, nothing collected yet).

The streaming sink's (:mod:`mpcommit.spark.streaming`, indexed by the micro-batch's id): stream.before_commit (Spark
called the sink's ``commit``), stream.after_settle (the micro-batch's other attempts finished or rolled back, this
one's commit not begun), stream.after_data_commit (the micro-batch's job committed; the sink is about to return to
Spark, which then writes its own commit log).

Actions after ``point:k:``: empty raises :class:`InjectedFault`; ``kill`` sends SIGKILL to this process; ``stop``
sends it SIGSTOP -- a pause (a long GC, a suspended VM, a laptop lid) that ends when the test sends SIGCONT, every
thread of the process frozen meanwhile, its heartbeat's too;
``killgroup`` sends SIGKILL to the process group named by ``MPCOMMIT_FAULT_GROUP`` (when set), then to this
process's own group. A Python data source's stream ``commit`` runs in a Python worker that the driver's JVM starts
(forked by PySpark's worker daemon, which makes a process group of its own): a test's driver, started as a group of
its own and naming it in ``MPCOMMIT_FAULT_GROUP`` before its JVM starts, is thus killed whole -- its Python process,
its JVM and their Python workers -- as a crashed or preempted driver machine would be. An empty ``k`` matches every
index (the first time the point is reached). Several specs are separated by commas
(``commit.after_place:1:stop,commit.after_replace_listing:1:stop``); each fires once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = (
    "writer.created", "writer.part_uploaded", "task.before_commit", "task.after_commit", "commit.after_place",
    "commit.after_journal", "commit.after_turn", "commit.after_complete", "commit.after_replace_listing",
    "commit.before_replace", "commit.before_delete_batch", "commit.before_success", "commit.after_success",
    "commit.during_cleanup", "rollback.after_claim", "order.before_collect",
    "stream.before_commit", "stream.after_settle", "stream.after_data_commit",
)

Hook = Callable[[str, int], None]
_hooks: list[Hook] = []
_lock = threading.Lock()


class InjectedFault(RuntimeError):
    """Raised by a fault hook; never raised in production."""


#: Specs of MPCOMMIT_FAULT that fired already in this process (each fires once: a stopped process that is
#: continued goes on past the point, as a paused one would).
_fired: set[str] = set()


def checkpoint(name: str, index: int = 1) -> None:
    specs = os.environ.get("MPCOMMIT_FAULT")
    if specs:
        for spec in specs.split(","):
            _from_env(spec, name, index)
    if _hooks:
        for hook in list(_hooks):
            hook(name, index)


def _from_env(spec: str, name: str, index: int) -> None:
    point, _, rest = spec.partition(":")
    wanted, _, how = rest.partition(":")
    if point != name or (wanted and int(wanted) != index):
        return
    with _lock:
        if spec in _fired:
            return
        _fired.add(spec)
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "killgroup":
        group = os.environ.get("MPCOMMIT_FAULT_GROUP")
        if group and int(group) != os.getpgid(0):
            os.killpg(int(group), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)
    raise InjectedFault(f"injected fault at {name} #{index}")


@contextmanager
def installed(hook: Hook) -> Iterator[None]:
    with _lock:
        _hooks.append(hook)
    try:
        yield
    finally:
        with _lock:
            _hooks.remove(hook)


def fail_at(point: str, index: int = 1) -> Hook:
    """A hook that raises InjectedFault at the ``index``-th time ``point`` is reached (counting from 1)."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")

    def hook(name: str, i: int) -> None:
        if name == point and i == index:
            raise InjectedFault(f"injected fault at {name} #{i}")

    return hook
