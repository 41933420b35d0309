"""The store's clock, learnt from the Date of its answers: ages of uploads and records are judged against the clock
that stamped them, not this host's (a cleanup host whose clock runs ahead would take every job for older than it
is).

A Date says the second the answer was made, and a slow answer leaves more doubt about when in its round trip that
was: so the offset comes from the quickest answer seen, and once an answer was quick enough the store stops
timing its requests (:attr:`StoreClock.settled`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

#: An answer this quick dates the store's clock to within its Date's own second: no need to look at later ones.
GOOD_ENOUGH = 0.25
#: An answer slower than this says too little of when it was made to be used at all.
TOO_SLOW = 2.0
T = TypeVar("T")


class StoreClock:
    """The store's clock minus this host's, once an answer dated it, and the round trip of that answer."""

    def __init__(self) -> None:
        self.offset: float | None = None
        self.round_trip = math.inf

    @property
    def settled(self) -> bool:
        """Whether an answer already dated the clock as well as any later one could."""
        return self.round_trip <= GOOD_ENOUGH

    def timed(self, request: Callable[[], T]) -> T:
        """``request()``, its answer's Date noted unless the clock is settled."""
        if self.settled:
            return request()
        sent = time.time()
        response = request()
        self.note(response, sent, time.time())
        return response

    def note(self, response: Any, sent: float, received: float) -> None:
        """Learn the clock from the Date of an answer that came back quickly, or more quickly than the one it was
        learnt from."""
        round_trip = received - sent
        if round_trip > TOO_SLOW or round_trip >= self.round_trip or not isinstance(response, dict):
            return
        date = (response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) or {}).get("date")
        if not date:
            return
        try:
            # Date is truncated to the second: on average half a second before the answer was made.
            self.offset = parsedate_to_datetime(date).timestamp() + 0.5 - (sent + received) / 2
            self.round_trip = round_trip
        except (TypeError, ValueError):
            pass

    def now(self, date_an_answer: Callable[[], None]) -> float:
        """Now, in seconds since the epoch, by the store's clock. ``date_an_answer`` makes a request whose answer
        dates it, when none did yet; with still no Date to go by, this host's clock is the store's."""
        if self.offset is None:
            date_an_answer()
            if self.offset is None:
                self.offset = 0.0
        return time.time() + self.offset
