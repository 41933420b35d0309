"""A micro-batch's commit reads each record of the table's commit order once (issue 37: the stream's commit p50
was 1.15-1.22x the progress record's, because the query's newest version was looked up before the job's place and
again, from a new TableOrder, inside the job's commit).

The sink runs in this process as Spark runs it (tests/spark/test_stream_replay_trials.py's Query); every request
of one micro-batch's commit is recorded at the store's one funnel.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from mpcommit.protocol.layout import ORDER_ROOT
from mpcommit.store.s3 import store_for
from tests.spark.test_stream_replay_trials import Query


def _recorded(monkeypatch: pytest.MonkeyPatch, store) -> list[tuple[str, str]]:  # noqa: ANN001
    requests: list[tuple[str, str]] = []
    call = store._call

    def recorded(operation, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        requests.append((operation, kwargs.get("key", kwargs.get("prefix", ""))))
        return call(operation, *args, **kwargs)

    monkeypatch.setattr(store, "_call", recorded)
    return requests


def test_a_micro_batch_commit_reads_each_order_record_once(moto_backend, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket("mpc-stream-reads")
    query = Query(moto_backend, bucket, str(tmp_path / "checkpoint"), random.Random(37))
    for batch_id in range(4):
        run = query.new_run()
        run.commit(query.attempt(run, batch_id), batch_id)
    run = query.new_run()  # a restarted query: a new sink, the order read afresh
    messages = query.attempt(run, 4)
    requests = _recorded(monkeypatch, store_for(run.planned.request.settings.s3))

    run.commit(messages, 4)

    order_gets = Counter(k for op, k in requests if op == "get_object" and f"/{ORDER_ROOT}" in f"/{k}")
    assert order_gets and max(order_gets.values()) == 1, order_gets
    # The order is listed to look up the ledger and to take the place; the wait for the earlier places of the
    # query's application and the ledger's decision after the place start from the listing the place was taken from.
    listings = [k for op, k in requests if op == "list_objects_v2" and k.endswith(ORDER_ROOT)]
    assert len(listings) == 2, requests
