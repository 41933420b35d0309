"""The threads and windows of one job commit: made when the commit starts, closed when it ends.

The inner pool carries the per-file requests that block (HEADs, copies, aborts, deletes, a scope's listings);
the outer one the per-task work that runs beside them (manifests read ahead, an overwrite's first look at its
scope). The requests a commit makes by the thousand -- completes, the overwrite's deletes, the leftover aborts --
run under an adaptive window (:meth:`CommitContext.run_adaptive`, :class:`mpcommit.pool.Window`): completes on
the store's asynchronous transport where it has one (no thread per request in flight), the rest on the inner
pool. ``threads=0`` runs everything on the caller's thread, one call at a time, so that a test can run a whole
commit serially and deterministically. (Hadoop S3A's ``CommitContext`` holds the same two submitters over one
``TaskPool``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from ...options import RetryPolicy
from ...pool import Done, ProgressHook, Window, executor_for, on_threads, run_bounded, run_windowed
from ...store.retry import Attempts, single_attempts, slows_down

T = TypeVar("T")
R = TypeVar("R")

#: Referenced manifests read ahead at once, at most (see manifests.py); the outer pool's size.
MANIFESTS_AHEAD = 16


class CommitContext:
    """Owns a commit's executors; every pool a commit uses comes from here."""

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

    def run_adaptive(self, fn: Callable[[T], R], items: Iterable[T], *, retry: RetryPolicy,
                     start: Callable[[T, Done], bool] | None = None, initial: int | None = None,
                     ceiling: int | None = None, on_result: Callable[[T, Any], bool | None] | None = None,
                     progress: ProgressHook | None = None, phase: str = "", total: int | None = None) -> Window:
        """Every item through ``start(item, done)`` -- an asynchronous request, which returns False for an item
        it does not take -- or ``fn(item)`` on the inner pool, under an adaptive window: from ``initial`` (the
        commit's threads) up to ``ceiling`` (default: the threads), halved when the store asks to slow down. Each
        call makes one attempt per request; a transient failure is retried here, per ``retry``, without a thread
        sleeping through it. Returns the window, which says what it went through.

        Serial: ``fn`` one item at a time on this thread, each request retried by the store as usual."""
        if self.serial:
            self.run(fn, items, on_result=on_result, progress=progress, phase=phase, total=total)
            return Window(1)
        window = Window(initial or self.threads, ceiling=ceiling or self.threads)

        def attempt(item: T) -> R:
            with single_attempts():
                return fn(item)

        threaded = on_threads(self.inner, attempt)

        def begin(item: T, done: Done) -> None:
            if start is None or not start(item, done):
                threaded(item, done)

        run_windowed(begin, items, window=window, on_result=on_result,
                     retries=lambda first: Attempts(retry, started=first), slow_down=slows_down,
                     progress=progress, phase=phase, total=total)
        return window

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
