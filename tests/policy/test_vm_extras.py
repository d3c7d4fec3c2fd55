"""One VM's colors and replicas as SCU's tables take them (policy.scutable.VmExtras): the
two maps SRM and NCC hand over, seen as the chunk -> ChunkExtras map a merge a chunk at a
time would build, compared and diffed without that merge."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from unicache.model import ChunkId
from unicache.policy.scu.table import ChunkExtras, VmExtras

chunks = st.builds(ChunkId, st.integers(0, 6), st.integers(0, 1))
colors = st.dictionaries(chunks, st.integers(-1, 2), max_size=6)
replicas = st.dictionaries(chunks, st.frozensets(st.integers(0, 2), max_size=2), max_size=6)


def _merged(colors: dict[ChunkId, int], replicas: dict[ChunkId, frozenset[int]]):
    # the merge the round did a chunk at a time before (colors, then replicas over them)
    out = {c: ChunkExtras(color_node=n) for c, n in colors.items()}
    for c, where in replicas.items():
        out[c] = ChunkExtras(out.get(c, ChunkExtras()).color_node, where)
    return out


@given(colors, replicas)
def test_the_two_maps_read_as_the_merge_of_them_chunk_by_chunk(c, r) -> None:
    extras = VmExtras(c, r)
    merged = _merged(c, r)
    assert dict(extras.items()) == merged and len(extras) == len(merged)
    assert list(extras) == list(merged)
    assert all(chunk in extras for chunk in merged)
    assert ChunkId(99, 0) not in extras and extras.get(ChunkId(99, 0)) is None
    nothing = any(e.color_node < 0 and not e.replica_nodes for e in merged.values())
    assert extras.adds_nothing_somewhere() == nothing


@given(colors, replicas, colors, replicas)
def test_the_chunks_changed_since_are_those_whose_merged_extras_differ(c1, r1, c2, r2) -> None:
    before, now = _merged(c1, r1), _merged(c2, r2)
    differ = {c for c in before.keys() | now.keys() if before.get(c) != now.get(c)}
    changed = VmExtras(c2, r2).changed_since(VmExtras(c1, r1))
    # a chunk may be named although its merged extras are the same (colored -1 on one
    # side, absent on the other): rebuilt alike, never missed
    assert differ <= changed
    assert changed <= before.keys() | now.keys()
    assert (VmExtras(c1, r1) == VmExtras(c2, r2)) == (c1 == c2 and r1 == r2)


def test_the_same_maps_compare_equal_without_a_look_inside() -> None:
    class Untouchable(dict):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared entry by entry")

        __hash__ = None  # type: ignore[assignment]

    colored = Untouchable({ChunkId(1, 0): 2})
    assert VmExtras(colored, {}) == VmExtras(colored, {})
    assert VmExtras(colored, {}).changed_since(VmExtras(colored, {})) == set()
