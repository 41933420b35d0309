"""The protocol where a store cannot do what S3 does (docs/STORES.md's limits): refused by name, nothing left."""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.errors import StoreError
from tests.support.checks import all_keys


def test_a_destination_below_an_objects_key_is_refused_by_name_where_the_store_cannot_hold_it(versitygw_backend):
    """versitygw keeps keys as files and folders: with an object ``t`` there, nothing can be written below ``t/``.
    The job's first write is refused, saying why and what to do, and nothing is left behind."""
    backend = versitygw_backend
    bucket = backend.new_bucket()
    backend.client.put_object(Bucket=bucket, Key="t", Body=b"a file named like the table")
    with pytest.raises(StoreError, match="ObjectParentIsFile") as info:
        Job.create(f"s3://{bucket}/t", mode="append", s3=backend.options)
    assert "choose another destination" in str(info.value) and f"s3://{bucket}/t/" in str(info.value)
    assert all_keys(backend.client, bucket) == {"t"}
