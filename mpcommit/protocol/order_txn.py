"""An application's versions in a table's commit order (idempotent re-runs, a stream's micro-batches): the newest
version it committed and its places still open -- what a commit with a version decides from before its journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CommitFailedError
from .order_view import OrderView, TxnState
from .records.order import OrderEntry, Outcome, TxnRecord

if TYPE_CHECKING:
    from .order import TableOrder

#: Listings :func:`txn_state` takes before it gives up on an order that changes under each one.
STALE_RETRIES = 5


def txn_state(order: TableOrder, app_id: str, *, below: int | None = None,
              view: OrderView | None = None) -> TxnState:
    """Application ``app_id`` in ``order`` (below place ``below``): the newest version it committed -- from
    the newest committed place that carries it, else from the checkpoint -- and its places still open after
    that one. A version commits only after every earlier place of its application ended and only if it is
    newer than any they committed, so the newest committed place holds the highest version.

    Entries are read newest first, a few at a time and more each round (2, 8, 32, ...), until that place is
    found: an application that commits often (a stream's micro-batches) finds its last version among the
    newest places in one or two reads, where reading every entry the order holds cost a new process up to
    ``keep_resolved`` requests per decision. ``view``: the order as listed a moment ago (else listed now).

    A listing can go stale before its records are read (a pause; the order's collection meanwhile deleting a
    place, an end or a checkpoint it names, the versions moving to a newer checkpoint): a record the listing
    named that is gone means the answer is asked again of a new listing, never taken from what is left."""
    for _attempt in range(STALE_RETRIES):
        state = _from_view(order, app_id, below, view if view is not None else order.view())
        if state is not None:
            return state
        view = None
    raise CommitFailedError(f"the commit order of {order.table.uri} changed under every one of "
                            f"{STALE_RETRIES} listings while application {app_id!r}'s versions were read; "
                            "nothing was decided -- run the job again")

def _from_view(order: TableOrder, app_id: str, below: int | None, view: OrderView) -> TxnState | None:
    """:func:`txn_state` from ``view``; None when ``view`` turned out stale."""
    newest_first = [p for p in reversed(view.positions) if p > view.through and (below is None or p < below)]
    still_open: list[OrderEntry] = []
    start, size = 0, 2
    while start < len(newest_first):
        # The first two places are read with their ends side by side: the newest of them is most often the
        # application's own last commit (a stream's previous micro-batch), so its end is wanted at once, and
        # an end read for nothing costs a request, not a round trip.
        chunk = order.read_ahead(newest_first[start:start + size],
                                ends=[p for p in newest_first[start:start + size] if p in view.ended]
                                if start == 0 else ())
        start, size = start + size, size * 4
        for p in chunk:
            e = order.entry(p)
            if e is None:
                return None  # collected since the listing
            if e.txn is None or e.txn.app_id != app_id:
                continue
            if e.position not in view.ended:
                still_open.append(e)
                continue
            outcome = order.outcome(e.position)
            if outcome is None:
                return None  # its end was listed, and collected since
            if outcome.outcome is Outcome.COMMITTED:
                return TxnState(TxnRecord(e.txn.version, e.position, e.job_id), tuple(still_open))
    if not view.checkpoints:
        return TxnState(None, tuple(still_open))
    checkpoint = order.checkpoint(view)
    if checkpoint is None or checkpoint.through != view.through:
        return None  # the newest checkpoint listed was replaced since: the versions moved on with it
    return TxnState(checkpoint.txns.get(app_id), tuple(still_open))
