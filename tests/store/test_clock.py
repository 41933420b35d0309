"""The store's clock, as ages of uploads and records are judged against it (server_time)."""

from __future__ import annotations

from email.utils import formatdate

from mpcommit.store.clock import StoreClock


def answer(epoch: float) -> dict:
    return {"ResponseMetadata": {"HTTPHeaders": {"date": formatdate(epoch, usegmt=True)}}}


def test_a_quicker_answer_dates_the_stores_clock_better_than_a_slow_one():
    """A CI run under load learnt the clock from an answer that took about 2 s: its Date could be a second off,
    and a 0.2 s-old upload was judged older than 2 s. A quicker answer later replaces what a slower one said;
    a slower one never replaces a quicker one."""
    clock = StoreClock()
    host = 1_800_000_000.0
    # A slow answer (1.8 s) whose Date says the store is 10 s ahead: learnt, as nothing better is known.
    clock.note(answer(host + 10), sent=host, received=host + 1.8)
    assert abs(clock.offset - 9.6) < 1e-6
    # A quick one (0.1 s) says 3 s ahead: it replaces the slow one.
    clock.note(answer(host + 103), sent=host + 100, received=host + 100.1)
    assert abs(clock.offset - 3.45) < 1e-6
    # A slower one after it (0.5 s) is ignored, whatever its Date says.
    clock.note(answer(host + 250), sent=host + 200, received=host + 200.5)
    assert abs(clock.offset - 3.45) < 1e-6
    # Over 2 s is never used, even first.
    fresh = StoreClock()
    fresh.note(answer(host + 10), sent=host, received=host + 2.5)
    assert fresh.offset is None
