"""One point of the density experiment: N VMs of a mix on one simulated host, one policy, one seed.

The point runs the product's path (docs/density.md "Method"):

1. **Placement.** ``unicache``: the VMs arrive in order and are placed by
   :func:`unicache.policy.place.fleet.place_fleet` (``unicache place``'s function: NUMA
   node, LLC groups, vCPU pins, memory nodes) with ``cpu_overcommit`` vCPUs per CPU;
   memory is strict on the placement's nodes. ``linux``: what a libvirt domain without
   ``<cputune>`` and ``<numatune>`` gets: every vCPU may run on every CPU and starts where
   fork balancing puts a new thread (the CPU with the fewest vCPUs, of the node and LLC
   group with the fewest: Linux spreads new tasks over the machine), and guest memory is
   allocated on first touch (``MPOL_DEFAULT``) by the vCPU that wrote it, so a VM's files
   live on the nodes its vCPUs started on. Both admit at most ``cpu_overcommit`` vCPUs
   per CPU and the host's memory; a point beyond that is not run (``admitted`` false).
2. **Tenants.** Each vCPU of a VM runs one guest thread of its flavor's workload
   (:mod:`unicache_sim.density.tenants`). Latency tenants serve requests that arrive as a Poisson
   process (``rates``, per vCPU); a request's latency is from its arrival to its last
   byte, queueing included. Batch tenants run without pause; idle ones run nothing.
3. **The loop.** Under ``unicache`` the daemon's loop (:func:`unicache.loop.run_rounds_sync`
   over :class:`~unicache_sim.guest.multihost.MultiHost`,
   :class:`~unicache.policy.round.UnicachePolicy` as ``unicache run`` decides: OBS, SRM,
   NCC, SCU) runs once per sampled interval, on every VM's report scaled to the daemon's
   round (``unicache_sim.guest.livetiming``: a window stands for the whole round), and each
   guest reads through its own
   :class:`~unicache_sim.guest.shim.GuestShim`. Under ``linux`` nothing decides. The host's
   scheduler (``MultiHost``: wake-up, churn, idle pull) is the same under both.
4. **Measurement.** ``warm_rounds`` intervals of warm-up, then ``measure_rounds``
   measured: requests that arrive in the measured intervals count (one more interval lets
   them finish; a request still open at the end counts with the time it has waited, a
   lower bound). Batch throughput is the bytes its threads moved per measured second.
   The run stops as soon as every measured request is done: what it would simulate
   after that changes nothing measured (only the scheduler's move counts).

Every random draw is seeded by (seed, VM, vCPU): the same requests, at the same times,
ask for the same files under both policies.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from unicache.host.ports import ActResult
from unicache.loop import run_rounds_sync
from unicache.model import Action, Observation
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.options import scu_options_for
from unicache.topology import Topology, Unify

from unicache_sim import _native
from unicache_sim.density.point_setup import (
    admit_linux,
    linux_start_cpus,
    place_unicache,
    vm_names,
)
from unicache_sim.density.tenant_threads import Tenants, TenantVm, Worker, add_data
from unicache_sim.density.tenants import Flavor, Kind
from unicache_sim.engine.config import SimConfig, from_topology
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.opensample import AGENT_OPEN_SAMPLE, OpenSample
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.simhost import SimHost

#: the policies a point runs under
POLICIES = ("linux", "unicache")
#: a VM's p95 is reported (``worst_vm_p95_us``) only from this many requests
MIN_VM_REQUESTS = 20


@dataclass(frozen=True, slots=True)
class DensityTiming:
    """How long a point runs, in sampled intervals of the daemon's loop.

    :param window_s: simulated seconds of one sampled interval (it stands for the
        daemon's whole round, ``round_s``: reports are scaled by ``round_s / window_s``).
    :param round_s: the daemon's round period (``DaemonConfig.interval_s``).
    :param warm_rounds: intervals before the measurement (caches fill, the policy
        settles: SCU's watch needs two unplaced and two placed rounds).
    :param measure_rounds: intervals measured.
    :param balance_interval_s: the host scheduler's balancing period.
    :param float_prob: its churn (``linux_float``) per period.
    """

    window_s: float = 0.001
    round_s: float = 1.0
    warm_rounds: int = 4
    measure_rounds: int = 3
    balance_interval_s: float = 0.004
    float_prob: float = 0.05


@dataclass(frozen=True, slots=True)
class PointSpec:
    """One point.

    :param flavors: the VMs' flavors, in arrival order (N = their number).
    :param policy: ``linux`` or ``unicache``.
    :param seed: the seed of every draw (page frames, arrivals, files, churn).
    :param rates: (flavor, requests per second per vCPU) of latency tenants; a latency
        flavor missing here runs closed-loop, a request as soon as the last ends (the
        calibration of its service time).
    :param overcommit: vCPUs per CPU the host admits (``[place] cpu_overcommit``).
    :param timing: how long it runs.
    :param open_sample: which opens the guests' shims count under ``unicache`` (default:
        the agent's, every open; :data:`~unicache_sim.guest.opensample.SMALL_FILES_SAMPLE`
        is its opt-in).
    """

    flavors: tuple[Flavor, ...]
    policy: str
    seed: int
    rates: tuple[tuple[str, float], ...] = ()
    overcommit: float = 2.0
    timing: DensityTiming = field(default_factory=DensityTiming)
    open_sample: OpenSample = AGENT_OPEN_SAMPLE


@dataclass(frozen=True, slots=True)
class TenantResult:
    """One flavor of a point, over all its VMs.

    :param flavor: its name.
    :param vms: its VMs in the point.
    :param requests: requests measured (latency tenants).
    :param mean_us: mean request latency.
    :param p50_us: median.
    :param p95_us: 95th percentile (nearest rank), over every measured request of the flavor.
    :param p99_us: 99th percentile.
    :param worst_vm_p95_us: the highest p95 of one VM with at least ``MIN_VM_REQUESTS``.
    :param mb_per_s: bytes moved per measured second per VM (MB = 10^6 bytes).
    :param latencies_us: every measured request's latency, sorted (to pool seeds).
    """

    flavor: str
    vms: int
    requests: int
    mean_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    worst_vm_p95_us: float
    mb_per_s: float
    latencies_us: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PointOutcome:
    """What one point measured.

    :param admitted: whether the host admitted all N VMs (else nothing ran).
    :param refused: why not (the first refusal), or empty.
    :param tenants: per flavor present, in name order.
    :param seconds: simulated seconds measured.
    :param host_moves: vCPU moves of the host's scheduler, until the run stopped.
    :param guest_migrations: thread migrations of the guests' shims, until it stopped.
    :param rounds: the daemon's rounds decided (0 under linux).
    """

    admitted: bool
    refused: str
    tenants: tuple[TenantResult, ...]
    seconds: float
    host_moves: int
    guest_migrations: int
    rounds: int

    def tenant(self, flavor: str) -> TenantResult | None:
        """The result of one flavor, if present."""
        return next((t for t in self.tenants if t.flavor == flavor), None)


# Section: the run ------------------------------------------------------------------------


class _WindowHost:
    """The simulated host as the daemon's loop sees it: the observation of the interval
    that just ended, and actions on the whole host."""

    name = "simulated"

    def __init__(self, multihost: MultiHost) -> None:
        self.multihost = multihost
        self.window: Observation | None = None

    def observe(self) -> Observation | None:
        window, self.window = self.window, None
        return window

    def act(self, actions: Sequence[Action]) -> ActResult:
        return self.multihost.act(actions)


def run_point(topo: Topology, spec: PointSpec) -> PointOutcome:
    """Simulate one point (module docstring).

    :param topo: the machine model.
    :param spec: the point.
    :returns: what it measured.
    """
    if spec.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {spec.policy!r}")
    cfg = from_topology(topo)
    placed, starts_of, refused = _place(topo, cfg, spec)
    if refused:
        return PointOutcome(False, refused, (), 0.0, 0, 0, 0)
    run = _PointRun.start(topo, cfg, spec, placed, starts_of)
    marks, decided = run.run()
    engine, multihost, workers, hz = run.engine, run.multihost, run.workers, run.hz
    outcome = _measure(run.vms, workers, marks, run.t0, run.t1, run.t1 + run.window, hz)
    migrations = sum(engine.thread_stats(t).migrations for t in workers)
    return PointOutcome(
        True,
        "",
        outcome,
        (run.t1 - run.t0) / hz,
        multihost.moves,
        migrations - multihost.moves,
        decided,
    )


#: per VM, (vCPU -> the CPUs it may run on, vCPU -> its memory node)
_Placement = tuple[dict[int, frozenset[int]], dict[int, int]]


def _place(
    topo: Topology, cfg: SimConfig, spec: PointSpec
) -> tuple[list[_Placement], list[dict[int, int]], str]:
    """The VMs' placement under the point's policy.

    :returns: per VM its placement, under ``linux`` per VM the CPU each vCPU starts on,
        and the first refusal's reason (empty: every VM admitted).
    """
    flavors = spec.flavors
    if spec.policy == "unicache":
        placed, refused = place_unicache(topo, flavors, spec.overcommit)
        return placed, [], refused
    refused = admit_linux(topo, flavors, spec.overcommit)
    placed = []
    starts_of = linux_start_cpus(cfg, flavors) if not refused else []
    everywhere = frozenset(range(cfg.n_cpus))
    for f, starts in zip(flavors if not refused else (), starts_of, strict=True):
        affinity = dict.fromkeys(range(f.vcpus), everywhere)
        placed.append((affinity, {v: cfg.cpu_node[c] for v, c in starts.items()}))
    return placed, starts_of, refused


@dataclass(slots=True)
class _PointRun:
    """A point set up to run: the VMs on the host, their tenants' threads, and the
    daemon's loop under ``unicache`` (``rounds``: ``None`` under ``linux``)."""

    spec: PointSpec
    engine: _native.Engine
    vms: list[TenantVm]
    multihost: MultiHost
    window_host: _WindowHost
    rounds: Iterator[object] | None
    tenants: Tenants
    workers: dict[int, Worker]
    hz: float
    round_cycles: float

    @staticmethod
    def start(
        topo: Topology,
        cfg: SimConfig,
        spec: PointSpec,
        placed: list[_Placement],
        starts_of: list[dict[int, int]],
    ) -> _PointRun:
        """The VMs on the host with their data, the guests' shims and the daemon's loop
        under ``unicache``, and a started worker per vCPU of every busy VM."""
        hz = cfg.clock_ghz * 1e9
        round_cycles = spec.timing.round_s * hz
        engine = cfg.engine(seed=spec.seed)
        vms: list[TenantVm] = []
        for i, (name, flavor) in enumerate(zip(vm_names(spec.flavors), spec.flavors, strict=True)):
            affinity, nodes = placed[i]
            if spec.policy == "unicache":
                # each vCPU starts on the lowest CPU of its set; MultiHost spreads them below
                cpus = {v: min(s) for v, s in affinity.items()}
            else:
                cpus = starts_of[i]
            host = SimHost(cfg, engine, name, round_cycles, flavor.vcpus, affinity, cpus)
            vms.append(TenantVm(name, flavor, host, nodes))
        multihost = MultiHost(cfg, engine, [vm.host for vm in vms])
        if spec.policy == "unicache":
            multihost.place_vcpus()
        for vm in vms:
            add_data(engine, vm)
        chunk = scu_options_for(topo, Unify.LLC).chunk_size
        shims: dict[str, GuestShim] | None = None
        window_host = _WindowHost(multihost)
        rounds: Iterator[object] | None = None
        if spec.policy == "unicache":
            shims = {
                vm.name: GuestShim(vm.host, sample=spec.open_sample, seed=spec.seed) for vm in vms
            }
            policy = UnicachePolicy(topo, Unify.LLC)
            chunk = policy.scu.options.chunk_size
            rounds = run_rounds_sync(window_host, policy, RoundState())
        tenants = Tenants(engine, multihost, shims, chunk)
        workers = _start_workers(engine, multihost, tenants, vms, spec, hz)
        return _PointRun(
            spec, engine, vms, multihost, window_host, rounds, tenants, workers, hz, round_cycles
        )

    @property
    def window(self) -> float:
        """Cycles of one sampled interval."""
        return self.spec.timing.window_s * self.hz

    @property
    def t0(self) -> float:
        """Cycle at which the measured intervals start."""
        return self.spec.timing.warm_rounds * self.window

    @property
    def t1(self) -> float:
        """Cycle at which they end."""
        timing = self.spec.timing
        return (timing.warm_rounds + timing.measure_rounds) * self.window

    def run(self) -> tuple[dict[int, dict[int, int]], int]:
        """The sampled intervals: warm-up, measured, and one more for the measured
        requests to finish (or until none is left open).

        :returns: the bytes each worker had moved at the start (0) and the end (1) of
            the measured intervals, and the daemon's rounds decided.
        """
        engine, multihost, workers = self.engine, self.multihost, self.workers
        tenants = self.tenants
        timing, window, t0, t1 = self.spec.timing, self.window, self.t0, self.t1
        balance = timing.balance_interval_s * self.hz
        churn = random.Random(self.spec.seed * 7919)
        warm, measured = timing.warm_rounds, timing.measure_rounds
        marks: dict[int, dict[int, int]] = {}
        intervals = 0  # sampled intervals ended
        balances = 0
        decided = 0
        # after the measured intervals, the workers whose measured requests are not all done:
        # once none is left, nothing the rest of the run does can change what is measured
        unfinished: set[int] | None = None
        while intervals < warm + measured + 1:
            next_round = (intervals + 1) * window
            next_balance = (balances + 1) * balance
            deadline = min(next_round, next_balance)
            stop, tid = engine.run(deadline)
            if stop == "need":
                tenants.need(workers[tid], engine.thread_time(tid))
                if unfinished is not None and tid in unfinished:
                    if not _measuring(workers[tid], t0, t1):
                        unfinished.discard(tid)
                    if not unfinished:
                        break
                continue
            # the deadline came (or nothing runs before it)
            if deadline == next_balance:
                multihost.balance(churn, timing.float_prob)
                balances += 1
            if deadline == next_round:
                intervals += 1
                if intervals in (warm, warm + measured):
                    marks[intervals] = {t: engine.thread_stats(t).bytes for t in workers}
                if self.rounds is not None and intervals <= warm + measured:
                    ratio = self.round_cycles / window
                    self.window_host.window = multihost.observe(window, ratio)
                    next(self.rounds)
                    decided += 1
                if intervals == warm + measured:
                    unfinished = {t for t, w in workers.items() if _measuring(w, t0, t1)}
                    if not unfinished:
                        break
        return {0: marks[warm], 1: marks[warm + measured]}, decided


def _start_workers(
    engine: _native.Engine,
    multihost: MultiHost,
    tenants: Tenants,
    vms: list[TenantVm],
    spec: PointSpec,
    hz: float,
) -> dict[int, Worker]:
    """A guest thread per vCPU of every VM that is not idle, started in thread order;
    latency tenants get their flavor's request rate (closed loop without one)."""
    rates = dict(spec.rates)
    workers: dict[int, Worker] = {}
    for vm in vms:
        if vm.flavor.workload.kind is Kind.IDLE:
            continue
        for vcpu in range(vm.flavor.vcpus):
            tid = engine.add_thread(vm.host.vcpu_cpu[vcpu])
            multihost.add_thread(vm.name, tid, vcpu)
            rate = rates.get(vm.flavor.name, 0.0) if vm.flavor.latency_critical else 0.0
            workers[tid] = Worker(vm, vcpu, tid, rate, hz, spec.seed)
    for tid in sorted(workers):
        tenants.start(workers[tid])
    return workers


def _measure(
    vms: Sequence[TenantVm],
    workers: dict[int, Worker],
    marks: dict[int, dict[int, int]],
    t0: float,
    t1: float,
    t_end: float,
    hz: float,
) -> tuple[TenantResult, ...]:
    by_flavor: dict[str, list[TenantVm]] = {}
    for vm in vms:
        by_flavor.setdefault(vm.flavor.name, []).append(vm)
    workers_of: dict[str, list[Worker]] = {}
    for w in workers.values():
        workers_of.setdefault(w.vm.name, []).append(w)
    seconds = (t1 - t0) / hz
    out = []
    for name in sorted(by_flavor):
        members = by_flavor[name]
        lat_all: list[float] = []
        worst = math.nan
        moved = 0
        for vm in members:
            lat_vm: list[float] = []
            for w in workers_of.get(vm.name, []):
                lat_vm += _latencies(w, t0, t1, t_end)
                moved += marks[1][w.tid] - marks[0][w.tid]
            if len(lat_vm) >= MIN_VM_REQUESTS:
                p95 = _percentile(sorted(lat_vm), 0.95) / hz * 1e6
                worst = p95 if math.isnan(worst) else max(worst, p95)
            lat_all += lat_vm
        lat_all.sort()
        us = 1e6 / hz
        n = len(lat_all)
        out.append(
            TenantResult(
                name,
                len(members),
                n,
                sum(lat_all) / n * us if n else math.nan,
                _percentile(lat_all, 0.50) * us if n else math.nan,
                _percentile(lat_all, 0.95) * us if n else math.nan,
                _percentile(lat_all, 0.99) * us if n else math.nan,
                worst,
                moved / seconds / len(members) / 1e6 if seconds > 0 else math.nan,
                tuple(lat * us for lat in lat_all),
            )
        )
    return tuple(out)


def _measuring(w: Worker, t0: float, t1: float) -> bool:
    """Whether a request of the worker that arrived in [t0, t1) is not done yet (in
    service, or queued behind one)."""
    if w.serving is not None and t0 <= w.serving < t1:
        return True
    return w.rate > 0 and w.next_arrival < t1


def _latencies(w: Worker, t0: float, t1: float, t_end: float) -> list[float]:
    """Latencies (cycles) of the requests that arrived in [t0, t1); one still open at
    the end counts with what it has waited (a lower bound)."""
    out = [lat for arrival, lat in w.done if t0 <= arrival < t1]
    if w.rate <= 0:
        if w.serving is not None and t0 <= w.serving < t1:
            out.append(t_end - w.serving)
        return out
    pending = []
    if w.serving is not None:
        pending.append(w.serving)
    arrival = w.next_arrival
    while arrival < t1:  # arrived, not started
        pending.append(arrival)
        arrival += w.rng.expovariate(w.rate)
    out += [t_end - a for a in pending if t0 <= a < t1]
    return out


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    if not values:
        return math.nan
    return values[max(0, math.ceil(q * len(values)) - 1)]
