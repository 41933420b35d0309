"""The fence of a finisher: whether this process still holds the job it is finishing, asked before every step
that cannot be undone.

A lease tells a waiter when it may take over; it never tells the old holder that it lost. A finisher that was
paused (a long GC, a suspended VM) or cut off from the store while another process took its job over, finished
it and let the order's collection forget it, would otherwise go on completing and deleting for a job that is no
longer its own. So before it completes, before each further complete once its own heartbeat is stale, between
reading the later jobs and deleting what it replaces, before ``_SUCCESS`` and before the job's end, a finisher
checks that it still holds the job (:class:`Hold`), and stops when it does not.

What the check rests on (:mod:`..heartbeat`, :mod:`.turn`): every take-over of a job that a finisher holds
first writes the job's heartbeat over the very beat it watched stay the same for a lease, with If-Match. So

* a beat of this process that lands now proves that no take-over happened before it (:meth:`Hold.check`: one
  conditional PUT); and
* a beat of this process sent less than half a lease ago that landed proves the same without a request
  (:meth:`Hold.check_if_stale`): a taker must have watched the heartbeat unchanged for a whole lease.

The window after a check is harmless. Completes: a complete sent after a check repeats one the taker sends
too, with the same parts -- idempotent on S3 (only requests already in flight at a pause can race the taker's).
Deletes: what an overwrite deletes was judged from a listing of the scope, then of the later jobs, while its own
place was still open (:meth:`~mpcommit.protocol.order.TableOrder.jobs_after` refuses otherwise); every object in
it belongs to a job before it in the order, whose files the serial order replaces -- the taker deletes the same
ones, and no later job's file is among them however late the delete lands.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from ...errors import MpcommitError
from ..heartbeat import Heartbeat

T = TypeVar("T")


class HoldLostError(MpcommitError):
    """This process no longer holds the job it is finishing (its beat was refused): it must do nothing more for
    it. Raised by a fence; the committer turns it into the job's outcome as another process left it."""

    def __init__(self, step: str, why: str):
        super().__init__(f"before {step}: {why}")
        self.step = step
        self.why = why


class Hold:
    """What a finisher holds while it carries out a journal: the job's heartbeat, the lease every take-over
    breaks first (beside the finishing turn, which keeps finishers that are alive from starting side by side)."""

    def __init__(self, heartbeat: Heartbeat, lease_seconds: float):
        self.heartbeat = heartbeat
        self.lease_seconds = lease_seconds

    def check(self, step: str) -> None:
        """One beat now: HoldLostError if it is refused."""
        if not self.heartbeat.beat_now():
            raise HoldLostError(step, self.heartbeat.lost or "another process beats for the job")

    def check_if_stale(self, step: str) -> None:
        """Free while the heartbeat's own beats landed within half a lease; else :meth:`check`."""
        if self.heartbeat.lost is not None:
            raise HoldLostError(step, self.heartbeat.lost)
        if not self.heartbeat.holds(within=self.lease_seconds / 2):
            self.check(step)

    def guard(self, items: Iterator[T], step: str) -> Iterator[T]:
        """``items``, each handed out only while the job is still held."""
        for item in items:
            self.check_if_stale(step)
            yield item
