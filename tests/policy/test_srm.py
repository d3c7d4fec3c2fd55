"""SRM-buffer (srm-buffer-llc-thrashing.md §3.2, Figure 7): sequences, colors, colored zone."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.errors import StateError
from unicache.model import ChunkAccess, ChunkId, GuestReport
from unicache.policy.srm.buffer import (
    RULE_NEW_SEQUENCE,
    RULE_REFILL,
    RULE_ROTATE,
    RULE_SAME_APP,
    RULE_SAME_FILE,
    RULE_SHARED,
    T_L,
    BufferMiss,
    CloseFile,
    PageFault,
    ProcessExit,
    SequenceKey,
    SequenceKind,
    SrmDecision,
    SrmEvent,
    SrmParams,
    SrmPolicy,
    SrmState,
    page_colors,
    srm_round,
)
from unicache.policy.srm.locality import detect_weak_locality

from tests.topologies import TOPO_XEON_X5355

WEAK = frozenset({("a", 1), ("a", 2), ("b", 1)})


def miss(block: int, file_id: int = 1, blocks: int = 4 * T_L, pid: int = 7) -> BufferMiss:
    return BufferMiss("a", pid, file_id, block, blocks)


def run(
    events: list[SrmEvent], n: int = 64, t_l: int = T_L, weak: frozenset[tuple[str, int]] = WEAK
) -> SrmDecision:
    params = SrmParams(n_colors=n, t_l=t_l)
    return srm_round(SrmState.initial(params), events, params, weak)


def test_xeon_x5355_llc_has_64_page_colors() -> None:
    # §2.2: 4 MiB 16-way shared L2, 4 KiB pages -> 4 MiB / 16 / 4 KiB = 64 colors
    assert page_colors(TOPO_XEON_X5355) == 64


def test_large_file_gets_a_new_color_every_t_l_pages() -> None:
    d = run([miss(b) for b in range(3 * T_L)])
    pages = d.pages
    for start in range(0, 3 * T_L, T_L):
        assert len(set(pages[start : start + T_L])) == 1
    assert pages[0] != pages[T_L] != pages[2 * T_L]
    assert [a.rule for a in d.assignments] == [RULE_SAME_FILE] * 3
    assert RULE_NEW_SEQUENCE in d.assignments[0].reason
    assert RULE_ROTATE in d.assignments[1].reason
    assert d.assignments[0].sequence == SequenceKey("a", SequenceKind.FILE, 1)


def test_rotation_avoids_the_previous_color_even_after_a_refill_makes_it_the_fullest() -> None:
    # 2 colors, T_l = 4: 4 pages of the file in color 0 leave it 1 page; a VM fault takes
    # that page, the refill puts both lists at 5, and the next run must still move on.
    events: list[SrmEvent] = [*(miss(b) for b in range(4)), PageFault("a", 9), miss(4)]
    d = run(events, n=2, t_l=4)
    assert d.pages[:5] == (0, 0, 0, 0, 0)
    assert [(r.color, r.pages) for r in d.refills] == [(0, 5)]  # now a tie at 5 pages each
    assert d.pages[5] != d.pages[0]


def test_small_files_of_one_process_share_its_sequence() -> None:
    # three files of 10 pages each (<= T_l): same-application heuristic
    events: list[SrmEvent] = [miss(b, file_id=f, blocks=10) for f in (1, 2) for b in range(10)]
    d = run(events)
    assert len(set(d.pages)) == 1
    assert len(d.assignments) == 1
    assert d.assignments[0].rule == RULE_SAME_APP
    assert d.assignments[0].sequence == SequenceKey("a", SequenceKind.PROCESS, 7)


def test_file_of_exactly_t_l_pages_uses_the_process_sequence() -> None:
    d = run([miss(0, blocks=T_L)])
    assert d.assignments[0].rule == RULE_SAME_APP


def test_two_concurrent_sequences_get_different_colors() -> None:
    events: list[SrmEvent] = []
    for b in range(20):
        events += [miss(b, file_id=1), miss(b, file_id=2)]
    d = run(events)
    assert d.pages[0] != d.pages[1]
    assert set(d.pages[0::2]) == {d.pages[0]} and set(d.pages[1::2]) == {d.pages[1]}


def test_strong_locality_file_is_spread_not_confined() -> None:
    d = run([miss(b, file_id=9) for b in range(64)])
    assert sorted(d.pages) == list(range(64))
    assert d.assignments == ()


def test_vm_page_faults_rotate_over_all_colors() -> None:
    d = run([PageFault("a", 3) for _ in range(128)])
    assert Counter(d.pages) == {c: 2 for c in range(64)}


def test_emptied_list_refills_the_zone_to_more_than_t_l_per_color() -> None:
    # 2 colors, T_l = 4: the zone starts at 5 pages per color. The 9th VM page empties
    # color 0; the refill tops up every list to T_l + 1 (color 1 had 1 page left).
    d = run([PageFault("a", 1) for _ in range(9)], n=2, t_l=4)
    assert [(r.color, r.pages) for r in d.refills] == [(0, 5), (1, 4)]
    assert all("color 0 became empty" in r.reason for r in d.refills)
    assert d.state.free == (5, 5)


def test_no_list_with_more_than_t_l_pages_refills_before_choosing() -> None:
    # 1 color, T_l = 4: after 4 pages the only list has 1 page left, too few for a sequence
    d = run([miss(b) for b in range(5)], n=1, t_l=4)
    assert len(d.refills) == 1 and "no unmarked list" in d.refills[0].reason
    assert RULE_REFILL in d.refills[0].reason


def test_more_sequences_than_colors_share_a_color_and_say_so() -> None:
    d = run(
        [miss(0, file_id=f) for f in (1, 2, 3)], n=2, weak=frozenset({("a", 1), ("a", 2), ("a", 3)})
    )
    assert RULE_SHARED in d.assignments[2].reason


def test_closing_a_file_unmarks_its_color() -> None:
    d = run([miss(0, file_id=1), CloseFile("a", 1)], n=2)
    assert d.state.marks == (0, 0)
    assert d.state.sequence(SequenceKey("a", SequenceKind.FILE, 1)) is None


def test_process_exit_unmarks_its_sequence_and_forgets_its_vm_color() -> None:
    d = run([miss(0, blocks=10), PageFault("a", 7), ProcessExit("a", 7)], n=2)
    assert d.state.marks == (0, 0)
    assert d.state.sequences == () and d.state.vm_colors == ()


def test_state_round_trip_continues_the_sequence_across_rounds() -> None:
    params = SrmParams(n_colors=8, t_l=4)
    first = srm_round(SrmState.initial(params), [miss(b) for b in range(3)], params, WEAK)
    second = srm_round(first.state, [miss(b) for b in range(3, 6)], params)
    assert second.pages[0] == first.pages[0]  # 4th page of the first group
    assert second.pages[1] != first.pages[0]  # then a new color


def test_state_with_wrong_number_of_colors_is_refused() -> None:
    with pytest.raises(StateError, match="one free list per color"):
        srm_round(SrmState.initial(SrmParams(4)), [], SrmParams(8))


def test_start_rejects_a_state_whose_marks_do_not_match_its_sequences() -> None:
    params = SrmParams(n_colors=4, t_l=8)
    state = run([miss(0)], n=4, t_l=8).state
    SrmPolicy(params).start(state)
    broken = SrmState(state.free, (0, 0, 0, 0), state.sequences, state.vm_colors)
    with pytest.raises(StateError, match="invariant 3"):
        SrmPolicy(params).start(broken)
    with pytest.raises(StateError, match="invariant 1"):
        SrmPolicy(SrmParams(n_colors=8, t_l=8)).start(state)


def _report(vm: str, accesses: list[tuple[int, int, int]]) -> GuestReport:
    return GuestReport(vm, 1, 1.0, tuple(ChunkAccess(ChunkId(f, i), b, 1) for f, i, b in accesses))


def test_weak_locality_is_streaming_and_rereads_are_strong() -> None:
    chunk = 256 * 1024
    first = detect_weak_locality(
        [_report("a", [(1, 0, chunk), (2, 0, 2 * chunk), (3, 0, chunk)])], chunk
    )
    assert first.weak == {("a", 1), ("a", 3)}
    assert first.strong == {("a", 2)}  # read twice in one interval
    second = detect_weak_locality([_report("a", [(1, 1, chunk), (3, 0, chunk)])], chunk, first.seen)
    assert second.weak == {("a", 1)}
    assert second.strong == {("a", 3)}  # same chunk again in the next interval



def test_a_stream_crossing_the_interval_boundary_inside_a_chunk_stays_weak() -> None:
    # 1 MiB chunks read 512 KiB at a time, two reads an interval: chunk 1's halves fall in
    # two intervals, chunk 2's too; each byte is read once
    chunk, half = 1 << 20, 512 * 1024
    first = detect_weak_locality([_report("a", [(7, 0, chunk), (7, 1, half)])], chunk)
    second = detect_weak_locality(
        [_report("a", [(7, 1, half), (7, 2, half)])], chunk, first.seen
    )
    third = detect_weak_locality([_report("a", [(7, 2, half), (7, 3, half)])], chunk, second.seen)
    assert first.weak == second.weak == third.weak == {("a", 7)}


def test_a_small_file_read_whole_in_each_interval_is_reuse() -> None:
    chunk = 1 << 20
    first = detect_weak_locality([_report("a", [(9, 0, 4096)])], chunk)
    second = detect_weak_locality([_report("a", [(9, 0, 4096)])], chunk, first.seen)
    assert first.weak == {("a", 9)}
    assert second.strong == {("a", 9)}


def test_a_chunk_read_again_past_its_size_across_intervals_is_reuse() -> None:
    chunk = 1 << 20
    first = detect_weak_locality([_report("a", [(5, 0, chunk), (5, 1, chunk)])], chunk)
    second = detect_weak_locality([_report("a", [(5, 1, 4096), (5, 2, chunk)])], chunk, first.seen)
    assert second.strong == {("a", 5)}  # chunk 1 was whole before: 4 KiB more is a re-read

# --- properties ---------------------------------------------------------------------------

events_st = st.lists(
    st.one_of(
        st.builds(
            BufferMiss,
            st.sampled_from(["a", "b"]),
            st.integers(1, 4),  # pid
            st.integers(1, 3),  # file
            st.integers(0, 1000),  # block
            st.sampled_from([8, 40, 1000]),  # file size in pages
        ),
        st.builds(PageFault, st.sampled_from(["a", "b"]), st.integers(1, 4)),
        st.builds(CloseFile, st.sampled_from(["a", "b"]), st.integers(1, 3)),
        st.builds(ProcessExit, st.sampled_from(["a", "b"]), st.integers(1, 4)),
    ),
    max_size=400,
)
params_st = st.builds(SrmParams, st.integers(1, 16), st.integers(1, 32))


@settings(max_examples=60, deadline=None)
@given(events_st, params_st)
def test_no_color_list_is_ever_exhausted(events: list[SrmEvent], params: SrmParams) -> None:
    state = SrmState.initial(params)
    for ev in events:  # one event per round: check after every allocation
        state = srm_round(state, [ev], params, WEAK).state
        assert min(state.free) >= 1
        SrmPolicy(params).start(state)  # every invariant holds after every event


@settings(max_examples=60, deadline=None)
@given(events_st, params_st)
def test_each_sequence_rotates_color_every_t_l_pages(
    events: list[SrmEvent], params: SrmParams
) -> None:
    d = srm_round(SrmState.initial(params), events, params, WEAK)
    allocating = [e for e in events if isinstance(e, BufferMiss | PageFault)]
    assert len(d.pages) == len(allocating)
    pages = iter(d.pages)
    # one run per sequence life: closing a file or ending a process starts a new one
    runs: dict[SequenceKey, list[list[int]]] = {}
    for ev in events:
        if isinstance(ev, CloseFile):
            runs.setdefault(SequenceKey(ev.vm, SequenceKind.FILE, ev.file_id), []).append([])
            continue
        if isinstance(ev, ProcessExit):
            runs.setdefault(SequenceKey(ev.vm, SequenceKind.PROCESS, ev.pid), []).append([])
            continue
        color = next(pages)
        if not isinstance(ev, BufferMiss) or (ev.vm, ev.file_id) not in WEAK:
            continue
        if ev.file_blocks > params.t_l:
            key = SequenceKey(ev.vm, SequenceKind.FILE, ev.file_id)
        else:
            key = SequenceKey(ev.vm, SequenceKind.PROCESS, ev.pid)
        runs.setdefault(key, [[]])[-1].append(color)
    for colors in (run for lives in runs.values() for run in lives):
        groups = [colors[i : i + params.t_l] for i in range(0, len(colors), params.t_l)]
        assert all(len(set(g)) == 1 for g in groups)
        if params.n_colors > 1:
            assert all(a[0] != b[0] for a, b in pairwise(groups))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 32), st.integers(1, 5), events_st)
def test_vm_pages_still_use_every_color(n: int, rounds: int, noise: list[SrmEvent]) -> None:
    params = SrmParams(n_colors=n, t_l=8)
    faults: list[SrmEvent] = [PageFault("c", 1)] * (n * rounds)
    d = srm_round(SrmState.initial(params), noise + faults, params, WEAK)
    vm_pages = d.pages[len(d.pages) - len(faults) :]
    assert Counter(vm_pages) == {c: rounds for c in range(n)}


@settings(max_examples=40, deadline=None)
@given(events_st, params_st)
def test_same_inputs_give_same_decision(events: list[SrmEvent], params: SrmParams) -> None:
    a = srm_round(SrmState.initial(params), events, params, WEAK)
    b = srm_round(SrmState.initial(params), list(events), params, WEAK)
    assert a == b
