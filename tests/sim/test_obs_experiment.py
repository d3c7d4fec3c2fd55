"""The observations paper's experiments on the simulated host (``unicache-sim obs``): the
host applies OBS's pins and CPU weights as the daemon's backends do, and the policies do
what the paper says of them on its machine (xeon-5300-quad), over several seeds.

Runs are shorter than the command's (fewer rounds): the properties, not the figures.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest
from unicache.model import SetCpuWeight, VcpuId
from unicache.policy.obs.credit import BASE_CPU_WEIGHT
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.obs.scenarios import kind_rate
from unicache_sim.experiments.obs.sched import ObsSpec, run_obs, run_slices
from unicache_sim.experiments.obs.tasks import KINDS, Program
from unicache_sim.guest.cfs import NICE_0_LOAD, SlicedHost, flat_weights
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.simhost import SimHost

from tests.topologies import TOPO_XEON_5300

SEEDS = (1, 2, 3)
#: the two cores of LLC group 0
GROUP_0 = (0, 1)


def test_a_cgroup_weight_moves_time_only_between_vcpus_of_one_vm() -> None:
    # the embedded backend puts vCPU threads in unicache/<vm>/vcpuN under a VM cgroup of
    # the default weight: a one-vCPU VM weighs the same whatever its vCPU's weight
    a, b = VcpuId("a", 0), VcpuId("b", 0)
    heavy, light = flat_weights({"a": [a], "b": [b]}, {a: 980, b: 1020}, "cgroup").values()
    assert heavy == light == NICE_0_LOAD
    # ... while two vCPUs of one VM trade time by their weights
    c0, c1 = VcpuId("c", 0), VcpuId("c", 1)
    split = flat_weights({"c": [c0, c1]}, {c0: 500, c1: 1500}, "cgroup")
    assert split[c1] == pytest.approx(3 * split[c0])


def test_libvirt_shares_carry_a_one_vcpu_vms_credit() -> None:
    a, b = VcpuId("a", 0), VcpuId("b", 0)
    w = flat_weights({"a": [a], "b": [b]}, {a: 980, b: 1020}, "libvirt")
    assert w[b] / w[a] == pytest.approx(1020 / 980, rel=0.01)
    assert flat_weights({"a": [a]}, {}, "libvirt")[a] == 1024  # libvirt's default shares


def _two_spinners_on_cpu_0(weights: dict[str, int]) -> dict[str, float]:
    """Two one-vCPU VMs on CPU 0 of the quad for 40 slices, OBS-C's weights applied."""
    cfg = from_topology(TOPO_XEON_5300)
    engine = cfg.engine(seed=1)
    hosts = [SimHost(cfg, engine, vm, 1e7, 1, {0: frozenset({0})}, {0: 0}) for vm in weights]
    multi = MultiHost(cfg, engine, hosts)
    for h in hosts:
        multi.add_thread(h.vm, engine.add_thread(0), 0)
    programs = {vm: Program(KINDS["spinloop"], engine, cfg, random.Random(1)) for vm in weights}
    host = SlicedHost(multi, "libvirt", 1e6)
    host.act([SetCpuWeight(VcpuId(vm, 0), w, "test") for vm, w in weights.items()])
    work = dict.fromkeys(weights, 0.0)
    run_slices(host, programs, work, 40 * host.slice_cycles)
    return {vm: w / sum(work.values()) for vm, w in work.items()}


def test_equal_weights_share_a_cpu_equally_and_a_credit_shifts_the_share() -> None:
    even = _two_spinners_on_cpu_0({"a": BASE_CPU_WEIGHT, "b": BASE_CPU_WEIGHT})
    assert even["a"] == pytest.approx(0.5, abs=0.03)
    tilted = _two_spinners_on_cpu_0({"a": 3 * BASE_CPU_WEIGHT // 2, "b": BASE_CPU_WEIGHT // 2})
    assert tilted["a"] == pytest.approx(0.75, abs=0.03)


def test_obs_x_separates_two_cachebusters_onto_different_llc_groups() -> None:
    # four one-vCPU VMs on the quad's four CPUs, whatever fork balancing did at the start
    spec = ObsSpec(("cachebuster",) * 2 + ("spinloop",) * 2, warm_rounds=1, rounds=2)
    for seed in SEEDS:
        run = run_obs(TOPO_XEON_5300, replace(spec, seed=seed), "obs")
        assert run.heavy_per_group[-1] == (1, 1), (seed, run.heavy_per_group)


def test_obs_l_keeps_cachebusters_from_co_running_on_one_llc() -> None:
    # two cachebusters and two spinloops on the two cores of one LLC: OBS-L pairs the
    # heavy vCPUs on one CPU, so a cachebuster always co-runs with a spinloop; in phase on
    # both CPUs ([cb, sl][cb, sl]) they thrash the LLC together
    spec = ObsSpec(("cachebuster",) * 2 + ("spinloop",) * 2, GROUP_0, warm_rounds=1, rounds=3)
    gains = []
    for seed in SEEDS:
        obs = run_obs(TOPO_XEON_5300, replace(spec, seed=seed), "obs")
        worst = run_obs(TOPO_XEON_5300, replace(spec, seed=seed), "worst")
        gains.append(kind_rate(obs, "cachebuster") / kind_rate(worst, "cachebuster"))
        # no task loses its CPU time: OBS-L pairs, it does not starve
        assert all(t.cpu_share > 0.45 for t in obs.tasks), obs.tasks
    assert min(gains) > 1.2, gains
    assert statistics.median(gains) > 1.5, gains


def test_linux_runs_are_the_same_for_every_weight_backend() -> None:
    # without the daemon nothing sets a weight: the backend must not matter
    spec = ObsSpec(("cachebuster", "spinloop"), GROUP_0, warm_rounds=1, rounds=1)
    a = run_obs(TOPO_XEON_5300, spec, "linux")
    b = run_obs(TOPO_XEON_5300, replace(spec, backend="cgroup"), "linux")
    assert [t.work_per_s for t in a.tasks] == [t.work_per_s for t in b.tasks]
