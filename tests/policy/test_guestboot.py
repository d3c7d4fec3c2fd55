"""A VM whose guest booted again starts afresh (unicache.policy.guestboot): its old
guest's chunks, table, watch, colors and replicas are forgotten; other VMs, the same guest
and what the host did to the vCPUs are kept; a table's version never goes back."""

from __future__ import annotations

import json
from dataclasses import replace

from unicache import policystate
from unicache.model import (
    ChunkAccess,
    ChunkId,
    GuestReport,
    Observation,
    PublishPlacement,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.guestboot import GUEST_BOOTED
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.topology import Unify

from tests.policy.conftest import sample
from tests.policy.test_colors_replicas import _remote, _stream, _vm
from tests.topologies import TOPO_OPTERON_16

BOOT_A = "00112233445566aa"
BOOT_B = "99887766554433bb"
CHUNK = 256 * 1024


def _reads(vm: str, file_id: int, seq: int, id_space: str) -> GuestReport:
    return GuestReport(
        vm,
        seq,
        1.0,
        tuple(ChunkAccess(ChunkId(file_id, i), CHUNK, 1, 0, ((i % 2, CHUNK),)) for i in range(32)),
        id_space=id_space,
    )


def _lived(policy: UnicachePolicy, vm: Vm, id_space: str, rounds: int = 4) -> RoundState:
    """Rounds of every policy for one two-node VM under one boot: a table, colors, replicas."""
    state = RoundState()
    for tick in range(rounds):
        reports = (
            replace(_stream(vm.name, 7, range(4 * tick, 4 * tick + 4), seq=tick),
                    id_space=id_space),
            replace(_remote(vm.name, ChunkId(5, 0), 0, 1, 2, seq=50 + tick), id_space=id_space),
            _reads(vm.name, 3, 100 + tick, id_space),
        )
        _, state = _decide(policy, tick, (vm,), reports, state)
    return state


def _decide(policy, tick, vms, reports, state):
    samples = tuple(
        sample(v.id.vm, v.id.index, 10**6, busy=0.001) for vm in vms for v in vm.vcpus
    )
    return policy.decide(Observation(tick, tuple(vms), samples, tuple(reports)), state)


def _policy() -> UnicachePolicy:
    return UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, color_step_aside=False)


def test_a_new_boot_forgets_what_the_old_guest_taught_and_says_so() -> None:
    policy, vm = _policy(), _vm(colored=2, cpu_nodes=2)
    state = _lived(policy, vm, BOOT_A)
    assert state.scu.table is not None and state.scu.table.count_of("vm0") > 0
    assert state.colors.of("vm0") and state.replicas.of("vm0") and state.scu.published
    old_version = state.scu.versions["vm0"]
    old_units = state.obs.unit_of

    decision, after = _decide(policy, 9, (vm,), [_reads("vm0", 11, 200, BOOT_B)], state)

    [note] = [r for r in decision.refusals if r.kind == GUEST_BOOTED]
    assert BOOT_A in note.reason and BOOT_B in note.reason
    assert after.id_spaces == {"vm0": BOOT_B}
    assert after.scu.table is not None
    # the new guest is measured unplaced first (the watch starts again); nothing of the old
    assert {key.chunk.file_id for key, _ in after.scu.table.chunks_of("vm0")} <= {11}
    assert any(r.kind == "SCU_WATCH" for r in decision.refusals)
    colors, replicas = after.colors.of("vm0"), after.replicas.of("vm0")
    assert colors is None or {c.chunk.file_id for c in colors.colored} <= {11}
    assert replicas is None or not replicas.ncc.replicas
    # the new table names only the new boot's files, and its version goes on
    tables = [a.table for a in decision.actions if isinstance(a, PublishPlacement)]
    assert tables and all(e.chunk.file_id == 11 for t in tables for e in t.entries)
    assert all(t.id_space == BOOT_B for t in tables)
    assert all(t.version > old_version for t in tables)
    # the host's own pinning of the vCPUs is the host's, and stays
    assert set(old_units) <= set(after.obs.unit_of)


def test_the_same_boot_after_a_daemon_restart_keeps_everything() -> None:
    policy, vm = _policy(), _vm(colored=2, cpu_nodes=2)
    state = _lived(policy, vm, BOOT_A)
    restored = policystate.after_restart(
        policystate.decode(json.loads(json.dumps(policystate.encode(state))))
    )
    assert restored.id_spaces == {"vm0": BOOT_A}
    decision, after = _decide(policy, 9, (vm,), [_reads("vm0", 3, 200, BOOT_A)], restored)
    assert not [r for r in decision.refusals if r.kind == GUEST_BOOTED]
    assert after.scu.table is not None and restored.scu.table is not None
    before = {key.chunk.file_id for key, _ in restored.scu.table.chunks_of("vm0")}
    assert before and before <= {key.chunk.file_id for key, _ in after.scu.table.chunks_of("vm0")}


def _two_vms(policy: UnicachePolicy, rounds: int, boot1: str) -> tuple[tuple[Vm, ...], RoundState]:
    """Two four-vCPU VMs after ``rounds`` rounds of reads, vm0 under BOOT_A, vm1 ``boot1``."""
    vms = tuple(
        Vm(name, tuple(Vcpu(VcpuId(name, i), None, frozenset(range(16))) for i in range(4)))
        for name in ("vm0", "vm1")
    )
    state = RoundState()
    for tick in range(rounds):
        reports = [_reads("vm0", 3, tick, BOOT_A), _reads("vm1", 4, tick, boot1)]
        _, state = _decide(policy, tick, vms, reports, state)
    return vms, state


def test_another_vms_reboot_leaves_this_vm_alone() -> None:
    policy = _policy()
    vms, state = _two_vms(policy, 3, BOOT_A)
    assert state.scu.table is not None
    kept = dict(state.scu.table.chunks_of("vm1"))
    assert kept
    decision, after = _decide(policy, 5, vms, [_reads("vm0", 8, 9, BOOT_B)], state)
    assert [r.reason.split("'")[0] for r in decision.refusals if r.kind == GUEST_BOOTED] == [
        "vm0"
    ]
    assert after.scu.table is not None
    assert set(dict(after.scu.table.chunks_of("vm1"))) == set(kept)
    assert after.id_spaces == {"vm0": BOOT_B, "vm1": BOOT_A}


def test_a_report_without_an_id_space_changes_nothing() -> None:
    policy, vm = _policy(), _vm(colored=2, cpu_nodes=2)
    state = _lived(policy, vm, "")
    assert state.id_spaces == {}
    decision, after = _decide(policy, 9, (vm,), [_reads("vm0", 3, 200, "")], state)
    assert not [r for r in decision.refusals if r.kind == GUEST_BOOTED]
    assert after.scu.table is not None and after.scu.table.count_of("vm0") > 0


def test_forgetting_a_vm_frees_the_units_its_chunks_were_on() -> None:
    policy = _policy()
    vms = (Vm("vm0", tuple(Vcpu(VcpuId("vm0", i), None, frozenset(range(16))) for i in range(4))),)
    state = RoundState()
    for tick in range(3):
        _, state = _decide(policy, tick, vms, [_reads("vm0", 3, tick, BOOT_A)], state)
    table = state.scu.table
    assert table is not None
    units = {u for _, st in table.chunks_of("vm0") for u in st.units}
    assert units and any(table.assigned_bytes(u) for u in units)
    copy = table.copy()
    assert copy.forget_vm("vm0") == table.count_of("vm0")
    assert copy.count_of("vm0") == 0
    assert all(copy.assigned_bytes(u) == 0 and copy.vm_bytes(u, "vm0") == 0 for u in units)
    assert table.count_of("vm0") > 0  # the round's input is not changed


def test_the_id_space_of_a_vm_that_left_the_host_is_not_kept() -> None:
    policy = _policy()
    vms, state = _two_vms(policy, 2, BOOT_B)
    assert state.id_spaces == {"vm0": BOOT_A, "vm1": BOOT_B}
    _, state = _decide(policy, 2, vms[:1], [_reads("vm0", 3, 2, BOOT_A)], state)
    assert state.id_spaces == {"vm0": BOOT_A}  # bounded by the VMs on the host
