"""SRM's step-aside: streams get colors only where the co-runners' LLC counters say it pays."""

from __future__ import annotations

from unicache.model import (
    AssignColor,
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.srm.colors import ColorOptions, ColorState, colors_round
from unicache.policy.srm.gain import (
    COLOR_BACKOFF_ROUNDS,
    COLOR_STEP_ASIDE,
    CoRunnerCounters,
    GateState,
    corunner_counters,
    gate_round,
    predict_coloring,
)

CHUNK = 256 * 1024
MIB = 1 << 20
#: the SRM paper's xeon-x5355 LLC: 4 MiB, 16 ways, 4 KiB pages -> 64 colors
OPTS = ColorOptions(chunk_size=CHUNK, host_colors=64)
STREAM_VCPU, SORT_VCPU = 1, 0


def _vm() -> Vm:
    """Two vCPUs on node 0, and a memory-only node colored with one of the 64 colors."""
    nodes = (
        GuestNode(0, frozenset({0, 1}), 256 * MIB),
        GuestNode(1, frozenset(), 64 * MIB, frozenset({5})),
    )
    vcpus = tuple(Vcpu(VcpuId("vm0", i), None, frozenset({0, 1})) for i in range(2))
    return Vm("vm0", vcpus, 512 * MIB, nodes)


def _stream(seq: int, first: int = 0) -> GuestReport:
    """grep on vCPU 1: eight chunks of a tarball, each read once, whole."""
    chunks = tuple(
        ChunkAccess(ChunkId(7, i), CHUNK, 1, 0, ((STREAM_VCPU, CHUNK),))
        for i in range(first, first + 8)
    )
    return GuestReport("vm0", seq, 1.0, chunks)


def _counters(index: int, references: int, misses: int) -> CounterSample:
    return CounterSample(VcpuId("vm0", index), CounterSource.HARDWARE, instructions=10**9,
                         llc_references=references, llc_misses=misses)


def _samples(sort_refs: int, sort_misses: int) -> tuple[CounterSample, ...]:
    stream = 8 * CHUNK // 64  # every line grep reads misses
    return (_counters(SORT_VCPU, sort_refs, sort_misses), _counters(STREAM_VCPU, stream, stream))


def test_a_co_runner_that_misses_nothing_keeps_its_lines_and_the_stream_stays_uncolored() -> None:
    # SRM §2 at 256 KiB: mergesort's arrays stay in the LLC next to grep without colors;
    # coloring would cost it the lines in the stream's color
    decision = colors_round([_vm()], [_stream(0)], ColorState(), OPTS, _samples(60_000, 0))
    assert not decision.actions
    assert decision.color_nodes["vm0"] == {}
    (refusal,) = decision.refusals
    assert refusal.kind == COLOR_STEP_ASIDE
    assert "0 co-runner LLC misses saved" in refusal.reason


def test_a_co_runner_thrashed_by_the_stream_gets_the_stream_colored() -> None:
    # SRM §2 at 1.5 MiB: most of mergesort's LLC references miss while grep streams
    decision = colors_round([_vm()], [_stream(0)], ColorState(), OPTS, _samples(60_000, 40_000))
    assert any(isinstance(a, AssignColor) for a in decision.actions)
    assert set(decision.color_nodes["vm0"].values()) == {1}
    assert not decision.refusals


def test_without_llc_counters_no_stream_is_colored_and_the_log_says_why() -> None:
    no_llc = tuple(CounterSample(VcpuId("vm0", i), CounterSource.SOFTWARE, busy=1.0)
                   for i in range(2))
    decision = colors_round([_vm()], [_stream(0)], ColorState(), OPTS, no_llc)
    assert not decision.actions
    assert "no LLC counters" in decision.refusals[0].reason


def test_colors_that_save_no_misses_are_dropped_for_the_backoff_rounds() -> None:
    first = colors_round([_vm()], [_stream(0)], ColorState(), OPTS, _samples(60_000, 40_000))
    assert first.color_nodes["vm0"]
    # the next round's counters are of the interval before the colors reached the guest:
    # the watch waits
    settling = colors_round([_vm()], [_stream(1, 8)], first.state, OPTS,
                            _samples(60_000, 40_000))
    assert settling.color_nodes["vm0"] and not settling.refusals
    # colored, the co-runner misses as much as before: the colors go
    same = colors_round([_vm()], [_stream(1, 16)], settling.state, OPTS,
                        _samples(60_000, 40_000))
    assert same.color_nodes["vm0"] == {} and not same.actions
    assert "not below" in same.refusals[0].reason
    # and stay gone, whatever the prediction says, until the backoff is over
    state = same.state
    for seq in range(2, 2 + COLOR_BACKOFF_ROUNDS - 1):
        later = colors_round([_vm()], [_stream(seq, 8 * seq + 8)], state, OPTS,
                             _samples(60_000, 40_000))
        assert later.color_nodes["vm0"] == {}, seq
        state = later.state
    again = colors_round([_vm()], [_stream(99, 800)], state, OPTS, _samples(60_000, 40_000))
    assert again.color_nodes["vm0"]


def test_colors_that_do_save_misses_are_kept() -> None:
    state = colors_round([_vm()], [_stream(0)], ColorState(), OPTS, _samples(60_000, 40_000)).state
    for seq in range(1, 6):
        kept = colors_round([_vm()], [_stream(seq, 8 * seq)], state, OPTS,
                            _samples(60_000, 2_000))
        assert kept.color_nodes["vm0"] and not kept.refusals, seq
        state = kept.state


def test_the_stream_lines_come_off_the_counters_of_the_vcpu_that_read_them() -> None:
    vcpus = [VcpuId("vm0", 0), VcpuId("vm0", 1)]
    sums = corunner_counters(_samples(60_000, 1_000), vcpus, {VcpuId("vm0", 1): 8 * CHUNK // 64})
    assert sums == CoRunnerCounters(60_000, 1_000, 2 * 10**9)
    partial = (_counters(0, 10, 1), CounterSample(VcpuId("vm0", 1), CounterSource.SOFTWARE))
    assert corunner_counters(partial, vcpus, {}) is None
    assert corunner_counters((), vcpus, {}) is None


def test_the_prediction_weighs_saved_misses_against_hits_lost_in_the_colors() -> None:
    # f = 1/64: saved (63/64) M against 2 (1/64) (R - M)
    assert not predict_coloring(CoRunnerCounters(60_000, 1_000), 1 / 64).pays  # 984 < 1,844
    assert predict_coloring(CoRunnerCounters(60_000, 2_000), 1 / 64).pays  # 1,969 >= 1,813
    assert not predict_coloring(CoRunnerCounters(0, 0), 1 / 64).pays
    state, gain = gate_round(GateState(), None, 1 / 64, 1)
    assert state == GateState() and not gain.pays
