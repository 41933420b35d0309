"""The planner: Hive's rule per partition directory, bins up to the target size, deterministic."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpcommit.compaction import HIVE_SMALL_FILE_AVG, HIVE_TARGET_SIZE, MergePolicy
from mpcommit.compaction.planner import Candidate, pack, plan_bins, should_merge
from mpcommit.errors import UsageError

MB = 1_000_000


def files(partition: str, sizes: list[int], group: str = "json") -> list[Candidate]:
    return [Candidate(f"t/{partition}/f{i:04d}", s, f"e{i}", partition, group) for i, s in enumerate(sizes)]


def test_hive_defaults() -> None:
    policy = MergePolicy()
    assert (policy.small_file_avg, policy.target_size) == (HIVE_SMALL_FILE_AVG, HIVE_TARGET_SIZE) == (16_000_000, 256_000_000)
    assert MergePolicy.parse(small_file_avg="16MB", target_size="1MiB") == MergePolicy(16_000_000, 1024 * 1024)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(UsageError):
            MergePolicy(small_file_avg=bad)  # type: ignore[arg-type]


def test_average_threshold_is_strict_and_per_partition() -> None:
    policy = MergePolicy(small_file_avg=10 * MB, target_size=100 * MB)
    assert should_merge([10 * MB - 1, 10 * MB - 1], policy)
    assert not should_merge([10 * MB, 10 * MB], policy)  # average equal to the threshold: not small
    assert not should_merge([1], policy)  # one file: nothing to merge
    small = files("dt=1", [1 * MB] * 5)
    big = files("dt=2", [1 * MB, 50 * MB, 50 * MB])  # average 33 MB: left alone, though it has a small file
    bins = plan_bins(small + big, policy)
    assert [b.partition for b in bins] == ["dt=1"]
    assert bins[0].keys == tuple(f.key for f in small)


def test_never_across_partitions_or_groups() -> None:
    policy = MergePolicy(small_file_avg=10 * MB, target_size=100 * MB)
    cands = files("a=1", [MB] * 3) + files("a=2", [MB] * 3) + files("a=1", [MB] * 3, group="csv")
    # same keys in group csv would collide: rename them
    cands = cands[:6] + [Candidate(c.key + ".csv", c.size, c.etag, c.partition, "csv") for c in cands[6:]]
    bins = plan_bins(cands, policy)
    assert len(bins) == 3
    for b in bins:
        assert len({c.partition for c in b.sources}) == 1 and len({c.group for c in b.sources}) == 1
        assert b.partition == b.sources[0].partition and b.group == b.sources[0].group


def test_bins_up_to_target_and_big_files_left_out() -> None:
    policy = MergePolicy(small_file_avg=30 * MB, target_size=10 * MB)
    cands = files("", [6 * MB, 5 * MB, 4 * MB, 3 * MB, 2 * MB, 10 * MB, 40 * MB] + [MB // 2] * 4)
    bins = plan_bins(cands, policy)
    merged = [c.key for b in bins for c in b.sources]
    assert len(merged) == len(set(merged))
    assert "t//f0005" not in merged and "t//f0006" not in merged  # >= target: big enough as they are
    assert all(b.size <= 10 * MB for b in bins)
    assert all(len(b.sources) >= 2 for b in bins)


def test_mergeable_flag_counts_towards_average_only() -> None:
    policy = MergePolicy(small_file_avg=10 * MB, target_size=100 * MB)
    cands = files("", [MB] * 4) + [Candidate("t/upload", 30 * MB, "", "", "json", mergeable=False)]
    (b,) = plan_bins(cands, policy)
    assert "t/upload" not in b.keys and len(b.sources) == 4
    # a large pending file pushes the average over the threshold: nothing merged
    cands = files("", [MB] * 2) + [Candidate("t/upload", 60 * MB, "", "", "json", mergeable=False)]
    assert plan_bins(cands, policy) == []


def test_max_files_per_bin() -> None:
    bins = pack(files("", [1] * 10), 1000, max_files=3)
    assert [len(b) for b in bins] == [3, 3, 3]  # the tenth file alone is dropped
    with pytest.raises(UsageError):
        pack([], 10, max_files=1)


def test_duplicate_keys_refused() -> None:
    c = files("", [1, 1])
    with pytest.raises(UsageError):
        plan_bins(c + c[:1], MergePolicy())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 120)), min_size=0, max_size=60), st.integers(1, 80),
       st.integers(10, 100), st.randoms(use_true_random=False))
def test_properties(specs: list[tuple[int, int]], avg: int, target: int, rnd: random.Random) -> None:
    cands = [Candidate(f"k{i:03d}", size, "", f"p={p}", "g") for i, (p, size) in enumerate(specs)]
    policy = MergePolicy(small_file_avg=avg, target_size=target)
    bins = plan_bins(cands, policy)
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    assert plan_bins(shuffled, policy) == bins, "the plan depends on the listing order"
    seen: set[str] = set()
    for b in bins:
        assert 2 <= len(b.sources) and b.size <= target
        assert list(b.keys) == sorted(b.keys)
        assert not seen & set(b.keys)
        seen |= set(b.keys)
        members = [c.size for c in cands if c.partition == b.partition]
        assert len(members) > 1 and sum(members) < avg * len(members)
        assert all(c.size < target and c.partition == b.partition for c in b.sources)
    order = [(b.partition, b.group, b.sources[0].key) for b in bins]
    assert order == sorted(order)


def test_the_reason_nothing_is_merged_names_the_rule_that_failed() -> None:
    from mpcommit.compaction.planner import explain_no_bins

    policy = MergePolicy(small_file_avg=100, target_size=150)
    assert explain_no_bins([], policy) == "no data files of a known format"
    one_each = [Candidate("p=1/a", 10, partition="p=1"), Candidate("p=2/a", 10, partition="p=2")]
    assert explain_no_bins(one_each, policy) == "no partition holds more than one file of one format"
    large = [Candidate(f"p=1/{i}", 500, partition="p=1") for i in range(3)]
    assert "no partition's average file is under the small-file threshold of 100 bytes" == explain_no_bins(large, policy)
    # Average 90 (< 100): small, but 80 + 80 > 150 and the 110-byte one pairs with nothing.
    unpaired = [Candidate("p=1/a", 80, partition="p=1"), Candidate("p=1/b", 80, partition="p=1"),
                Candidate("p=1/c", 110, partition="p=1")]
    assert plan_bins(unpaired, policy) == []
    assert explain_no_bins(unpaired, policy).startswith("1 partition(s) average under the small-file threshold")
    assert "within the target size of 150 bytes: raise the target size" in explain_no_bins(unpaired, policy)
