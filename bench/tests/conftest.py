"""Tests of the benchmarks' own machinery (statistics, reports, the latency model, the S3-like network). They run
in `make test` (pyproject's testpaths) beside tests/, which never imports bench/; what they need of a server is
moto's, started here from the test infrastructure in tests/support."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.backends import Backend, make_backend
from tests.support.servers import start_moto


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[Backend]:
    """moto's S3 server in this process, as a test backend."""
    handle = start_moto()
    try:
        yield make_backend("moto", handle)
    finally:
        handle.stop()
