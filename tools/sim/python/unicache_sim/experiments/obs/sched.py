"""The observations paper's experiments on the simulated host: OBS-X, OBS-L and OBS-C as
the daemon runs them, against a Linux-like scheduler.

Each task of the paper is a one-vCPU VM running one program of
:mod:`unicache_sim.experiments.obs.tasks` forever. The host shares each CPU among the
vCPUs queued on it in CFS timeslices weighted as the daemon's weight backend weights them
(:class:`unicache_sim.guest.cfs.SlicedHost`). Three ways to run a set of tasks:

* ``linux``: no daemon. The tasks start in a random order, each on the CPU with the
  fewest tasks (fork balancing), and stay there (the load is balanced, so CFS's balancer
  has nothing to move); the one started first on a CPU runs first (its vruntime).
* ``obs``: the same start, then the daemon's loop
  (:func:`unicache.loop.run_rounds_sync`, :class:`unicache.policy.round.UnicachePolicy`,
  ``ObsOptions`` from the paper: OBS-X, OBS-L, OBS-C with ``c_credit``) every round: it
  observes each vCPU's LLC misses per cycle, pins (``PinVcpu``: the vCPU's CPU set) and
  sets ``cpu.weight`` (``SetCpuWeight``), which the host applies as the daemon's backend
  would.
* ``worst``: the paper's worst case ``[cb, sl][cb, sl]``: on every CPU heavy then light
  tasks, pinned, in phase (a heavy task runs first on every CPU).

Tasks' names are drawn at random (``vmNN`` in a shuffled order of kinds), so the policy's
sort by vCPU id does not group kinds by chance. A scenario may swap the programs of a
cachebuster VM and a spinloop VM every ``swap_every`` rounds (the paper's tasks restart
and "the overall workload changes over time"), which is what OBS-X's rebalance answers
(Figure 3).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from unicache.errors import ConfigError
from unicache.loop import RoundResult, run_rounds_sync
from unicache.model import VcpuId
from unicache.policy.obs.credit import C_CREDIT
from unicache.policy.obs.options import obs_options_for
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.topology import Topology, Unify

from unicache_sim.engine.config import SimConfig, from_topology
from unicache_sim.experiments.obs.tasks import Program, kind_of
from unicache_sim.guest.cfs import SlicedHost, WeightBackend
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.simhost import SimHost

#: how a run schedules its tasks
Mode = Literal["linux", "obs", "worst"]
MODES: tuple[Mode, ...] = ("linux", "obs", "worst")
#: CFS's target latency (``sysctl_sched_latency``, 6 ms scaled by 1 + log2(CPUs)) and its
#: floor per task (``sysctl_sched_min_granularity``, 0.75 ms, likewise scaled)
SCHED_LATENCY_S = 0.006
SCHED_MIN_GRANULARITY_S = 0.00075


def cfs_slice_s(n_cpus: int, tasks: int) -> float:
    """CFS's timeslice for ``tasks`` always-runnable tasks on ``n_cpus`` CPUs.

    :returns: ``latency / tasks per CPU``, at least the minimum granularity, both scaled by
        ``1 + log2(CPUs)`` as the kernel scales them.
    """
    scale = 1 + int(math.log2(max(1, n_cpus)))
    per_cpu = max(1, math.ceil(tasks / max(1, n_cpus)))
    return max(SCHED_LATENCY_S * scale / per_cpu, SCHED_MIN_GRANULARITY_S * scale)


def round_slice_s(n_cpus: int, tasks: int, round_s: float) -> float:
    """CFS's timeslice, stretched so that a round holds whole turns of every CPU's queue:
    each task then runs as many slices in every round (a round that cut a turn would
    measure some tasks a slice more than others, 1 in 4 with four tasks a CPU)."""
    per_cpu = max(1, math.ceil(tasks / max(1, n_cpus)))
    turns = max(1, round(round_s / (per_cpu * cfs_slice_s(n_cpus, tasks))))
    return round_s / (turns * per_cpu)


@dataclass(frozen=True, slots=True)
class ObsSpec:
    """One run's set-up.

    :param tasks: the program of each VM (names of :data:`.tasks.KINDS`).
    :param cpus: the host CPUs the tasks may use (``None``: all): the paper's OBS-L runs
        used the two cores of one LLC group.
    :param round_ms: the daemon's round period (its ``--interval``).
    :param warm_rounds: rounds before the measurement (the daemon's first rounds).
    :param rounds: measured rounds.
    :param c_credit: OBS-C's ``c_credit``.
    :param backend: how the host applies ``SetCpuWeight``.
    :param swap_every: every so many rounds a cachebuster VM and a spinloop VM swap
        programs (0: never).
    :param seed: random seed (start order, names, random blocks, page frames).
    """

    tasks: tuple[str, ...]
    cpus: tuple[int, ...] | None = None
    round_ms: float = 30.0
    warm_rounds: int = 2
    rounds: int = 6
    c_credit: float = C_CREDIT
    backend: WeightBackend = "libvirt"
    swap_every: int = 0
    seed: int = 1

    def check(self) -> None:
        """:raises ConfigError: naming the bad parameter."""
        for name in self.tasks:
            kind_of(name)
        if not self.tasks:
            raise ConfigError("a run needs at least one task")
        if self.round_ms <= 0 or self.rounds < 1 or self.warm_rounds < 1:
            raise ConfigError("--round-ms must be positive, rounds at least 1")
        if not 0.0 <= self.c_credit < 0.5:
            raise ConfigError(f"c_credit must be in [0, 0.5), not {self.c_credit}")


@dataclass(frozen=True, slots=True)
class TaskResult:
    """One VM's task over the measured rounds.

    :param vm: the VM.
    :param kind: the program it ran at the end.
    :param work_per_s: work per simulated second (bytes, or compute cycles for spinloop).
    :param cpu_share: the fraction of the measured time its vCPU ran.
    :param misses_per_kcycle: its LLC misses per thousand cycles it ran (OBS's weight x 1000).
    """

    vm: str
    kind: str
    work_per_s: float
    cpu_share: float
    misses_per_kcycle: float


@dataclass(frozen=True, slots=True)
class ObsRun:
    """One run.

    :param mode: linux, obs or worst.
    :param seed: its seed.
    :param tasks: per VM, in name order.
    :param heavy_per_group: per round (warm-up included), how many cachebusters ran in
        each LLC group (by their CPU at the round's end).
    :param group_moves: vCPU moves between LLC groups during the measured rounds.
    :param actions: the daemon's actions by kind over the run (empty under linux/worst).
    """

    mode: Mode
    seed: int
    tasks: tuple[TaskResult, ...]
    heavy_per_group: tuple[tuple[int, ...], ...]
    group_moves: int
    actions: dict[str, int] = field(default_factory=dict)

    def by_kind(self, kind: str) -> list[TaskResult]:
        """The tasks that ran ``kind`` at the end."""
        return [t for t in self.tasks if t.kind == kind]


def _names(spec: ObsSpec, rng: random.Random) -> list[tuple[str, str]]:
    """(VM name, program) per task, names in a random order of the tasks."""
    order = list(spec.tasks)
    rng.shuffle(order)
    return [(f"vm{i:02d}", kind) for i, kind in enumerate(order)]


def _start(
    cfg: SimConfig, names: list[tuple[str, str]], mode: Mode, rng: random.Random
) -> tuple[dict[str, int], dict[str, int], bool]:
    """Where each task starts, its start order, and whether it is pinned there.

    :returns: (CPU per VM, start rank per VM (its initial vruntime), pinned).
    """
    cpus = list(range(cfg.n_cpus))
    if mode == "worst":
        # heavy tasks first on every CPU, then the light ones, all in phase
        ranked = sorted(names, key=lambda nk: (kind_of(nk[1]).cache_class != "heavy", nk[0]))
        cpu_of = {vm: cpus[i % len(cpus)] for i, (vm, _) in enumerate(ranked)}
        rank = {vm: i // len(cpus) for i, (vm, _) in enumerate(ranked)}
        return cpu_of, rank, True
    order = [vm for vm, _ in names]
    rng.shuffle(order)
    load = dict.fromkeys(cpus, 0)
    cpu_of = {}
    for vm in order:
        # fork balancing: the CPU with the fewest tasks (ties: a random one of them)
        fewest = min(load.values())
        cpu = rng.choice([c for c in cpus if load[c] == fewest])
        cpu_of[vm] = cpu
        load[cpu] += 1
    return cpu_of, {vm: i for i, vm in enumerate(order)}, False


def run_obs(
    topo: Topology,
    spec: ObsSpec,
    mode: Mode,
    on_round: Callable[[RoundResult], None] | None = None,
) -> ObsRun:
    """Run one set of tasks under one mode.

    :param topo: the machine (restricted to ``spec.cpus`` when given).
    :param spec: the set-up.
    :param mode: linux, obs or worst.
    :param on_round: under ``obs``, called with every round of the daemon's loop.
    :returns: the run.
    :raises ConfigError: on a bad set-up.
    """
    spec.check()
    if spec.cpus is not None:
        topo = topo.keep_only(spec.cpus)
    cfg = from_topology(topo)
    hz = cfg.clock_ghz * 1e9
    rng = random.Random(spec.seed)
    engine = cfg.engine(seed=spec.seed)
    names = _names(spec, rng)
    programs = {
        vm: Program(kind_of(k), engine, cfg, random.Random(rng.random())) for vm, k in names
    }
    cpu_of, rank, pinned = _start(cfg, names, mode, rng)
    round_cycles = spec.round_ms / 1e3 * hz
    everywhere = frozenset(range(cfg.n_cpus))
    hosts = []
    for vm, _ in names:
        where = frozenset({cpu_of[vm]}) if pinned else everywhere
        hosts.append(SimHost(cfg, engine, vm, round_cycles, 1, {0: where}, {0: cpu_of[vm]}))
    multihost = MultiHost(cfg, engine, hosts)
    for vm, _ in names:
        multihost.add_thread(vm, engine.add_thread(cpu_of[vm]), 0)
    slice_cycles = round_slice_s(cfg.n_cpus, len(names), spec.round_ms / 1e3) * hz
    host = SlicedHost(
        multihost, spec.backend, slice_cycles, {VcpuId(vm, 0): rank[vm] * 1.0 for vm, _ in names}
    )
    rounds: Iterator[RoundResult] | None = None
    if mode == "obs":
        options = obs_options_for(topo, c_credit=spec.c_credit)
        policy = UnicachePolicy(topo, Unify.LLC, obs_options=options)
        rounds = run_rounds_sync(host, policy, RoundState())
    swap_rng = random.Random(spec.seed * 7919)
    n_groups = max(cfg.group_of(c) for c in range(cfg.n_cpus)) + 1
    heavy: list[tuple[int, ...]] = []
    actions: dict[str, int] = {}
    work: dict[str, float] = dict.fromkeys(programs, 0.0)
    marks: dict[str, tuple[float, float, float]] = {}
    group_moves = 0
    t0 = 0.0
    for r in range(spec.warm_rounds + spec.rounds):
        if spec.swap_every and r and r % spec.swap_every == 0:
            _swap(programs, swap_rng)
        if r == spec.warm_rounds:
            t0 = host.now
            marks = {vm: (work[vm], *_ran(host, vm)) for vm in programs}
        before = {h.vm: cfg.group_of(h.vcpu_cpu[0]) for h in hosts}
        run_slices(host, programs, work, round_cycles)
        if rounds is not None:
            rnd = next(rounds)
            if on_round is not None:
                on_round(rnd)
            for action in rnd.result.applied:
                key = type(action).__name__
                actions[key] = actions.get(key, 0) + 1
        if r >= spec.warm_rounds:
            group_moves += sum(1 for h in hosts if cfg.group_of(h.vcpu_cpu[0]) != before[h.vm])
        per_group = [0] * n_groups
        for h in hosts:
            if programs[h.vm].kind.name == "cachebuster":
                per_group[cfg.group_of(h.vcpu_cpu[0])] += 1
        heavy.append(tuple(per_group))
    results = _task_results(host, programs, work, marks, t0, hz)
    return ObsRun(mode, spec.seed, results, tuple(heavy), group_moves, actions)


def _task_results(
    host: SlicedHost,
    programs: dict[str, Program],
    work: dict[str, float],
    marks: dict[str, tuple[float, float, float]],
    t0: float,
    hz: float,
) -> tuple[TaskResult, ...]:
    """Each task's work rate, CPU share and LLC misses per kilocycle since ``t0``, from
    its marks then (work, cycles run, misses)."""
    elapsed = host.now - t0
    results = []
    for vm in sorted(programs):
        work0, cycles0, misses0 = marks[vm]
        cycles, misses = _ran(host, vm)
        cycles -= cycles0
        results.append(
            TaskResult(
                vm,
                programs[vm].kind.name,
                (work[vm] - work0) / (elapsed / hz),
                cycles / elapsed,
                1000.0 * (misses - misses0) / cycles if cycles > 0 else 0.0,
            )
        )
    return tuple(results)


def _ran(host: SlicedHost, vm: str) -> tuple[float, float]:
    """(cycles run, LLC misses) of a VM's vCPU so far."""
    st = host.engine.thread_stats(host.thread(VcpuId(vm, 0)))
    return st.compute_cycles + st.stall_cycles + st.migration_cycles, float(
        st.dram_lines + st.c2c_lines
    )


def _swap(programs: dict[str, Program], rng: random.Random) -> None:
    """A cachebuster VM and a spinloop VM swap programs (one exits, the other starts)."""
    busters = sorted(vm for vm, p in programs.items() if p.kind.name == "cachebuster")
    spinners = sorted(vm for vm, p in programs.items() if p.kind.name == "spinloop")
    if busters and spinners:
        a, b = rng.choice(busters), rng.choice(spinners)
        programs[a], programs[b] = programs[b], programs[a]


def run_slices(
    host: SlicedHost, programs: dict[str, Program], work: dict[str, float], cycles: float
) -> None:
    """Run the host's timeslices for ``cycles``, feeding each running vCPU its program.

    :param host: the host (one one-vCPU VM per program).
    :param programs: VM -> its program.
    :param work: VM -> work done so far (added to).
    :param cycles: how long.
    """
    end = host.now + cycles
    engine = host.engine
    while host.now < end - 1.0:
        running = set(host.begin_slice(min(host.slice_cycles, end - host.now)).values())
        while True:
            stop, tid = engine.run(host.slice_end)
            if stop != "need":
                break
            vcpu = host.vcpu_of(tid)
            if vcpu in running and engine.thread_time(tid) < host.slice_end:
                work[vcpu.vm] += programs[vcpu.vm].step(tid)
            else:
                # its slice is over: it waits (a sleep until its own clock holds nothing)
                engine.push_sleep(tid, engine.thread_time(tid))
        host.end_slice()
