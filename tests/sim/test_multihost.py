"""Several VMs on one simulated host: a VM alone is the MFC experiment's host, VMs keep their own
guests, and the host's scheduler (wake-up, churn, idle pull) runs vCPUs where CFS would."""

from __future__ import annotations

import random

from unicache.model import (
    Action,
    ChunkId,
    PinVcpu,
    PlacementTable,
    PublishPlacement,
    ReleaseVcpu,
    VcpuId,
)
from unicache_sim.engine.config import from_topology
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.simhost import SimHost

from tests.topologies import TOPO_OPTERON_16

CHUNK = 256 * 1024


def _alone() -> tuple[SimHost, SimHost, MultiHost]:
    """The same VM (a vCPU per CPU, one reader) twice: bare, and alone on a MultiHost."""
    cfg = from_topology(TOPO_OPTERON_16)
    hosts = []
    for _ in range(2):
        engine = cfg.engine()
        host = SimHost(cfg, engine, "vm0", 1e6)
        tid = engine.add_thread(0)
        host.add_thread(tid, 0)
        obj = engine.add_object(CHUNK)
        GuestShim(host).read_chunk(tid, obj, ChunkId(1, 0), 0, CHUNK, 0.0, CHUNK)
        engine.run()
        hosts.append(host)
    bare, inner = hosts
    return bare, inner, MultiHost(cfg, inner.engine, [inner])


def test_a_vm_alone_is_observed_and_acted_on_as_on_its_own_host() -> None:
    bare, inner, multi = _alone()
    a, b = bare.observe(), multi.observe()
    assert (a.vms, a.samples, a.reports) == (b.vms, b.samples, b.reports)
    actions: list[Action] = [
        PinVcpu(VcpuId("vm0", 0), frozenset({4, 5, 6, 7}), 1, "t"),
        PinVcpu(VcpuId("vm0", 3), frozenset({4, 5, 6, 7}), 1, "t"),
        ReleaseVcpu(VcpuId("vm0", 9), "t"),
    ]
    ra, rb = bare.act(actions), multi.act(actions)
    assert ra == rb
    assert bare.affinity == inner.affinity and bare.vcpu_cpu == inner.vcpu_cpu
    assert bare.engine.thread_cpu(0) == inner.engine.thread_cpu(0)
    assert bare.engine.thread_stats(0).migrations == inner.engine.thread_stats(0).migrations


def _two_vms() -> MultiHost:
    cfg = from_topology(TOPO_OPTERON_16)
    engine = cfg.engine()
    chip0 = frozenset({0, 1, 2, 3})
    web = SimHost(cfg, engine, "web-1", 1e6, 2, {0: chip0, 1: chip0}, {0: 0, 1: 1})
    kv = SimHost(cfg, engine, "kv-1", 1e6, 1, {0: frozenset({4, 5, 6, 7})}, {0: 4})
    return MultiHost(cfg, engine, [web, kv])


def test_each_vm_takes_the_actions_that_name_it_and_a_release_restores_its_placement() -> None:
    multi = _two_vms()
    web, kv = multi.hosts
    table = PlacementTable("kv-1", 1, CHUNK, 4096, ())
    result = multi.act(
        [
            PinVcpu(VcpuId("web-1", 1), frozenset({2}), 0, "t"),
            PublishPlacement("kv-1", table, "t"),
            PinVcpu(VcpuId("db-1", 0), frozenset({2}), 0, "t"),
        ]
    )
    assert len(result.applied) == 2 and result.failed[0][1] == "VM db-1 is not running"
    assert web.affinity[1] == frozenset({2}) and web.vcpu_cpu[1] == 2
    assert kv.table is table and web.table is None
    multi.act([ReleaseVcpu(VcpuId("web-1", 1), "t")])
    # the placement's CPUs, not every CPU: what the live actuator journaled
    assert web.affinity[1] == frozenset({0, 1, 2, 3})
    obs = multi.observe()
    assert [vm.name for vm in obs.vms] == ["web-1", "kv-1"]
    assert [r.vm for r in obs.reports] == ["web-1", "kv-1"]
    assert [s.vcpu for s in obs.samples] == [
        VcpuId("web-1", 0), VcpuId("web-1", 1), VcpuId("kv-1", 0)
    ]


def test_a_waking_vcpu_takes_an_idle_cpu_of_its_group_when_its_own_is_busy() -> None:
    multi = _two_vms()
    web, _kv = multi.hosts
    engine = multi.engine
    busy = engine.add_thread(0)
    multi.add_thread("web-1", busy, 0)
    engine.push_compute(busy, 1e6)  # vCPU 0 runs on CPU 0
    sleeper = engine.add_thread(0)
    web.thread_vcpu[sleeper] = 1
    multi.host_of[sleeper] = web
    web.vcpu_cpu[1] = 0  # vCPU 1 sits on CPU 0 too, asleep
    multi.wake(sleeper)
    assert web.vcpu_cpu[1] == 1 and engine.thread_cpu(sleeper) == 1
    # moving a sleeping thread costs no hop
    assert engine.thread_stats(sleeper).migration_cycles == 0.0
    # an idle CPU of its own stays
    multi.wake(sleeper)
    assert web.vcpu_cpu[1] == 1


def test_the_idle_pull_moves_one_of_two_runnable_vcpus_inside_its_set() -> None:
    multi = _two_vms()
    web, _ = multi.hosts
    engine = multi.engine
    for vcpu in (0, 1):
        tid = engine.add_thread(0)
        multi.add_thread("web-1", tid, vcpu)
        engine.push_compute(tid, 1e6)
    web.move_vcpu(1, 0)
    multi.balance(random.Random(1), float_prob=0.0)
    assert web.vcpu_cpu[0] != web.vcpu_cpu[1]
    assert web.vcpu_cpu[1] in web.affinity[1] and multi.moves == 1


def test_a_newly_idle_cpu_pulls_a_waiting_vcpu_of_its_group() -> None:
    multi = _two_vms()
    web, _ = multi.hosts
    engine = multi.engine
    for vcpu in (0, 1):
        tid = engine.add_thread(0)
        multi.add_thread("web-1", tid, vcpu)
        engine.push_compute(tid, 1e6)
    web.move_vcpu(1, 0)  # both runnable on CPU 0; CPU 3 has nothing to run
    multi.idle(3)
    assert web.vcpu_cpu[1] == 3 and multi.moves == 1
    # a CPU outside the vCPU's set pulls nothing
    web.move_vcpu(1, 0)
    multi.idle(5)
    assert web.vcpu_cpu[1] == 0
