"""NCC's gain prediction and step-aside (policy/ncc/gain.py) alone and in replicas_round."""

from __future__ import annotations

import math
from dataclasses import replace

from unicache.model import ChunkAccess, ChunkId, DropReplica, GuestNode, GuestReport, Replicate, Vm
from unicache.policy.ncc.cache import (
    NccParams,
    NccState,
    Read,
    Replica,
    ReplicaKey,
    Retired,
    Write,
    ncc_round,
)
from unicache.policy.ncc.gain import (
    MIN_RETIRED,
    NCC_NO_GAIN,
    PROBE_ROUNDS,
    GainVerdict,
    NodeLedger,
    judge,
    predict,
    remote_chunks,
    replica_cost_for,
)
from unicache.policy.ncc.replicas import ReplicaDecision, ReplicaState, replicas_round

from tests.topologies import TOPO_CORE_I7_860, TOPO_OPTERON_242_2NODE

CHUNK = 512 * 1024
MIB = 1 << 20
COST = replica_cost_for(TOPO_OPTERON_242_2NODE, CHUNK)
VM = Vm("vm0", (), 512 * MIB, tuple(GuestNode(n, frozenset({n}), 256 * MIB) for n in (0, 1)))


def _reads(chunks: range, reads: int = 1, reader: int = 1, seq: int = 0) -> GuestReport:
    """Node ``reader`` reads each chunk of file 7 (its primary on node 0) ``reads`` times."""
    return GuestReport(
        "vm0",
        seq,
        1.0,
        tuple(
            ChunkAccess(ChunkId(7, i), CHUNK * reads, reads, 0, home_node=0,
                        node_reads=((reader, reads),))
            for i in chunks
        ),
        guest_nodes=(0, 1),
    )


def _churn(seq: int) -> GuestReport:
    """Node 1 reads 4 new chunks twice (replicated), and a writer rewrites the 4 read the
    round before (their replicas dropped unread): few enough for the replicas to hold."""
    reads = _reads(range(4 * seq, 4 * seq + 4), reads=2, seq=seq)
    writes = tuple(
        ChunkAccess(ChunkId(7, i), 0, 0, 1, home_node=0) for i in range(4 * seq - 4, 4 * seq)
    )
    return replace(reads, chunks=reads.chunks + writes)


def _round(report: GuestReport, state: ReplicaState, capacity: int = 4) -> ReplicaDecision:
    params = NccParams(max_replicas_per_node=capacity)
    return replicas_round([VM], [report], state, params, cost=COST)


def _made(decision: ReplicaDecision) -> int:
    return sum(isinstance(a, Replicate) for a in decision.actions)


def _no_gain(decision: ReplicaDecision) -> list[str]:
    return [r.reason for r in decision.refusals if r.kind == NCC_NO_GAIN]


def test_break_even_comes_from_the_topology() -> None:
    # opteron-242-2node: remote 166 cycles, local 112: a read saves 0.48 of a local one,
    # the copy costs one local write, times the margin of 2
    assert COST.break_even == COST.margin * 112 / (166 - 112)
    assert 4.0 < COST.break_even < 4.3
    assert COST.pays(math.ceil(COST.break_even * CHUNK) * 3, 3)
    assert not COST.pays(int(COST.break_even * CHUNK) * 3 - 1, 3)
    # without latencies the SLIT distances say it (15/10): the same order of break-even
    slit = replace(TOPO_OPTERON_242_2NODE, remote_latency_cycles=None)
    assert replica_cost_for(slit, CHUNK).break_even == 4.0
    # one node: nothing is remote, no replica ever pays
    assert replica_cost_for(TOPO_CORE_I7_860, CHUNK).break_even == math.inf


def test_a_working_set_larger_than_the_replicas_makes_none_and_says_why() -> None:
    decision = _round(_reads(range(10), reads=2), ReplicaState())
    assert _made(decision) == 0
    [why] = _no_gain(decision)
    assert "node 1: its replicas missed 10 chunks of other nodes in 1 rounds" in why
    assert "more than 2 reads each of the 4 it may hold" in why
    # the same reads over a working set that fits: the paper's NCC
    fits = _round(_reads(range(4), reads=2), ReplicaState())
    assert _made(fits) == 4 and not _no_gain(fits)


def test_a_churning_node_steps_aside_logs_it_and_probes_again() -> None:
    state, made, seq = ReplicaState(), [], 0
    why: list[str] = []
    while not why:
        decision = _round(_churn(seq), state, capacity=64)
        state, seq = decision.state, seq + 1
        made.append(_made(decision))
        why = _no_gain(decision)
    assert made == [4] * seq
    assert (seq - 1) * 4 >= MIN_RETIRED  # judged once MIN_RETIRED were dropped
    assert f"its last {MIN_RETIRED} replicas dropped served 0.0 chunk reads each" in why[0]
    assert f"no new replicas for the next {PROBE_ROUNDS} rounds" in why[0]
    # aside: no new replicas for PROBE_ROUNDS rounds, each logged, then a probe
    for _ in range(PROBE_ROUNDS):
        decision = _round(_churn(seq), state, capacity=64)
        state, seq = decision.state, seq + 1
        assert _made(decision) == 0
        assert _no_gain(decision)
    probe = _round(_churn(seq), state, capacity=64)
    assert _made(probe) == 4 and not _no_gain(probe)
    # the probe's replicas churn too: the second strike keeps the node aside twice as long
    state = probe.state
    for _ in range(8):
        seq += 1
        decision = _round(_churn(seq), state, capacity=64)
        state = decision.state
        if any("strike 2" in w for w in _no_gain(decision)):
            assert f"for the next {2 * PROBE_ROUNDS} rounds" in _no_gain(decision)[0]
            break
    else:
        raise AssertionError("the probe's churn was not judged")


def test_a_reused_replica_set_keeps_replicating() -> None:
    # node 1 reads the same 4 chunks every round: replicated once, served from then on
    state = ReplicaState()
    for seq in range(3 * PROBE_ROUNDS):
        decision = _round(_reads(range(4), reads=2, seq=seq), state)
        state = decision.state
        assert not _no_gain(decision)
        assert _made(decision) == (4 if seq == 0 else 0)
    [vm] = state.vms
    assert {r.served for r in vm.ncc.replicas} == {2 * CHUNK * (3 * PROBE_ROUNDS - 1)}
    # replicas that served enough before MQ dropped them keep the node replicating
    ledgers = (NodeLedger(1),)
    paid = [Retired(1, math.ceil(COST.break_even * CHUNK))] * MIN_RETIRED
    verdict = judge(GainVerdict(ledgers), paid, COST)
    assert not verdict.aside and not verdict.reasons


def test_replicas_of_a_node_aside_keep_their_life() -> None:
    state = _round(_reads(range(2), reads=2), ReplicaState()).state  # 2 replicas on node 1
    # then a working set too large: aside, but the old replicas still serve and stay listed
    decision = _round(_reads(range(20), reads=1, seq=1), state)
    assert _made(decision) == 0 and _no_gain(decision)
    assert set(decision.replica_nodes["vm0"]) == {ChunkId(7, 0), ChunkId(7, 1)}
    [vm] = decision.state.vms
    assert all(r.served == CHUNK for r in vm.ncc.replicas)
    # a write still drops them
    written = GuestReport(
        "vm0", 2, 1.0, (ChunkAccess(ChunkId(7, 0), 0, 0, 1, home_node=0),), guest_nodes=(0, 1)
    )
    after = _round(written, decision.state)
    assert [(type(a), a.chunk) for a in after.actions] == [(DropReplica, ChunkId(7, 0))]


def test_a_replica_made_and_dropped_in_one_round_costs_nothing_and_saves_nothing() -> None:
    key = [ReplicaKey("vm0", ChunkId(7, i)) for i in range(3)]
    events = [Read(k, 1, 0, CHUNK) for k in key for _ in range(3)]
    decision = ncc_round(NccState(), (), events, NccParams(max_replicas_per_node=1))
    # three replicas made in turn, two evicted within the round: the guest never filled
    # them, so they are not judged; the third read of each saved nothing (not filled yet)
    assert not decision.retired
    assert [r.served for r in decision.state.replicas] == [0]
    later = ncc_round(decision.state, (), [Read(key[2], 1, 0, CHUNK), Write(key[2])], NccParams())
    assert later.retired == (Retired(1, CHUNK),)
    # a node aside: counted, not replicated
    aside = ncc_round(NccState(), (), events, NccParams(), aside=frozenset({1}))
    assert not aside.actions and not aside.state.replicas


def test_remote_chunks_and_a_quiet_node_are_not_logged() -> None:
    key = ReplicaKey("vm0", ChunkId(7, 0))
    assert remote_chunks([Read(key, 1, 0), Read(key, 1, 0), Read(key, 0, 0)], NccState()) == {1: 1}
    # a read its replica serves is no miss
    held = NccState((Replica(key, 1, 1, 0),))
    assert remote_chunks([Read(key, 1, 0), Read(key, 2, 0)], held) == {2: 1}
    fits = predict((), {1: 8}, (0, 1), 4, 2, COST)
    assert not fits.aside and not fits.reasons
    loud = predict((), {1: 9}, (0, 1), 4, 2, COST)  # 9 misses > 2 reads x 4 replicas
    assert loud.aside == {1} and len(loud.reasons) == 1
    quiet = predict(loud.ledgers, {}, (0, 1), 4, 2, COST)  # still aside (window), not logged
    assert quiet.aside == {1} and not quiet.reasons
