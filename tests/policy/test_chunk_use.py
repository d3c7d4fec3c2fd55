"""A chunk's use counts (``f.use``, MFC §4.2) kept as flat pairs behave as the dict they
replace, and cost what issue #19's memory bound allows."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st
from unicache.model import ChunkId
from unicache.policy.scu.mfc_state import NO_USE, ChunkState, use_pairs

# ("use", unit): one more use from that unit; ("age", k): k agings (each halving)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("use"), st.integers(0, 7)),
        st.tuples(st.just("age"), st.integers(0, 3)),
    ),
    max_size=80,
)


@given(steps)
def test_use_pairs_count_and_age_as_a_dict_of_units(seq: list[tuple[str, int]]) -> None:
    state = ChunkState(4096)
    model: dict[int, int] = {}
    agings = 0
    for kind, n in seq:
        if kind == "use":
            state.add_use(n)
            model[n] = model.get(n, 0) + 1
        else:
            agings += n
            state = state.aged_to(agings)
            for _ in range(n):  # Figure 2 lines 45-47, one pass per aging
                model = {u: c // 2 for u, c in model.items() if c // 2}
        assert state.use == model  # same counts, and the same order of units
        assert all(state.use_of(u) == model.get(u, 0) for u in range(8))
        assert state.total_use() == sum(model.values())
        assert bool(state.use_pairs) == bool(model)
        assert state.copy().use_pairs is state.use_pairs  # immutable, shared by copies
    assert ChunkState(4096, use_pairs=use_pairs(model)).use == model


def test_a_chunk_used_from_one_unit_costs_under_256_bytes_with_its_id() -> None:
    # issue #19: at most 256 bytes per tracked chunk at a million chunks. On 64-bit
    # CPython 3.11: state 80, pairs 56, id 48 and its 64-bit file id 36 = 220 (the dict
    # the pairs replace cost 224 alone); the store's per-VM map slot comes on top
    state = ChunkState(256 * 1024)
    state.add_use(3)
    chunk = ChunkId(0xFEED_FACE_CAFE_BEEF, 7)
    size = sum(sys.getsizeof(x) for x in (state, state.use_pairs, chunk, chunk.file_id))
    assert state.use_pairs != NO_USE
    assert size <= 224
