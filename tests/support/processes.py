"""What every server a test session starts (Spark Connect, a standalone cluster) shares: it dies with the session."""

from __future__ import annotations

import contextlib
import ctypes
import signal


def die_with_parent() -> None:
    """``preexec_fn`` of a server started by the tests: in the child before exec, ask Linux to send it SIGTERM
    when the thread that started it dies -- even by SIGKILL, or by a SIGTERM that skips pytest's finalizers --
    so that no JVM outlives its test session. spark-class and spark-submit exec the JVM, which keeps the
    setting. Start such servers from the main thread: the signal follows the starting thread, not the process."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
