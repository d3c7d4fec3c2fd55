"""Shared fixtures for policy tests: named topologies and observation builders."""

from __future__ import annotations

from unicache.model import CounterSample, CounterSource, Observation, Vcpu, VcpuId, Vm
from unicache.topology import load_model

#: OBS paper's machine: one quad-core Xeon 5300, two LLC groups of two cores
TOPO_XEON_5300 = load_model("xeon-5300-quad")
#: MFC paper's machine: four quad-core Opteron chips (Figure 1)
TOPO_OPTERON_16 = load_model("opteron-16")


def vm(name: str, vcpus: int, cpus: frozenset[int] = frozenset({0, 1, 2, 3})) -> Vm:
    return Vm(name, tuple(Vcpu(VcpuId(name, i), None, cpus) for i in range(vcpus)))


def sample(vmname: str, index: int, misses: int, busy: float = 0.5) -> CounterSample:
    return CounterSample(
        VcpuId(vmname, index), CounterSource.TRACE, cycles=1_000_000_000, llc_misses=misses,
        busy=busy,
    )


def observation(tick: int, vms: tuple[Vm, ...], samples: list[CounterSample]) -> Observation:
    return Observation(tick, vms, tuple(samples))
