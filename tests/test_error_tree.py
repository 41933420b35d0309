"""Every error mpcommit raises on purpose descends from MpcommitError, so that one ``except`` catches them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mpcommit
from mpcommit.catalog import CatalogError, TransientCatalogError
from mpcommit.errors import MpcommitError, TransientStoreError, UnsupportedVersionError, UsageError
from mpcommit.options import RetryPolicy, S3Options, WriterSettings
from mpcommit.protocol.faults import InjectedFault


def test_every_error_class_of_the_package_is_in_the_tree() -> None:
    outside = set()
    for module in pkgutil.walk_packages(mpcommit.__path__, "mpcommit."):
        if module.name.endswith("__main__"):
            continue
        try:
            loaded = importlib.import_module(module.name)
        except UnsupportedVersionError:  # the data source's PySpark classes refuse to load on PySpark 3.5, by design
            continue
        for name, value in vars(loaded).items():
            # Warnings are Exceptions too, but issued, never raised: not part of the error tree.
            if (inspect.isclass(value) and issubclass(value, Exception) and not issubclass(value, Warning)
                    and value.__module__.startswith("mpcommit.")):
                if not issubclass(value, MpcommitError):
                    outside.add(f"{value.__module__}.{name}")
    # A fault the tests inject stands for any failure at all (a crash, a bug): deliberately not one of ours.
    assert outside == {f"{InjectedFault.__module__}.InjectedFault"}


def test_a_transient_catalog_error_is_a_catalog_error_that_the_retry_boundary_retries() -> None:
    assert issubclass(TransientCatalogError, CatalogError) and issubclass(TransientCatalogError, TransientStoreError)


@pytest.mark.parametrize("make", [
    lambda: RetryPolicy(max_attempts=0),
    lambda: S3Options(sse="rot13"),
    lambda: WriterSettings(initial_part_size=1),
])
def test_settings_that_cannot_work_raise_usage_errors_which_are_value_errors(make) -> None:  # noqa: ANN001
    with pytest.raises(UsageError) as caught:
        make()
    assert isinstance(caught.value, ValueError)
