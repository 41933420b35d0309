"""The threads of one job commit: made when the commit starts, closed when it ends.

The inner pool carries the per-file requests (completes, HEADs, aborts, a scope's listings); the outer one the
per-task work that runs beside them (manifests read ahead, an overwrite's first look at its scope). ``threads=0``
runs both on the caller's thread, so that a test can run a whole commit serially and deterministically. (Hadoop
S3A's ``CommitContext`` holds the same two submitters over one ``TaskPool``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from ...pool import ProgressHook, executor_for, run_bounded

T = TypeVar("T")
R = TypeVar("R")

#: Referenced manifests read ahead at once, at most (see manifests.py); the outer pool's size.
MANIFESTS_AHEAD = 16


class CommitContext:
    """Owns a commit's executors; every pool a commit uses comes from here (the process pool of
    :mod:`.placing` excepted, which holds processes, not threads)."""

    def __init__(self, threads: int):
        self.threads = max(0, threads)
        self.inner: Executor = executor_for(self.threads, "mpcommit-commit")
        # One more than the read-ahead: the overwrite's first look runs beside the manifests being read.
        self.outer: Executor = executor_for(MANIFESTS_AHEAD + 1 if self.threads else 0, "mpcommit-manifest")

    @property
    def serial(self) -> bool:
        return self.threads == 0

    def run(self, fn: Callable[[T], R], items: Iterable[T], *, window: int | None = None,
            on_result: Callable[[T, R], bool | None] | None = None, progress: ProgressHook | None = None,
            phase: str = "", total: int | None = None) -> bool:
        """:func:`~mpcommit.pool.run_bounded` on the inner pool (default window: two calls per thread). Serial,
        one call at a time: a failure stops the run exactly where it happened."""
        width = max(1, self.threads)
        window = 1 if self.serial else (window or 2 * width)
        return run_bounded(fn, items, threads=width, executor=self.inner, window=window,
                           on_result=on_result, progress=progress, phase=phase, total=total)

    def beside(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        """Run ``fn(*args)`` on the outer pool, beside the work of the inner one."""
        return self.outer.submit(fn, *args)

    def close(self) -> None:
        self.inner.shutdown(wait=True)
        # Reads ahead that nobody will consume are cancelled, not waited for.
        self.outer.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "CommitContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
