"""OBS's queueing step-aside: a VM's vCPUs are held in their LLC groups only where the
cache time that could save them is not outweighed by the wait the group's CPUs add.

The observations paper's OBS-X ("Policy: Migrating across caches") keeps overweight tasks
from migrating, "to avoid excessive migration costs (such tasks, if migrated, have to
warm up a new cache)"; every other task stays "eligible for migration through any of the
policies in force", that is, Linux's load balancer. A pin to a unit goes further: the
vCPU may never run outside the unit's ``c`` CPUs, so when it wakes to a busy unit it
waits there, where the host's scheduler would have run it on an idle CPU of its NUMA
node's ``C`` (``unicache density --model epyc-2s``: kv p95 61-71 us in 8-CPU groups
against Linux's 17 us, docs/density.md). So each round OBS predicts, per VM:

* **the wait a pin adds**, per unit of the vCPUs' run time: each pool of CPUs (the unit,
  the node) is an M/M/c queue whose servers are its CPUs and whose offered load ``A`` is
  the busy shares (``CounterSample.busy``) of the vCPUs OBS-X placed in it. Erlang's C
  formula gives the probability that a waking vCPU finds every CPU busy,
  ``C(c, A) = (A^c/c! * c/(c-A)) / (sum_{k<c} A^k/k! + A^c/c! * c/(c-A))``, and the mean
  wait in units of the mean run burst ``S`` is ``W/S = C(c, A) / (c - A)`` (L. Kleinrock,
  *Queueing Systems, Vol. 1: Theory*, Wiley 1975, §3.5 "M/M/m: the m-server case";
  the same formulas as the Octave ``queueing`` package's ``erlangc`` and ``qsmmm``,
  octave.sourceforge.io/queueing). ``C`` is computed through Erlang's B recursion,
  ``B(k) = A B(k-1) / (k + A B(k-1))``, ``C = c B / (c - A (1 - B))``, which neither
  overflows nor loses precision at hundreds of CPUs. Two facts of a finite population
  bound it: a pool with no more vCPUs than CPUs has no wait (every vCPU has a CPU), and
  a pool whose load reaches its CPUs is saturated (infinite wait in M/M/c; the paper's
  always-running tasks). The pin adds ``W_unit/S - W_node/S``, nothing when the node is
  saturated too (a pin confines nothing the node would give);
* **the cache time a pin could save**, per unit of run time: the time the vCPU's misses
  took, its misses per cycle (its OBS cache weight) times the cycles one line from DRAM
  takes a core, the line size over the core's DRAM bandwidth, as SCU's cost model charges
  a read (MFC §4.5's "time to load the file from off-chip memory";
  :func:`unicache.policy.scu.options.scu_options_for`: epyc-2s 64 B / 8.1 B a cycle = 7.9
  cycles); for a weight its guest reported (lines per nanosecond it ran), the same in
  nanoseconds; at most 1. It counts misses as a file read's are, overlapped by the
  prefetchers; a miss a dependent load waits for costs up to the DRAM latency (426
  cycles on epyc-2s), which it does not see.

Both are summed over the VM's vCPUs weighted by their busy shares. A VM whose wait
exceeds its cache time (and is not zero) floats over its node: OBS widens its vCPUs'
CPU sets to the CPUs of their unit's NUMA node (not a release: the affinity a release
restores is the one ``unicache place`` gave, the same unit; the node keeps the VM by its
memory) and logs ``OBS_NO_GAIN`` with the numbers. A VM OBS holds pinned floats only
after :data:`~unicache.policy.obs.gain.FLOAT_ROUNDS` such rounds in a row; a floating VM
is pinned again only when its cache time exceeds the wait by ``margin`` (hysteresis); a
VM that did not run keeps its standing. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unicache.model import VcpuId
from unicache.policy.machine import DEFAULT_OFFCHIP_BYTES_PER_CYCLE, cost_figures
from unicache.policy.obs.gain import FLOAT_ROUNDS
from unicache.topology import CacheUnit, Topology, Unify

#: cycles per nanosecond where the model has no clock: the 3 GHz ``MAX_GUEST_BYTES_PER_NS``
#: assumes (:mod:`unicache.policy.obs.weight`)
DEFAULT_CLOCK_GHZ = 3.0
#: a floating VM is pinned again only when its cache time exceeds the wait by this much
WAIT_MARGIN = 0.25


@dataclass(frozen=True, slots=True)
class MissCost:
    """What one LLC miss costs a core, to estimate the time a pin could save.

    :param line_cycles: cycles one line from DRAM takes a core (line size over the
        core's DRAM bandwidth).
    :param clock_ghz: core cycles per nanosecond.
    :param source: where the figures come from (the machine model, or defaults).
    """

    line_cycles: float = 64.0 / DEFAULT_OFFCHIP_BYTES_PER_CYCLE
    clock_ghz: float = DEFAULT_CLOCK_GHZ
    source: str = "defaults"

    def stall_share(self, weight: float, host_measured: bool) -> float:
        """The share of its run time a vCPU of this cache weight spends on its misses:
        misses per cycle times cycles per line, or guest-reported lines per ns times ns
        per line; within [0, 1]."""
        per_line = self.line_cycles / (1.0 if host_measured else self.clock_ghz)
        return min(1.0, max(0.0, weight * per_line))


def miss_cost_for(topology: Topology) -> MissCost:
    """The miss cost of a machine: its LLC line over the DRAM bandwidth of one core that
    SCU's cost model uses, and its clock; the documented defaults where the model (or
    sysfs) has no figure."""
    figures = cost_figures(topology, Unify.LLC)
    line_cycles = topology.line_size / figures.offchip_bytes_per_cycle
    source = figures.source
    if not topology.clock_ghz:
        source = f"{source}; default clock"
    return MissCost(line_cycles, topology.clock_ghz or DEFAULT_CLOCK_GHZ, source)


def erlang_c(servers: int, load: float) -> float:
    """Erlang's C: the probability that an arrival at an M/M/``servers`` queue of offered
    load ``load`` (in servers' worth) waits; 1 at or past saturation."""
    if servers <= 0 or load >= servers:
        return 1.0
    if load <= 0.0:
        return 0.0
    blocking = 1.0  # Erlang's B recursion: B(0) = 1
    for k in range(1, servers + 1):
        blocking = load * blocking / (k + load * blocking)
    return servers * blocking / (servers - load * (1.0 - blocking))


@dataclass(frozen=True, slots=True)
class PoolWait:
    """The mean wait of a waking vCPU in a pool of CPUs.

    :param cpus: the pool's CPUs (servers).
    :param vcpus: the vCPUs that may run only there.
    :param load: their busy shares, summed (CPUs' worth of run time).
    """

    cpus: int
    vcpus: int
    load: float

    @property
    def wait(self) -> float:
        """Mean wait in mean run bursts (``inf``: saturated); 0 with a CPU per vCPU."""
        if self.vcpus <= self.cpus or self.load <= 0.0:
            return 0.0
        if self.load >= self.cpus:
            return math.inf
        return erlang_c(self.cpus, self.load) / (self.cpus - self.load)

    def __str__(self) -> str:
        return f"{self.cpus} cpus at load {self.load:.3g}, wait {self.wait:.3g}"


@dataclass(frozen=True, slots=True)
class Confinement:
    """This round's verdict of the queueing step-aside.

    :param crowded: VMs whose vCPUs float over their node this round.
    :param rounds: per VM OBS holds pinned, rounds in a row its wait exceeded its cache time.
    :param reasons: per crowded VM, one line for the decision log.
    :param node_cpus: per vCPU of a crowded VM, the CPUs it floats over.
    """

    crowded: frozenset[str]
    rounds: Mapping[str, int]
    reasons: Mapping[str, str]
    node_cpus: Mapping[VcpuId, frozenset[int]]


def confinement(
    units: Iterable[CacheUnit],
    unit_of: Mapping[VcpuId, int],
    busy: Mapping[VcpuId, float],
    stall: Mapping[VcpuId, float],
    candidates: Mapping[str, Iterable[VcpuId]],
    crowded_before: frozenset[str],
    rounds_before: Mapping[str, int],
    pinned: frozenset[str],
    margin: float = WAIT_MARGIN,
) -> Confinement:
    """Which VMs' pins would cost them more wait than their cache could save.

    :param units: the cache units.
    :param unit_of: every vCPU's unit (OBS-X's placement this round).
    :param busy: each vCPU's busy share of the last interval.
    :param stall: each vCPU's share of its run time a pin could save.
    :param candidates: the VMs that may float (SCU does not place them, OBS does not
        cluster them), with their vCPUs.
    :param crowded_before: the previous round's :attr:`Confinement.crowded`.
    :param rounds_before: the previous round's :attr:`Confinement.rounds`.
    :param pinned: VMs OBS holds pinned now.
    :param margin: a crowded VM is pinned again only when its cache time exceeds its wait by
        this fraction.
    """
    by_id = {u.id: u for u in units}
    node_cpus: dict[int, frozenset[int]] = {}
    for u in by_id.values():
        node_cpus[u.node] = node_cpus.get(u.node, frozenset()) | u.cpus
    unit_wait = _pools({u: len(w.cpus) for u, w in by_id.items()}, unit_of, busy)
    node_of = {v: by_id[u].node for v, u in unit_of.items()}
    node_wait = _pools({n: len(c) for n, c in node_cpus.items()}, node_of, busy)
    # each pool's wait once (Erlang's C per pool, not per vCPU)
    waits_in_unit = {u: pool.wait for u, pool in unit_wait.items()}
    waits_in_node = {n: pool.wait for n, pool in node_wait.items()}
    crowded: set[str] = set()
    rounds: dict[str, int] = {}
    reasons: dict[str, str] = {}
    floats: dict[VcpuId, frozenset[int]] = {}
    # each pool said once (its wait is Erlang's C again), however many VMs name it
    said_unit: dict[int, str] = {}
    said_node: dict[int, str] = {}
    for vm, vcpus in sorted(candidates.items()):
        mine = [v for v in vcpus if v in unit_of]
        ran = sum(busy.get(v, 0.0) for v in mine)
        cost, gain = _cost_and_gain(mine, by_id, unit_of, busy, stall, waits_in_unit, waits_in_node)
        was = vm in crowded_before
        if ran <= 0.0:
            floats_now = was  # it did not run: it keeps its standing
        elif was:
            floats_now = not gain >= cost * (1.0 + margin)  # hysteresis
        elif cost > gain and vm in pinned:
            rounds[vm] = rounds_before.get(vm, 0) + 1
            floats_now = rounds[vm] >= FLOAT_ROUNDS
        else:
            floats_now = cost > gain  # a VM OBS has not pinned floats at once
        if not floats_now:
            continue
        crowded.add(vm)
        for v in mine:
            floats[v] = node_cpus[by_id[unit_of[v]].node]
        busiest = max(mine, key=lambda v: (busy.get(v, 0.0), v), default=None)
        where = ""
        if busiest is not None:
            unit = by_id[unit_of[busiest]]
            if unit.id not in said_unit:
                said_unit[unit.id] = str(unit_wait[unit.id])
            if unit.node not in said_node:
                said_node[unit.node] = str(node_wait[unit.node])
            where = (
                f" (unit {unit.id}: {said_unit[unit.id]}; node {unit.node}: "
                f"{said_node[unit.node]}; waits in mean run bursts, M/M/c)"
            )
        reasons[vm] = (
            f"OBS leaves {vm}'s vCPUs to the host's scheduler over their NUMA node: held "
            f"in their LLC groups they would wait {_share(cost, ran)} of their run time "
            f"more{where}, against the {_share(gain, ran)} a pin could save them "
            "(its misses at the core's DRAM bandwidth)"
        )
    return Confinement(frozenset(crowded), rounds, reasons, floats)


def _cost_and_gain(
    mine: list[VcpuId],
    by_id: Mapping[int, CacheUnit],
    unit_of: Mapping[VcpuId, int],
    busy: Mapping[VcpuId, float],
    stall: Mapping[VcpuId, float],
    waits_in_unit: Mapping[int, float],
    waits_in_node: Mapping[int, float],
) -> tuple[float, float]:
    """A VM's run time its pins would cost it in wait (its unit's wait above its node's),
    and what they could save it (its vCPUs' stall shares), both weighted by run time."""
    cost = gain = 0.0
    for v in mine:
        unit = by_id[unit_of[v]]
        here, node = waits_in_unit[unit.id], waits_in_node[unit.node]
        added = 0.0 if math.isinf(node) else here - node
        ran_v = busy.get(v, 0.0)
        if ran_v > 0.0:
            cost += ran_v * added if added > 0.0 else 0.0
            gain += ran_v * stall.get(v, 0.0)
    return cost, gain


def _pools(
    cpus: Mapping[int, int], pool_of: Mapping[VcpuId, int], busy: Mapping[VcpuId, float]
) -> dict[int, PoolWait]:
    """Each pool's wait: its CPUs, the vCPUs confined to it and their busy shares."""
    vcpus = dict.fromkeys(cpus, 0)
    load = dict.fromkeys(cpus, 0.0)
    for vcpu, pool in pool_of.items():
        vcpus[pool] += 1
        load[pool] += busy.get(vcpu, 0.0)
    return {p: PoolWait(n, vcpus[p], load[p]) for p, n in cpus.items()}


def _share(total: float, ran: float) -> str:
    return "all" if math.isinf(total) else f"{total / ran:.3g}" if ran > 0 else "0"
