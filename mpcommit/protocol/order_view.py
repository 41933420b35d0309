"""What one listing of a table's commit order shows, and the answers read from it: value objects, no requests
(:class:`~mpcommit.protocol.order.TableOrder` makes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MpcommitError
from .records.order import OrderEntry, TxnRecord


@dataclass(frozen=True)
class OrderView:
    """The order as one listing showed it: the places taken, which of them have ended, and up to which place
    everything has ended and may have been collected (``through``, 0 when nothing was)."""

    positions: tuple[int, ...]
    ended: frozenset[int]
    through: int = 0
    #: Checkpoints listed, oldest first (the newest is ``through``).
    checkpoints: tuple[int, ...] = ()
    #: Keys under the order's folder that are no record of mpcommit's: reported, never read as places.
    strays: tuple[str, ...] = field(default=())
    #: Places (entries or ends) a checkpoint covers that are still there: an interrupted collection's, or an
    #: end written back by a process that had lost its job. Ended whatever they say; the next collection deletes them.
    leftovers: tuple[int, ...] = ()

    @property
    def highest(self) -> int:
        return max(self.positions[-1] if self.positions else 0, self.through)

    @property
    def lowest(self) -> int:
        return self.positions[0] if self.positions else 0

    def is_open(self, position: int) -> bool:
        """Whether the place is taken and its job has not ended (a collected place has ended)."""
        return position > self.through and position in self._taken and position not in self.ended

    @property
    def _taken(self) -> frozenset[int]:
        return frozenset(self.positions)

    def open_before(self, position: int) -> list[int]:
        """Places before ``position`` whose jobs have not ended."""
        return [p for p in self.open if p < position]

    @property
    def open(self) -> list[int]:
        return [p for p in self.positions if p > self.through and p not in self.ended]

    @property
    def held(self) -> list[int]:
        """The places not covered by a checkpoint, open or ended: those whose entries are still there."""
        return [p for p in self.positions if p > self.through]


@dataclass(frozen=True)
class TxnState:
    """What an application has done on a table: its newest committed version, and its places still open after
    that version's place."""

    newest: TxnRecord | None
    open: tuple[OrderEntry, ...]


@dataclass(frozen=True)
class Collected:
    """A place that ended long ago: the order's collection deleted its records, and its checkpoint (up to
    ``through``) says it ended -- not how. A job whose journal was written can only have committed."""

    through: int


class PlaceEndedError(MpcommitError):
    """A job's own place in the order has ended (another process finished the job): whatever this process read
    of the order for it must not be acted upon."""


@dataclass(frozen=True)
class OrderSnapshot:
    """What a job saw of the order before it read the table (a compaction, before listing its sources)."""

    highest: int
    open: frozenset[int]
