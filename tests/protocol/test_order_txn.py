"""An application's versions read from a listing that went stale (issue 37, with the stream's shared order): the
commit decides "was version V committed?" from a listing taken a moment before -- the one its place was taken from,
or the one its wait ended on -- and a pause or the order's collection in between can delete a place, an end or a
checkpoint that listing names. The answer is then asked of a new listing, never taken from what is left: reading
on from the stale one missed a version the collection had moved into its checkpoint, and let it commit twice."""

from __future__ import annotations

from mpcommit import Job, Txn
from mpcommit.options import OrderSettings
from mpcommit.protocol.layout import parse_uri, table_of
from mpcommit.protocol.order import TableOrder
from mpcommit.store.s3 import S3Store
from tests.support.jobs import write_task

KEEP_ALL = OrderSettings(keep_resolved=1000)


def _commit(backend, uri: str, txn: Txn | None) -> None:  # noqa: ANN001
    job = Job.create(uri, s3=backend.options, order=KEEP_ALL, txn=txn, commit_threads=1)
    job.commit([write_task(job, 0, {"": b"row\n"})])


def test_a_version_collected_into_the_checkpoint_after_the_listing_is_still_found(moto_backend) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket("mpc-txn-stale")
    uri = f"s3://{bucket}/t"
    _commit(moto_backend, uri, Txn("app", 0))  # place 1
    for _ in range(11):
        _commit(moto_backend, uri, None)  # places 2-12, no application
    store = S3Store(moto_backend.options)
    table = table_of(parse_uri(uri))
    stale = TableOrder(store, table).view()
    assert stale.through == 0 and 1 in stale.positions

    collected = TableOrder(store, table, OrderSettings(keep_resolved=10)).collect_garbage()
    assert collected >= 1
    assert TableOrder(store, table).view().through >= 1, "place 1 went into a checkpoint"

    state = TableOrder(store, table).txn_state("app", view=stale)  # a new process: nothing cached
    assert state.newest is not None and state.newest.version == 0, state
