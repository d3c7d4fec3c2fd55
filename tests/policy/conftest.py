"""Shared builders for policy tests: VMs, samples, observations (machines: tests/topologies.py)."""

from __future__ import annotations

from unicache.model import CounterSample, CounterSource, Observation, Vcpu, VcpuId, Vm


def vm(name: str, vcpus: int, cpus: frozenset[int] = frozenset({0, 1, 2, 3})) -> Vm:
    return Vm(name, tuple(Vcpu(VcpuId(name, i), None, cpus) for i in range(vcpus)))


def sample(vmname: str, index: int, misses: int, busy: float = 0.5) -> CounterSample:
    return CounterSample(
        VcpuId(vmname, index), CounterSource.TRACE, cycles=1_000_000_000, llc_misses=misses,
        busy=busy,
    )


def observation(tick: int, vms: tuple[Vm, ...], samples: list[CounterSample]) -> Observation:
    return Observation(tick, vms, tuple(samples))
