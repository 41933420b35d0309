"""Planning a merge upload's parts: always legal for S3, and a copyable range is never downloaded.

Sizes around the 5 MiB and 5 GiB edges are tested by planning only (no data): a simulator rebuilds the
output from the plan as intervals of sources and literal bytes and compares it with the segments.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpcommit.compaction.errors import MergePlanError
from mpcommit.compaction.parts import (
    DEFAULT_COPY_PART_SIZE,
    DEFAULT_UPLOAD_PART_SIZE,
    CopyPart,
    LiteralBytes,
    PartPlan,
    Range,
    SourceObject,
    Transform,
    UploadPart,
    arrange,
    copy_splits,
    is_copyable,
    pack_stream,
    plan_parts,
)
from mpcommit.sizing import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, GiB, MiB, TiB

EDGE_SIZES = [
    0, 1, 4, 1000, MIN_PART_SIZE - 1, MIN_PART_SIZE, MIN_PART_SIZE + 1, 2 * MIN_PART_SIZE - 1, 2 * MIN_PART_SIZE,
    DEFAULT_UPLOAD_PART_SIZE - 1, DEFAULT_UPLOAD_PART_SIZE, DEFAULT_UPLOAD_PART_SIZE + 1,
    MAX_PART_SIZE - 1, MAX_PART_SIZE, MAX_PART_SIZE + 1, 2 * MAX_PART_SIZE, 2 * MAX_PART_SIZE + 1, 3 * MAX_PART_SIZE - 7,
]


def src(name: str, size: int) -> SourceObject:
    return SourceObject(name, f'"etag-{name}"', size)


def whole(name: str, size: int) -> Range:
    return Range(src(name, size), 0, size)


# ------------------------------------------------------------------ the simulator
def normalize(items: list[tuple]) -> list[tuple]:
    """Merge adjacent intervals of one source and adjacent literal bytes; drop empty items."""
    out: list[tuple] = []
    for item in items:
        if item[0] == "R" and item[2] == item[3]:
            continue
        if item[0] == "L" and not item[1]:
            continue
        if out and item[0] == "R" and out[-1][0] == "R" and out[-1][1] == item[1] and out[-1][3] == item[2]:
            out[-1] = ("R", item[1], out[-1][2], item[3])
        elif out and item[0] == "L" and out[-1][0] == "L":
            out[-1] = ("L", out[-1][1] + item[1])
        else:
            out.append(item)
    return out


def as_items(pieces) -> list[tuple]:
    return [("R", p.source.key, p.start, p.end) if isinstance(p, Range) else ("L", p.data) for p in pieces]


def rebuild(plan: PartPlan) -> list[tuple]:
    items: list[tuple] = []
    for part in plan.parts:
        if isinstance(part, CopyPart):
            items.append(("R", part.source.key, part.start, part.end))
        else:
            items.extend(as_items(part.pieces))
    items.extend(as_items(plan.stream))
    return normalize(items)


def part_sizes(plan: PartPlan) -> list[int]:
    """The sizes of every part the upload will have (the stream packed as the executor packs it)."""
    sizes = [p.size for p in plan.parts]
    total = plan.stream_estimate
    full, rest = divmod(total, plan.upload_part_size)
    sizes += [plan.upload_part_size] * full + ([rest] if rest else [])
    return sizes


def check_legal(plan: PartPlan, segments) -> None:
    assert rebuild(plan) == normalize(as_items(segments)), "the parts do not rebuild the segments"
    assert [p.number for p in plan.parts] == list(range(1, len(plan.parts) + 1))
    sizes = part_sizes(plan)
    assert len(sizes) <= MAX_PARTS
    for i, size in enumerate(sizes):
        assert size <= MAX_PART_SIZE, f"part {i + 1} is {size} bytes, over 5 GiB"
        if i < len(sizes) - 1:
            assert size >= MIN_PART_SIZE, f"part {i + 1} of {len(sizes)} is {size} bytes, under 5 MiB"
    for part in plan.parts:
        if isinstance(part, CopyPart):
            assert MIN_PART_SIZE <= part.size <= MAX_PART_SIZE


def fetched_from_copyable(plan: PartPlan, segments) -> int:
    """Bytes of copyable segments that the plan downloads."""
    copyable = [s for s in segments if is_copyable(s)]
    fetched = [p for part in plan.parts if isinstance(part, UploadPart) for p in part.pieces if isinstance(p, Range)]
    fetched += [p for p in plan.stream if isinstance(p, Range)]
    total = 0
    for f in fetched:
        for c in copyable:
            if f.source == c.source:
                total += max(0, min(f.end, c.end) - max(f.start, c.start))
    return total


# ------------------------------------------------------------------ edges, one by one
@pytest.mark.parametrize("size", [s for s in EDGE_SIZES if s])
def test_single_source_of_every_edge_size(size: int) -> None:
    seg = [whole("a", size)]
    plan = plan_parts(seg)
    check_legal(plan, seg)
    if size >= MIN_PART_SIZE:
        assert plan.stream == () and plan.copied_bytes == size and plan.fetched_bytes == 0
        # As many copy parts as the copy part size allows (to run side by side), none above 5 GiB.
        assert len(plan.parts) == max(-(-size // MAX_PART_SIZE), size // DEFAULT_COPY_PART_SIZE)
        assert all(min(size, DEFAULT_COPY_PART_SIZE) <= p.size <= min(MAX_PART_SIZE, 2 * DEFAULT_COPY_PART_SIZE)
                   for p in plan.parts)
    else:
        assert plan.parts == () and plan.fetched_bytes == size


@pytest.mark.parametrize("a", EDGE_SIZES)
@pytest.mark.parametrize("b", EDGE_SIZES)
def test_pairs_of_edge_sizes_with_small_pieces_between(a: int, b: int) -> None:
    for middle in ([], [LiteralBytes(b"\n")], [whole("m", 100)], [whole("m", MIN_PART_SIZE - 1), LiteralBytes(b"x")]):
        segs = [whole("a", a), *middle, whole("b", b), LiteralBytes(b"footer")]
        plan = plan_parts(segs)
        check_legal(plan, segs)
        assert fetched_from_copyable(plan, segs) == plan.borrowed
        small_before_b = sum(x.length for x in segs[:-2] if not is_copyable(x))
        if not is_copyable(segs[-2]) or small_before_b == 0 or small_before_b >= MIN_PART_SIZE:
            assert plan.borrowed == 0
        else:
            # just enough to make a legal part, or all of b when what would remain could not be copied
            assert plan.borrowed in (MIN_PART_SIZE - small_before_b, b)


def test_small_piece_between_copies_borrows_just_enough() -> None:
    segs = [whole("a", 20 * MiB), LiteralBytes(b"\n"), whole("b", 20 * MiB)]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    assert plan.borrowed == MIN_PART_SIZE - 1
    kinds = [type(p).__name__ for p in plan.parts]
    assert kinds == ["CopyPart"] * 4 + ["UploadPart"] + ["CopyPart"] * 3  # 5 MiB copies; b less the borrowed bytes
    assert plan.parts[4].size == MIN_PART_SIZE


def test_borrow_takes_a_range_whole_when_the_rest_could_not_be_copied() -> None:
    segs = [whole("a", 20 * MiB), LiteralBytes(b"\n"), whole("b", 2 * MIN_PART_SIZE - 2)]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    assert plan.copied_bytes == 20 * MiB and plan.borrowed == 2 * MIN_PART_SIZE - 2


def test_arranged_units_never_download_a_copyable_range() -> None:
    big, small = 6 * MiB, 100
    units = [
        [whole("s1", small)],
        [whole("b1", big), LiteralBytes(b"\n")],  # lacks a trailing newline
        [whole("b2", big)],
        [whole("s2", small)],
        [whole("b3", 7 * GiB)],
    ]
    ordered = arrange(units)
    assert [u[0].source.key for u in ordered] == ["b2", "b3", "b1", "s1", "s2"]
    segs = [s for u in ordered for s in u] + [LiteralBytes(b"tail")]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    assert plan.borrowed == 0 and fetched_from_copyable(plan, segs) == 0
    assert plan.copied_bytes == 2 * big + 7 * GiB


def test_copy_splits() -> None:
    assert copy_splits(0, MAX_PART_SIZE) == [(0, MAX_PART_SIZE)]
    two = copy_splits(10, 10 + MAX_PART_SIZE + 1)
    assert len(two) == 2 and two[0][0] == 10 and two[-1][1] == 10 + MAX_PART_SIZE + 1
    assert all(MIN_PART_SIZE <= hi - lo <= MAX_PART_SIZE for lo, hi in two)
    with pytest.raises(MergePlanError):
        copy_splits(0, MIN_PART_SIZE - 1)
    # With a part size: as many parts as fit, nearly equal, each at least that size.
    parts = copy_splits(3, 3 + 23 * MiB, 5 * MiB)
    assert len(parts) == 4 and parts[0][0] == 3 and parts[-1][1] == 3 + 23 * MiB
    assert all(5 * MiB <= hi - lo < 6 * MiB for lo, hi in parts)
    assert [hi for _lo, hi in parts[:-1]] == [lo for lo, _hi in parts[1:]]
    assert copy_splits(0, 9 * MiB, 5 * MiB) == [(0, 9 * MiB)]
    with pytest.raises(MergePlanError):
        copy_splits(0, 9 * MiB, MIN_PART_SIZE - 1)


def test_copy_part_size_grows_before_the_part_limit() -> None:
    # 60 GiB copied in 5 MiB parts would be 12,288 parts: the copy parts grow instead.
    segs = [whole("a", 60 * GiB), whole("s", 100)]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    copies = [p for p in plan.parts if isinstance(p, CopyPart)]
    assert MAX_PARTS // 2 < len(copies) + 1 <= MAX_PARTS and plan.copied_bytes == 60 * GiB


def test_transformed_range_before_a_copy_is_refused() -> None:
    segs = [Range(src("a", 10), 0, 10, Transform.LINES), whole("b", 6 * MiB)]
    with pytest.raises(MergePlanError, match="transformed"):
        plan_parts(segs)
    # after the last copy it is fine: it is in the stream
    plan = plan_parts(segs[::-1])
    assert plan.stream == (segs[0],)


def test_object_limit_and_part_count() -> None:
    with pytest.raises(MergePlanError, match="5 TiB"):
        plan_parts([whole("a", 5 * TiB), whole("b", 1)])
    # 20,000 small pieces of almost 5 MiB: 8 MiB parts would need ~12,000 parts; the part size grows instead.
    segs = [whole(f"s{i}", MIN_PART_SIZE - 1) for i in range(20_000)]
    plan = plan_parts(segs)
    assert plan.upload_part_size > DEFAULT_UPLOAD_PART_SIZE
    check_legal(plan, segs)


def test_big_literal_is_cut_to_part_size_between_copies() -> None:
    segs = [whole("a", 6 * MiB), LiteralBytes(b"z" * (3 * DEFAULT_UPLOAD_PART_SIZE + 5)), whole("b", 6 * MiB)]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    assert all(p.size < DEFAULT_UPLOAD_PART_SIZE + MIN_PART_SIZE for p in plan.parts if isinstance(p, UploadPart))


def test_pack_stream() -> None:
    size = MIN_PART_SIZE
    assert list(pack_stream([], size)) == []
    assert list(pack_stream([b"", b"ab"], size)) == [b"ab"]
    chunks = [b"x" * (size - 1), b"yy", b"z" * size]
    bodies = list(pack_stream(chunks, size))
    assert [len(b) for b in bodies] == [size, size, 1]
    assert b"".join(bodies) == b"".join(chunks)
    with pytest.raises(MergePlanError):
        list(pack_stream([b"a"], 1024))


# ------------------------------------------------------------------ properties
seg_sizes = st.sampled_from(EDGE_SIZES) | st.integers(0, 3 * MAX_PART_SIZE)
segment = st.one_of(
    seg_sizes.map(lambda n: ("R", n)),
    st.sampled_from([0, 1, 2, 100, 4096]).map(lambda n: ("L", n)),
)


def build(specs: list[tuple[str, int]]) -> list:
    out = []
    for i, (kind, n) in enumerate(specs):
        out.append(whole(f"s{i}", n) if kind == "R" else LiteralBytes(bytes([65 + i % 26]) * n))
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(segment, min_size=0, max_size=14))
def test_any_sequence_gives_a_legal_upload(specs: list[tuple[str, int]]) -> None:
    segs = build(specs)
    plan = plan_parts(segs)
    check_legal(plan, segs)
    # Only a small run stuck between copies forces a download of copyable bytes, and never more than a part.
    last_copy = max((i for i, s in enumerate(segs) if is_copyable(s)), default=-1)
    stuck = any(not is_copyable(s) and s.length for s in segs[:last_copy])
    if not stuck:
        assert plan.borrowed == 0 and fetched_from_copyable(plan, segs) == 0
    assert fetched_from_copyable(plan, segs) == plan.borrowed


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(seg_sizes, st.booleans()), min_size=1, max_size=12))
def test_arranged_sources_download_nothing_copyable(specs: list[tuple[int, bool]]) -> None:
    """Sources as formats present them: each one, plus a newline when it lacks one. With at most one
    copyable source lacking its newline, arrange() leaves nothing small between copies."""
    units = []
    lacking = 0
    for i, (size, lacks) in enumerate(specs):
        unit = [whole(f"s{i}", size)]
        if lacks and size:
            if size >= MIN_PART_SIZE:
                if lacking:
                    continue
                lacking += 1
            unit.append(LiteralBytes(b"\n"))
        units.append(unit)
    segs = [s for u in arrange(units) for s in u] + [LiteralBytes(b"PAR1-footer")]
    plan = plan_parts(segs)
    check_legal(plan, segs)
    assert plan.borrowed == 0 and fetched_from_copyable(plan, segs) == 0
    assert plan.copied_bytes == sum(s.length for s in segs if is_copyable(s))
