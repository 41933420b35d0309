"""Part sizing, ETags, sizes and durations. Pure, no server."""

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpcommit.errors import UsageError
from mpcommit.options import WriterSettings
from mpcommit.sizing import (
    MAX_OBJECT_SIZE,
    MAX_PART_SIZE,
    MAX_PARTS,
    MIN_PART_SIZE,
    GiB,
    MiB,
    capacity,
    check_schedule_reaches_limit,
    crc32_b64,
    multipart_etag,
    part_size_for,
    plan_part_sizes,
)
from mpcommit.units import parse_duration, parse_size

DEFAULT = WriterSettings()


def test_default_schedule_reaches_5_tib_within_10000_parts():
    check_schedule_reaches_limit(initial=DEFAULT.initial_part_size, step=DEFAULT.parts_per_size_step)
    assert capacity(initial=DEFAULT.initial_part_size, step=DEFAULT.parts_per_size_step) >= MAX_OBJECT_SIZE


def test_a_schedule_that_cannot_reach_the_limit_is_refused():
    with pytest.raises(UsageError, match="5 TiB"):
        check_schedule_reaches_limit(initial=5 * MiB, step=10_000)


def test_part_sizes_are_legal_and_grow():
    sizes = [part_size_for(n, initial=8 * MiB, step=1000) for n in range(1, MAX_PARTS + 1)]
    assert all(MIN_PART_SIZE <= s <= MAX_PART_SIZE for s in sizes)
    assert sizes == sorted(sizes)
    assert sizes[0] == 8 * MiB and sizes[999] == 8 * MiB and sizes[1000] == 16 * MiB
    with pytest.raises(UsageError):
        part_size_for(MAX_PARTS + 1, initial=8 * MiB, step=1000)


def test_a_file_larger_than_10000_initial_parts_is_planned_within_the_limits():
    # 10,000 x the initial part size would need 10,001 parts at a fixed size: the schedule must grow.
    total = 10_000 * DEFAULT.initial_part_size + 1
    sizes = plan_part_sizes(total, initial=DEFAULT.initial_part_size, step=DEFAULT.parts_per_size_step)
    assert sum(sizes) == total
    assert len(sizes) <= MAX_PARTS
    assert all(s >= MIN_PART_SIZE for s in sizes[:-1])


@given(st.integers(min_value=0, max_value=MAX_OBJECT_SIZE))
def test_planned_parts_always_legal(total):
    sizes = plan_part_sizes(total, initial=DEFAULT.initial_part_size, step=DEFAULT.parts_per_size_step)
    assert sum(sizes) == total
    assert 1 <= len(sizes) <= MAX_PARTS
    assert all(MIN_PART_SIZE <= s <= MAX_PART_SIZE for s in sizes[:-1])


def test_zero_byte_file_is_one_empty_part():
    assert plan_part_sizes(0, initial=8 * MiB, step=1000) == [0]


def test_above_5_tib_is_refused():
    with pytest.raises(UsageError, match="5 TiB"):
        plan_part_sizes(MAX_OBJECT_SIZE + 1, initial=8 * MiB, step=1000)


def test_multipart_etag_matches_s3s_formula():
    parts = [b"a" * 10, b"b" * 20]
    etags = [f'"{hashlib.md5(p).hexdigest()}"' for p in parts]
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-2"
    assert multipart_etag(etags) == f'"{expected}"'


def test_crc32_is_base64_big_endian():
    assert crc32_b64(b"") == "AAAAAA=="
    assert crc32_b64(b"123456789") == "y/Q5Jg=="  # CRC-32 check value 0xCBF43926


@pytest.mark.parametrize(
    "text,value",
    [("16MB", 16_000_000), ("16MiB", 16 * MiB), ("256000000", 256_000_000), ("1.5GiB", int(1.5 * GiB)), ("5 GB", 5 * 10**9), (42, 42)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "16XB", "sixteen"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "-1h", "1y", "soon"])
def test_parse_duration_rejects(text):
    with pytest.raises(UsageError, match="not a duration"):
        parse_duration(text)


def test_writer_settings_validate():
    with pytest.raises(ValueError, match="5 MiB"):
        WriterSettings(initial_part_size=MiB)
