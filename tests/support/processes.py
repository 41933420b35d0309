"""What every server a test session starts (Spark Connect, a standalone cluster) shares: it dies with the session."""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
from typing import Callable, Sequence

#: util-linux's setpriv sets the parent-death signal and execs the command: no Python runs in the forked child.
SETPRIV = shutil.which("setpriv")


def die_with_parent() -> None:
    """``preexec_fn`` of a server started by the tests: in the child before exec, ask Linux to send it SIGTERM
    when the thread that started it dies -- even by SIGKILL, or by a SIGTERM that skips pytest's finalizers --
    so that no JVM outlives its test session. spark-class and spark-submit exec the JVM, which keeps the
    setting. Start such servers from the main thread: the signal follows the starting thread, not the process."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def dying_with_parent(args: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The command line and ``preexec_fn`` that start a server which dies with the thread that starts it.

    Through setpriv where it exists: a ``preexec_fn`` runs Python in the child between fork and exec, where the
    fork handlers of a library the test process has loaded run too -- gRPC's (the Spark Connect client's) aborted
    the child ("epoll_wait error: Bad file descriptor", exit -6), so that a versitygw started after a Connect test
    in the same worker never ran, and every test on it failed. Without setpriv, the ``preexec_fn``."""
    if SETPRIV:
        return [SETPRIV, "--pdeathsig", "TERM", "--", *args], None
    return list(args), die_with_parent
