"""Named points in the protocol where tests make the process fail (a raised exception or SIGKILL).

Production code calls ``checkpoint(name, index)`` at each step; it does nothing unless a test installed a
hook with :func:`installed` or set ``MPCOMMIT_FAULT`` (for subprocesses that are killed outright), e.g.
``MPCOMMIT_FAULT=commit.after_complete:3:kill`` -- kill the process after the 3rd complete.

Points: writer.created, writer.part_uploaded (k), task.before_commit, task.after_commit, commit.after_place
(the job holds its place in the table's commit order, its journal not yet claimed), commit.after_journal,
commit.after_complete (k), commit.before_delete_batch (k), commit.before_success, commit.after_success,
commit.during_cleanup, rollback.after_claim (a rollback holds the journal key, nothing aborted yet).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = (
    "writer.created", "writer.part_uploaded", "task.before_commit", "task.after_commit", "commit.after_place",
    "commit.after_journal", "commit.after_complete", "commit.before_delete_batch", "commit.before_success",
    "commit.after_success", "commit.during_cleanup", "rollback.after_claim",
)

Hook = Callable[[str, int], None]
_hooks: list[Hook] = []
_lock = threading.Lock()


class InjectedFault(RuntimeError):
    """Raised by a fault hook; never raised in production."""


def checkpoint(name: str, index: int = 1) -> None:
    spec = os.environ.get("MPCOMMIT_FAULT")
    if spec:
        _from_env(spec, name, index)
    if _hooks:
        for hook in list(_hooks):
            hook(name, index)


def _from_env(spec: str, name: str, index: int) -> None:
    point, _, rest = spec.partition(":")
    wanted, _, how = rest.partition(":")
    if point != name or (wanted and int(wanted) != index):
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
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
