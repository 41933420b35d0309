"""The compaction benchmark's dataset names: ``json-mixed-Ngib`` is N times ``json-mixed-gib``."""

from __future__ import annotations

import pytest

from bench.bench_compaction import MiB, gib_scale, gib_sizes


@pytest.mark.parametrize(("name", "scale"), [("json-mixed-gib", 1), ("json-mixed-2gib", 2), ("json-mixed-3gib", 3),
                                             ("json-mixed", None), ("json-mixed-10gib", None), ("json-large", None)])
def test_gib_dataset_names(name: str, scale: int | None) -> None:
    assert gib_scale(name) == scale


def test_json_mixed_3gib_is_the_first_past_2_gib() -> None:
    """The sizes gib_dataset makes, without making the bytes: 2gib is 1.76 GiB, 3gib 2.69 GiB."""

    def size(scale: int) -> int:
        return sum(size for size, _seed in gib_sizes(scale).values())

    assert size(2) < 2 * 1024 * MiB < size(3)
    assert len(gib_sizes(3)) == 2310
