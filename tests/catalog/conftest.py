"""Fixtures for catalog tests: the Glue Data Catalog of the session's moto server (moto serves every service
on one port) and a fresh database per test; the helpers they share are in tests/support/glue.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mpcommit.catalog import GlueCatalog
from tests.support.backends import Backend
from tests.support.glue import raw_glue_client


# Session-scoped: building a boto3 client loads Glue's service model, which costs about a second.
@pytest.fixture(scope="session")
def glue_client(_moto_backend_session: Backend) -> Any:
    return raw_glue_client(_moto_backend_session.endpoint_url)


@pytest.fixture(scope="session")
def glue(_moto_backend_session: Backend) -> GlueCatalog:
    """mpcommit's Glue catalog on the moto server."""
    return GlueCatalog(_moto_backend_session.options, endpoint_url=_moto_backend_session.endpoint_url)


@pytest.fixture
def database(glue_client: Any) -> Iterator[str]:
    """A fresh Glue database (moto's state is shared by the whole test session)."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    glue_client.create_database(DatabaseInput={"Name": name})
    yield name
    try:
        glue_client.delete_database(Name=name)
    except Exception:  # noqa: BLE001 - best effort
        pass
