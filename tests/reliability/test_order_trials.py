"""The order trials' short tier (tests/reliability/order_trials.py): a few fixed seeds of every pairing, each job
in a process of its own through the S3-like network, checked against the table's commit order; and the proof
that the check can fail -- the same trial with the protocol broken on purpose is caught.

The long tier (200+ trials per pairing and server) runs on demand: ``make races``; its results are in
docs/RELIABILITY.md (Concurrency, "Randomized trials") and tests/reliability/results/. A failing trial here prints
the command that replays its seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.s3_network import S3_LIKE, S3Network
from tests.reliability.order_trials import (
    NEW_PAIRINGS,
    PAIRINGS,
    Harness,
    atomic_conditional_writes_on_moto,
    plan_trial,
    plan_zombie_overwrite,
)

#: Seeds of the short tier: two per pairing of the kills on moto, one per pairing on LocalStack (three trials at
#: a time: most of a trial is waiting on the network model and on a dead job's lease). The pairings of
#: processes that lose their job (a pause, a brownout, the order collected meanwhile) take 20-45 s each: the
#: short tier runs their forced form (plan_zombie_overwrite) with and without the fence, and one seed each of
#: the cheap ones (no-conditions, depths); the long tier runs them all.
MOTO_SEEDS = (1, 2)
LOCALSTACK_SEED = 1
AT_ONCE = 3
OLD_PAIRINGS = [p for p in PAIRINGS if p not in NEW_PAIRINGS]


def _harness(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with S3Network(backend.endpoint_url, S3_LIKE) as net:
        yield Harness(backend.endpoint_url, net.endpoint_url, backend.client,
                      workdir=tmp_path_factory.mktemp(f"order-trials-{backend.name}"), server_name=backend.name)


@pytest.fixture(scope="module")
def moto_trials(_moto_in_process_backend_session: Any,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    # moto's conditional writes are not atomic; S3's and LocalStack's are (order_trials.py says why it matters).
    # The lock patches moto's classes, so this moto runs in this process.
    with atomic_conditional_writes_on_moto():
        yield from _harness(_moto_in_process_backend_session, tmp_path_factory)


@pytest.fixture(scope="module")
def localstack_trials(_localstack_backend_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    yield from _harness(_localstack_backend_session, tmp_path_factory)


def _explain(records: list[dict[str, Any]], harness: Harness) -> str:
    lines = []
    for r in records:
        if r["ok"]:
            continue
        lines.append(f"{r['pairing']} seed {r['seed']} on {r['server']} (bucket {r.get('bucket')}, logs and end state "
                     f"under {harness.workdir}); replay: python -m tests.reliability.order_trials --server "
                     f"{r['server']} --pairing {r['pairing']} --seed {r['seed']} --trials 1")
        lines += [f"  - {v}" for v in r["violations"]]
        lines.append(f"  order {' '.join(r['order'])}; processes {r['procs']}")
    return "\n".join(lines)


# Long tier: CI runs the trials on LocalStack (test_order_trials_on_localstack), the pause and depth pairings
# and a broken protocol on moto; these six were about 70 s of a CI run.
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("pairing", OLD_PAIRINGS)
def test_order_trials_on_moto(moto_trials: Harness, pairing: str) -> None:
    records = moto_trials.run_many([plan_trial(pairing, seed) for seed in MOTO_SEEDS], parallel=AT_ONCE)
    assert all(r["ok"] for r in records), _explain(records, moto_trials)
    # Every process ended as the pairing meant: the checker saw each job's report.
    assert all(p["outcome"] != "hung" for r in records for p in r["procs"].values())


@pytest.mark.slow
def test_order_trials_of_one_table_at_several_depths_and_a_store_without_conditions(moto_trials: Harness) -> None:
    """Issue 41's depths (partition URIs, spellings, a table inside the table refused by name) and issue 36's
    store that ignores conditional headers (everything refused by name, or one writer at a time as stated)."""
    # no-conditions seed 1: every job refused by name; seed 2: one writer at a time, as stated, a job killed.
    plans = [plan_trial("no-conditions", 1), plan_trial("no-conditions", 2), plan_trial("depths", 1)]
    records = moto_trials.run_many(plans, parallel=AT_ONCE)
    assert all(r["ok"] for r in records), _explain(records, moto_trials)
    refused = [p for r in records for p in r["procs"].values() if p.get("refuse")]
    assert refused and all(p["outcome"] in ("UsageError", "InvalidUriError", "ConditionalWritesMissingError",
                                            "ok") for p in refused), refused


@pytest.mark.slow
def test_a_paused_overwrite_that_lost_its_job_deletes_nothing_and_a_missing_fence_is_caught(
        moto_trials: Harness) -> None:
    """Issue 36's first scenario as a trial: overwrite V pauses after listing its scope (append S's file in it);
    `recover` takes V over and finishes it; the appender commits until the collection clears S's place; V goes
    on. With the fence the trial passes and V says its job was finished elsewhere; with the fence switched off in
    every process (mutant ``no_fence``: Hold's checks pass, the later jobs are judged from any listing) V deletes
    S's rows and writes its job's end again -- and the checker says so."""
    fenced, broken = moto_trials.run_many([plan_zombie_overwrite(1), plan_zombie_overwrite(1, "no_fence")],
                                          parallel=2)
    assert fenced["ok"], _explain([fenced], moto_trials)
    assert fenced["procs"]["v"]["outcome"] == "ok (finished elsewhere)", fenced["procs"]["v"]
    assert len(fenced["procs"]["v"]["paused"]) == 2 and fenced["order_seen"]["collected_through"] >= 4
    # Should the mutant go uncaught, say how its processes ended and how far the collection got (it needs S's
    # place collected before V goes on: plan_zombie_overwrite starts the appender after `recover` for that).
    assert not broken["ok"], (broken["procs"], broken.get("order_seen"))
    assert any(v.startswith("the visible rows are not the order's model") and "rows missing" in v and "'s dt=0" in v
               for v in broken["violations"]), broken["violations"]


@pytest.mark.slow
def test_order_trials_on_localstack(localstack_trials: Harness) -> None:
    plans = [plan_trial(pairing, LOCALSTACK_SEED) for pairing in OLD_PAIRINGS]
    records = localstack_trials.run_many(plans, parallel=AT_ONCE)
    assert all(r["ok"] for r in records), _explain(records, localstack_trials)


@pytest.mark.slow
def test_a_broken_protocol_fails_the_trial(moto_trials: Harness) -> None:
    """The same harness and checker with the overwrite's delete step removed in every job process: the
    overwrite commits, the rows it replaces stay, and the check says so -- both the exact model and every
    serial order. (A checker that always passes would pass this.)"""
    record = moto_trials.run(plan_trial("overwrite-append", MOTO_SEEDS[0], mutant="no_replace"))
    assert record["procs"]["o"]["outcome"] == "ok"
    assert not record["ok"]
    assert any(v.startswith("the visible rows are not the order's model") and "rows too many" in v
               for v in record["violations"]), record["violations"]
    assert any(v.startswith("no serial order of the jobs that reported success") for v in record["violations"])
