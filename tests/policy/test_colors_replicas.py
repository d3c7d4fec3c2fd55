"""SRM-buffer and NCC over guest reports, alone and inside the whole policy round."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import (
    AssignColor,
    ChunkAccess,
    ChunkId,
    DropReplica,
    GuestNode,
    GuestReport,
    NodeMemory,
    Observation,
    PublishPlacement,
    Replicate,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.ncc.cache import NCC_THRESHOLD, RULE_RECLAIM, NccParams, Reclaim
from unicache.policy.ncc.memory import replica_bytes, shrink_reclaims
from unicache.policy.ncc.replicas import NCC_BOUNDED, ReplicaState, replicas_round
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.srm import buffer as srm
from unicache.policy.srm.colors import SRM_BOUNDED, ColorOptions, ColorState, colors_round
from unicache.topology import Unify

from tests.policy.conftest import sample
from tests.topologies import TOPO_OPTERON_16

CHUNK = 256 * 1024  # opteron-16: half its 512 KiB L2
MIB = 1 << 20
OPTS = ColorOptions(chunk_size=CHUNK, step_aside=False)  # T_l = 256 pages = 1 MiB = 4 chunks


def _vm(name: str = "vm0", colored: int = 2, cpu_nodes: int = 1) -> Vm:
    nodes = [GuestNode(n, frozenset({n}), 256 * MIB) for n in range(cpu_nodes)]
    nodes += [
        GuestNode(cpu_nodes + c, frozenset(), 64 * MIB, frozenset(range(c * 8, c * 8 + 8)))
        for c in range(colored)
    ]
    vcpus = tuple(Vcpu(VcpuId(name, i), None, frozenset(range(16))) for i in range(cpu_nodes))
    return Vm(name, vcpus, 512 * MIB, tuple(nodes))


def _stream(vm: str, file_id: int, chunks: range, seq: int = 0) -> GuestReport:
    """Each chunk read once, whole: a streaming reader."""
    return GuestReport(
        vm, seq, 1.0,
        tuple(ChunkAccess(ChunkId(file_id, i), CHUNK, 1, 0, ((0, CHUNK),)) for i in chunks),
    )


def test_streaming_file_runs_of_t_l_pages_rotate_over_the_colored_nodes() -> None:
    vm = _vm(colored=2)
    decision = colors_round([vm], [_stream("vm0", 7, range(8))], ColorState(), OPTS)
    nodes = decision.color_nodes["vm0"]
    # chunks 0-3 (T_l pages) in one color, 4-7 in the other; then 16 chunks colored ahead:
    # what the stream read in this interval, for the two intervals of host-guest lag
    run0 = {nodes[ChunkId(7, i)] for i in range(4)}
    run1 = {nodes[ChunkId(7, i)] for i in range(4, 8)}
    assert len(run0) == len(run1) == 1 and run0 != run1
    assert run0 | run1 == {1, 2}
    assert all(ChunkId(7, i) in nodes for i in range(8, 24))
    assert ChunkId(7, 24) not in nodes
    runs = [a for a in decision.actions if isinstance(a, AssignColor)]
    assert [(a.first_chunk, a.last_chunk) for a in runs][:4] == [(0, 3), (4, 7), (8, 11), (12, 15)]
    assert len(runs) == 6
    assert all(a.rule == f"{srm.RULE_SAME_FILE}, {srm.RULE_ROTATE}" for a in runs)
    # the next round goes on with the stream where the colored runs end: a new T_l run
    more = colors_round([vm], [_stream("vm0", 7, range(24, 26), seq=1)], decision.state, OPTS)
    assert more.actions[0].first_chunk == 24 and srm.RULE_ROTATE in more.actions[0].rule
    assert more.actions[0].color != runs[-1].color


def test_a_slow_stream_is_colored_at_least_one_run_ahead() -> None:
    decision = colors_round([_vm()], [_stream("vm0", 7, range(1))], ColorState(), OPTS)
    nodes = decision.color_nodes["vm0"]
    assert sorted(c.index for c in nodes) == [0, 1, 2, 3, 4]  # T_l = 4 chunks ahead
    # chunk 4 starts the second T_l run; the chunks 1-3 go on in chunk 0's color
    more = colors_round([_vm()], [_stream("vm0", 7, range(1, 3), seq=1)], decision.state, OPTS)
    first = more.actions[0]
    assert (first.first_chunk, first.rule) == (5, srm.RULE_SAME_FILE)
    assert first.color == nodes[ChunkId(7, 4)] - 1


def test_a_stream_that_stops_releases_its_color() -> None:
    vm = _vm()
    first = colors_round([vm], [_stream("vm0", 7, range(4))], ColorState(), OPTS)
    assert [s.key.ident for s in first.state.vms[0].srm.sequences] == [7]
    later = colors_round([vm], [_stream("vm0", 8, range(4), seq=1)], first.state, OPTS)
    assert [s.key.ident for s in later.state.vms[0].srm.sequences] == [8]
    assert sum(later.state.vms[0].srm.marks) == 1


def test_a_guest_reporting_many_streams_costs_bounded_work() -> None:
    vm = _vm()
    opts = ColorOptions(chunk_size=CHUNK, max_colored_chunks=256, step_aside=False)
    many = GuestReport("vm0", 0, 1.0, tuple(
        ChunkAccess(ChunkId(f, 0), CHUNK, 1, 0, ((0, CHUNK),)) for f in range(1, 5000)
    ))
    decision = colors_round([vm], [many], ColorState(), opts)
    assert len(decision.color_nodes["vm0"]) <= 256
    assert sum(a.last_chunk - a.first_chunk + 1 for a in decision.actions) <= 256


def test_ncc_work_and_memory_per_vm_are_bounded() -> None:
    from unicache.policy.ncc import replicas

    vm = _vm(colored=0, cpu_nodes=2)
    state = ReplicaState()
    for seq, first in enumerate((1, 20_001)):  # each round: 20000 chunks read once remotely
        accesses = tuple(
            ChunkAccess(ChunkId(f, 0), CHUNK, 1, 0, ((1, CHUNK),), home_node=0,
                        node_reads=((1, 1),))
            for f in range(first, first + 20_000)
        )
        report = GuestReport("vm0", seq, 1.0, accesses, guest_nodes=(0, 1))
        clock = state.vms[0].ncc.clock if state.vms else 0
        state = replicas_round([vm], [report], state, NccParams()).state
        ncc_state = state.vms[0].ncc
        assert ncc_state.clock - clock <= replicas.MAX_READS_PER_ROUND + 1  # reads + one Age
        assert len(ncc_state.counters) <= replicas.MAX_COUNTERS_PER_VM
    assert len(state.vms[0].ncc.counters) == replicas.MAX_COUNTERS_PER_VM


def test_a_reread_file_loses_its_colors() -> None:
    vm = _vm()
    first = colors_round([vm], [_stream("vm0", 7, range(8))], ColorState(), OPTS)
    again = colors_round([vm], [_stream("vm0", 7, range(8), seq=1)], first.state, OPTS)
    assert ChunkId(7, 0) in first.color_nodes["vm0"]
    assert not again.color_nodes["vm0"]  # read in two intervals: strong locality (§4.5)


def test_vms_without_colored_nodes_get_no_colors() -> None:
    vm = _vm(colored=0)
    decision = colors_round([vm], [_stream("vm0", 7, range(8))], ColorState(), OPTS)
    assert decision.color_nodes == {} and decision.actions == ()


@settings(max_examples=40, deadline=None)
@given(
    files=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60), st.integers(1, 40)),
                   min_size=1, max_size=12),
    colored=st.integers(1, 4),
)
def test_colors_stay_on_colored_nodes_and_the_plan_is_bounded(
    files: list[tuple[int, int, int]], colored: int
) -> None:
    vm = _vm(colored=colored)
    opts = ColorOptions(chunk_size=CHUNK, max_colored_chunks=64, step_aside=False)
    allowed = {n.node for n in vm.colored_nodes()}
    state = ColorState()
    for seq, (fid, start, length) in enumerate(files):
        decision = colors_round([vm], [_stream("vm0", fid, range(start, start + length), seq)],
                                state, opts)
        state = decision.state
        nodes = decision.color_nodes["vm0"]
        assert set(nodes.values()) <= allowed
        assert len(nodes) <= 64
        assert all(a.color_node in allowed for a in decision.actions)
        srm.SrmPolicy(srm.SrmParams(colored, opts.t_l_chunks)).start(state.vms[0].srm)


def _remote(vm: str, chunk: ChunkId, home: int, reader: int, reads: int, writes: int = 0,
            seq: int = 0, memory: tuple[NodeMemory, ...] = ()) -> GuestReport:
    access = ChunkAccess(chunk, CHUNK * reads, reads, writes, ((reader, CHUNK * reads),),
                         home_node=home, node_reads=((reader, reads),))
    return GuestReport(vm, seq, 1.0, (access,), guest_nodes=(0, 1), node_memory=memory)


def test_second_remote_read_from_one_node_makes_a_replica_there() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    chunk = ChunkId(9, 3)
    once = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 1)], ReplicaState(), NccParams())
    assert not once.actions
    twice = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 1, seq=1)], once.state, NccParams())
    assert NCC_THRESHOLD == 2
    assert [(type(a), a.node) for a in twice.actions] == [(Replicate, 1)]
    assert twice.replica_nodes["vm0"][chunk] == {1}


def test_a_write_drops_every_replica_and_a_modified_file_too() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    chunk = ChunkId(9, 3)
    made = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 2)], ReplicaState(), NccParams())
    assert made.replica_nodes["vm0"][chunk] == {1}
    written = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 0, writes=1, seq=1)],
                             made.state, NccParams())
    assert [type(a) for a in written.actions] == [DropReplica]
    assert chunk not in written.replica_nodes["vm0"]
    remade = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 2, seq=2)], written.state,
                            NccParams())
    modified = GuestReport("vm0", 3, 1.0, (), guest_nodes=(0, 1), modified_files=frozenset({9}))
    dropped = replicas_round([vm], [modified], remade.state, NccParams())
    assert [(type(a), a.chunk) for a in dropped.actions] == [(DropReplica, chunk)]


def test_no_replicas_on_a_node_short_of_memory() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    tight = (NodeMemory(0, MIB * 100, MIB * 200), NodeMemory(1, MIB, MIB * 200))
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 0, 1, 4, memory=tight)],
                              ReplicaState(), NccParams())
    assert not decision.actions


def test_a_tight_node_gives_back_two_thirds_of_what_it_lacks_in_mq_order() -> None:
    """The agent's 2:1 shrink, mirrored by the host: a node below the floor drops
    ceil(2n/3) of the n replicas it lacks, least used first; the other node keeps its own."""
    vm = _vm(colored=0, cpu_nodes=2)
    state = ReplicaState()
    chunks = [ChunkId(9, i) for i in range(6)]
    for seq, chunk in enumerate(chunks):  # replicas of chunks 0..5 on node 1, and 0 on node 0
        state = replicas_round([vm], [_remote("vm0", chunk, 0, 1, 2, seq=seq)], state,
                               NccParams(), chunk_size=CHUNK).state
    state = replicas_round([vm], [_remote("vm0", ChunkId(8, 0), 1, 0, 2, seq=6)], state,
                           NccParams(), chunk_size=CHUNK).state
    hot = _remote("vm0", chunks[0], 0, 1, 4, seq=7)  # chunk 0 is hit again: MQ keeps it
    unit = replica_bytes(CHUNK)
    total = 100 * unit
    lacking = 3 * unit  # three replicas' worth below the 10 % floor
    tight = (NodeMemory(0, total // 2, total), NodeMemory(1, total // 10 - lacking, total))
    tight_report = GuestReport("vm0", 8, 1.0, (), guest_nodes=(0, 1), node_memory=tight)
    decision = replicas_round([vm], [hot, tight_report], state, NccParams(), chunk_size=CHUNK)
    dropped = [a for a in decision.actions if isinstance(a, DropReplica)]
    assert [(a.node, a.chunk) for a in dropped] == [(1, chunks[1]), (1, chunks[2])]
    assert all(a.rule == RULE_RECLAIM for a in dropped)
    assert decision.replica_nodes["vm0"][chunks[0]] == {1}
    assert decision.replica_nodes["vm0"][ChunkId(8, 0)] == {0}
    assert shrink_reclaims(tight, NccParams(), CHUNK) == (Reclaim(1, 3),)
    # a round without a report shrinks nothing more (the last figure is not re-applied)
    silent = replicas_round([vm], [], decision.state, NccParams(), chunk_size=CHUNK)
    assert not silent.actions
    # with memory back, nothing more is dropped
    calm = (NodeMemory(0, total // 2, total), NodeMemory(1, total // 2, total))
    again = replicas_round([vm], [GuestReport("vm0", 9, 1.0, (), guest_nodes=(0, 1),
                                              node_memory=calm)],
                           decision.state, NccParams(), chunk_size=CHUNK)
    assert not again.actions


def test_reads_from_the_home_node_never_replicate() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 1, 1, 4)], ReplicaState(),
                              NccParams())
    assert not decision.actions


def test_chunks_on_a_colored_node_are_never_replicated() -> None:
    vm = _vm(colored=1, cpu_nodes=2)  # node 2 is colored
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 2, 1, 4)], ReplicaState(),
                              NccParams())
    assert not decision.actions


def test_round_publishes_color_and_replica_nodes_in_the_vms_table() -> None:
    vm = _vm(colored=2, cpu_nodes=2)
    # the mechanism: these samples carry no LLC counters, so SRM would step aside
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, color_step_aside=False)
    state = RoundState()
    remote = _remote("vm0", ChunkId(5, 0), 0, 1, 2)
    reports = (_stream("vm0", 7, range(4)), remote)
    samples = tuple(sample("vm0", v.id.index, 10**6) for v in vm.vcpus)
    decision, state = policy.decide(Observation(0, (vm,), samples, reports), state)
    tables = [a.table for a in decision.actions if isinstance(a, PublishPlacement)]
    assert len(tables) == 1
    entries = {e.chunk: e for e in tables[0].entries}
    assert entries[ChunkId(7, 0)].color_node in {2, 3}
    assert entries[ChunkId(7, 4)].color_node in {2, 3}  # colored ahead of the stream
    assert entries[ChunkId(5, 0)].replica_nodes == {1}
    kinds = [type(a) for a in decision.actions]
    assert AssignColor in kinds and Replicate in kinds
    assert kinds.index(Replicate) < kinds.index(PublishPlacement)


def test_a_guest_that_claims_nodes_its_vm_does_not_have_gets_no_replicas() -> None:
    # the backend built one node; the guest's reports name two (issue #12)
    vm = _vm(colored=0, cpu_nodes=1)
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 0, 1, 4)], ReplicaState(),
                              NccParams())
    assert not decision.actions and not decision.state.vms


def test_reads_naming_nodes_the_vm_lacks_are_dropped_and_counted() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 0, 7, 4)], ReplicaState(),
                              NccParams())
    assert not decision.actions
    (refusal,) = decision.refusals
    assert refusal.kind == NCC_BOUNDED and "4 read events" in refusal.reason


def test_a_flood_of_writes_after_a_flood_of_remote_reads_costs_what_ncc_holds() -> None:
    # issue #12: 16 reports of remote reads (16k counters), then writes of every chunk;
    # each write drops what its chunk holds, found by index, not by a scan of every counter
    vm = _vm(colored=0, cpu_nodes=2)
    state = ReplicaState()
    for seq in range(16):
        reads = tuple(
            ChunkAccess(ChunkId(seq, i), CHUNK, 1, 0, ((1, CHUNK),), 0, ((1, 1),))
            for i in range(1024)
        )
        state = replicas_round([vm], [GuestReport("vm0", seq, 1.0, reads)], state,
                               NccParams()).state
    vm_state = state.of("vm0")
    assert vm_state is not None and len(vm_state.ncc.counters) == 16 * 1024
    writes = tuple(
        ChunkAccess(ChunkId(f, i), CHUNK, 0, 1, ((1, CHUNK),)) for f in range(16)
        for i in range(1024)
    )
    state = replicas_round([vm], [GuestReport("vm0", 16, 1.0, writes)], state,
                           NccParams()).state
    vm_state = state.of("vm0")
    assert vm_state is not None and not vm_state.ncc.counters


def test_ncc_counts_every_drop_of_guest_input_in_one_refusal() -> None:
    # issue #12: reads over the budget, counters trimmed and writes NCC cannot replay were
    # dropped; each is counted, in one NCC_BOUNDED line per VM and round
    from unicache.policy.ncc.replicas import MAX_COUNTERS_PER_VM, MAX_READS_PER_ROUND

    vm = _vm(colored=0, cpu_nodes=2)
    state = ReplicaState()
    reasons = []
    for seq, first in enumerate((1, 20_001)):  # each round: 20000 chunks read once remotely
        accesses = tuple(
            ChunkAccess(ChunkId(f, 0), CHUNK, 1, 0, ((1, CHUNK),), home_node=0,
                        node_reads=((1, 1),))
            for f in range(first, first + 20_000)
        )
        # and writes of five chunks NCC never saw, and a file it never saw modified
        accesses += tuple(ChunkAccess(ChunkId(90_000 + i, 0), 0, 0, 1) for i in range(5))
        report = GuestReport("vm0", seq, 1.0, accesses, modified_files=frozenset({99_999}))
        decision = replicas_round([vm], [report], state, NccParams())
        state = decision.state
        (refusal,) = decision.refusals
        assert refusal.kind == NCC_BOUNDED
        reasons.append(refusal.reason)
    assert f"{20_000 - MAX_READS_PER_ROUND} read events" in reasons[0]
    assert "counters" not in reasons[0]
    # the second round's reads double the counters: the least counted half is trimmed
    assert f"{2 * MAX_READS_PER_ROUND - MAX_COUNTERS_PER_VM} remote-read counters" in reasons[1]
    assert all("6 writes not replayed" in r for r in reasons)


def test_ncc_logs_no_refusal_when_it_drops_nothing() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    decision = replicas_round([vm], [_remote("vm0", ChunkId(9, 3), 0, 1, 2)], ReplicaState(),
                              NccParams())
    assert decision.actions and not decision.refusals


def test_chunks_srm_leaves_uncolored_or_forgets_over_its_bound_are_counted() -> None:
    vm = _vm()
    opts = ColorOptions(chunk_size=CHUNK, max_colored_chunks=256, step_aside=False)

    def streams(seq: int, first: int) -> GuestReport:
        return GuestReport("vm0", seq, 1.0, tuple(
            ChunkAccess(ChunkId(f, 0), CHUNK, 1, 0, ((0, CHUNK),))
            for f in range(first, first + 1000)
        ))

    one = colors_round([vm], [streams(0, 1)], ColorState(), opts)
    (refusal,) = one.refusals
    assert refusal.kind == SRM_BOUNDED
    # each file's chunk and the T_l run (4 chunks) ahead of it: 5,000 wanted, 256 colored
    assert "4744 chunks of its streams left uncolored" in refusal.reason
    assert "forgotten" not in refusal.reason
    assert len(one.color_nodes["vm0"]) == 256
    two = colors_round([vm], [streams(1, 5001)], one.state, opts)
    (refusal,) = two.refusals
    assert "256 colored chunks forgotten, the oldest" in refusal.reason
    quiet = colors_round([vm], [_stream("vm0", 7, range(8))], ColorState(), opts)
    assert quiet.refusals == ()
