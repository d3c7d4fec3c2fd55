"""The MFC experiment (MFC paper §6.1-§6.2, Figures 3-5) with three baselines in one run.

* ``linux``: no unicache. Each thread stays on its vCPU; vCPUs float the way Linux's
  load balancer moves threads (a heuristic: every ``balance_interval`` a busy vCPU moves
  with probability ``float_prob``, mostly inside its LLC group).
* ``unicache``: vCPU i pinned on host CPU i (what OBS-X gives a VM with one vCPU per
  CPU) and, for every chunk a thread reads, the *same* ``MfcTable.mfc_access`` the live
  SCU policy runs (unicache.policy.mfc, Figure 2) decides the unit and the load type,
  synchronously, as MFC's kernel did. With a host-guest lag, the live system's loop runs
  instead: every ``lag`` the simulated host (unicache_sim.simhost) observes, the combined
  OBS + SCU policy (unicache.policy.round) decides, the host pins vCPUs and publishes the
  placement table, and the guest's shim follows the last table it received.
* ``oracle``: one shared cache of the machine's total on-chip size (every level's
  instances merged), free migration: the limit.

Workload: the read microbenchmark (pick a file at random — uniform or Zipf 1/n — and
pread it whole) or grep/wc/md5sum as the same reads plus calibrated compute per byte.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from unicache.model import ChunkId
from unicache.policy.mfc import ChunkKey, MfcTable, UnitView
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu import scu_options_for
from unicache.topology import Topology, Unify

from unicache_sim import _native
from unicache_sim.calibration import CYCLES_PER_BYTE
from unicache_sim.config import SimConfig, from_topology, oracle
from unicache_sim.simhost import GuestShim, SimHost

BASELINES = ("linux", "unicache", "oracle")
WORKLOADS = tuple(CYCLES_PER_BYTE)
DISTRIBUTIONS = ("uniform", "zipf")
#: how unicache runs: the product's loop, or the in-kernel MFC what-if
PATHS = ("live", "whatif")
#: equal threads in every baseline, or MFC §6.3's 16 under Linux and 32 under MFC
SETUPS = ("equal", "parallel")
#: co-runners of the observations paper, in a second VM on the last CPU
CORUNNERS = ("none", "mergesort", "cachebuster", "spinloop")
MIB = 1024 * 1024
#: the VM the simulated threads belong to
VM_NAME = "vm0"
#: policy rounds the unicache baseline warms up for when it runs with a lag
WARM_ROUNDS = 10


@dataclass(frozen=True, slots=True)
class MfcSpec:
    """One experiment.

    :param workload: read, grep, wc or md5sum.
    :param dist: uniform or zipf.
    :param threads: reader threads (one VM, one vCPU per host CPU).
    :param file_bytes: size of every file (MFC §6.1: 256 KiB).
    :param dram_bw_scale: factor on DRAM bandwidth (§6.5.1).
    :param lag_cycles: host-to-guest lag (0: synchronous ``mfc_access`` per read; else the
        round period of the simulated host running OBS + SCU).
    :param warm_factor: warm-up reads, in working sets (at least ``min_warm_bytes``).
    :param measure_factor: measured reads, in working sets (at least ``min_measure_bytes``).
    :param min_warm_bytes: smallest warm-up.
    :param min_measure_bytes: smallest measurement.
    :param balance_interval_s: Linux load-balancing period.
    :param float_prob: probability that a busy vCPU is moved at a balancing tick.
    :param update_use_s: period of MFC's ``update_use`` aging (Figure 2 lines 45-47).
    :param corunner: a co-runner thread in a second VM, on the last CPU: ``mergesort``
        (a VM-intensive sort over 64-byte records, reading one buffer and writing another),
        ``cachebuster`` (streams over four times the on-chip cache) or ``spinloop``.
    :param file_placement: ``spread`` — file i's pages on node i mod nodes, as files
        written before the run by processes all over the machine; ``first_touch`` — on the
        node of the first thread that reads them (this favours a baseline that stays put).
    :param background_bytes: footprint of the other users of the caches, per CPU (MFC §4.6:
        "program text and data", the kernel, other processes, small files): an object on the
        CPU's node that the CPU reads every ``background_period_s`` outside the reader
        threads, in every baseline alike (the oracle's merged caches get all of them). 0 (the
        default) turns it off; docs/simulator.md shows what it does to Figure 3.
    :param background_period_s: how often each CPU's other users read their footprint.
    :param path: ``live`` — the product's loop (daemon round, agent report and table delay
        from their defaults; the guest follows the shim's rule); ``whatif`` — the
        synchronous per-read ``mfc_access`` of an in-kernel MFC (a what-if, not the product).
    :param setup: ``equal`` — every baseline runs ``threads`` readers; ``parallel`` — MFC
        §6.3's set-up: ``threads`` instances under Linux, twice as many under unicache.
    :param seed: seed of file choice, page placement and floating.
    """

    workload: str = "read"
    dist: str = "uniform"
    threads: int = 1
    file_bytes: int = 256 * 1024
    dram_bw_scale: float = 1.0
    lag_cycles: float = 0.0
    warm_factor: float = 3.0
    measure_factor: float = 4.0
    min_warm_bytes: int = 32 * MIB
    min_measure_bytes: int = 64 * MIB
    balance_interval_s: float = 0.004
    float_prob: float = 0.05
    update_use_s: float = 0.4
    file_placement: str = "spread"
    corunner: str = "none"
    # MFC §4.6: "MFC must share the caches with other uses such as program text and data"
    background_bytes: int = 0
    background_period_s: float = 0.004
    path: str = "live"
    setup: str = "equal"
    seed: int = 1


@dataclass(frozen=True, slots=True)
class BaselineResult:
    """One baseline at one working set.

    :param baseline: linux, unicache or oracle.
    :param mb_per_s: file bytes read per second (MB = 10^6 bytes, as the paper).
    :param dram_per_byte: DRAM bytes read per file byte.
    :param migrations: thread migrations per file read.
    :param reads: files read in the measured phase.
    :param seconds: simulated seconds of the measured phase.
    """

    baseline: str
    mb_per_s: float
    dram_per_byte: float
    migrations: float
    reads: int
    seconds: float


@dataclass(frozen=True, slots=True)
class PointResult:
    """All baselines at one working-set size.

    :param ws_mb: working set in MiB.
    :param results: one per baseline, in ``BASELINES`` order.
    """

    ws_mb: float
    results: tuple[BaselineResult, ...]

    def get(self, baseline: str) -> BaselineResult:
        """The result of one baseline."""
        return next(r for r in self.results if r.baseline == baseline)

    @property
    def speedup(self) -> float:
        """unicache over linux."""
        return self.get("unicache").mb_per_s / self.get("linux").mb_per_s

    @property
    def of_oracle(self) -> float:
        """unicache as a fraction of the oracle."""
        return self.get("unicache").mb_per_s / self.get("oracle").mb_per_s


class _Picker:
    """Chooses the next file: uniform, or Zipf with P(n) proportional to 1/n."""

    def __init__(self, n_files: int, dist: str, rng: random.Random) -> None:
        self.n = n_files
        self.rng = rng
        self.cdf: list[float] = []
        if dist == "zipf":
            acc = 0.0
            for k in range(1, n_files + 1):
                acc += 1.0 / k
                self.cdf.append(acc)
            self.cdf = [c / acc for c in self.cdf]

    def next(self) -> int:
        if not self.cdf:
            return self.rng.randrange(self.n)
        import bisect

        return min(bisect.bisect_left(self.cdf, self.rng.random()), self.n - 1)


class _Baseline:
    """How one baseline places threads and issues reads."""

    name = ""

    def __init__(self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine) -> None:
        self.cfg = cfg
        self.spec = spec
        self.engine = engine
        self.compute = CYCLES_PER_BYTE[spec.workload]

    def start_cpu(self, thread: int) -> int:
        return thread % self.cfg.n_cpus

    def attach(self, tids: list[int]) -> None:
        """The reader threads, once created (thread i runs on vCPU i)."""

    def read(self, tid: int, obj: int, file_index: int) -> None:
        self.engine.push_access(tid, obj, 0, self.spec.file_bytes, "read", self.compute)

    def tick(self, now: float, tids: list[int]) -> None:
        """Periodic work at simulated time ``now``."""


class _Linux(_Baseline):
    name = "linux"

    def __init__(self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine) -> None:
        super().__init__(cfg, spec, engine)
        self.rng = random.Random(spec.seed * 7919)

    def tick(self, now: float, tids: list[int]) -> None:
        # A heuristic of CFS load balancing: a busy vCPU thread moves now and then, to an
        # idle CPU of its own LLC group (wake-affine) four times out of five.
        busy = {self.engine.thread_cpu(t) for t in tids}
        for tid in tids:
            if self.rng.random() >= self.spec.float_prob:
                continue
            cpu = self.engine.thread_cpu(tid)
            group = self.cfg.group_of(cpu)
            same = self.rng.random() < 0.8
            idle = [
                c
                for c in range(self.cfg.n_cpus)
                if c not in busy and (self.cfg.group_of(c) == group) == same
            ]
            if not idle:
                continue
            to = self.rng.choice(idle)
            cost = _migration_cost(self.cfg, cpu, to)
            self.engine.move_thread(tid, to, cost)
            busy.discard(cpu)
            busy.add(to)


class _Oracle(_Baseline):
    name = "oracle"


class _Unicache(_Baseline):
    """Drives unicache.policy.mfc.MfcTable, the table the live SCU policy runs."""

    name = "unicache"

    def __init__(
        self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine, topo: Topology
    ) -> None:
        super().__init__(cfg, spec, engine)
        self.options = scu_options_for(topo, Unify.LLC)
        self.units = topo.units(Unify.LLC)
        self.unit_of_cpu = {c: u.id for u in self.units for c in u.cpus}
        self.cpus_of_unit = {u.id: sorted(u.cpus) for u in self.units}
        self.table = MfcTable(self.options.params, self._views([]))
        self.allowed = frozenset(u.id for u in self.units)
        self.next_update = spec.update_use_s * cfg.clock_ghz * 1e9
        #: every live thread (readers and co-runner), for load-aware placement
        self.tids: list[int] = []

    def _views(self, tids: list[int]) -> list[UnitView]:
        load: dict[int, float] = {}
        for tid in tids:
            unit = self.unit_of_cpu[self.engine.thread_cpu(tid)]
            load[unit] = load.get(unit, 0.0) + 1.0
        return [
            UnitView(u.id, u.capacity_bytes, 0, load.get(u.id, 0.0) / len(u.cpus))
            for u in self.units
        ]

    def _cpu_for(self, unit: int, key: ChunkKey, tid: int) -> int:
        # Spread a unit's chunks over its cores so their private levels all hold data: the
        # chunk's own core when no other thread runs there, else the least busy core.
        cpus = self.cpus_of_unit[unit]
        home = cpus[(key.chunk.file_id * 31 + key.chunk.index) % len(cpus)]
        load = dict.fromkeys(cpus, 0)
        for other in self.tids:
            if other != tid:
                cpu = self.engine.thread_cpu(other)
                if cpu in load:
                    load[cpu] += 1
        if load[home] == 0:
            return home
        return min(cpus, key=lambda c: (load[c], c != home, c))

    def read(self, tid: int, obj: int, file_index: int) -> None:
        if len(self.tids) > 1:
            # run-queue lengths as the scheduler sees them now (Figure 2 lines 31-33)
            self.table.set_units(self._views(self.tids))
        chunk = self.options.chunk_size
        size = self.spec.file_bytes
        offset = 0
        index = 0
        while offset < size:
            length = min(chunk, size - offset)
            key = ChunkKey(VM_NAME, ChunkId(file_index, index))
            cpu = self.engine.thread_cpu(tid)
            access = self.table.mfc_access(key, length, self.unit_of_cpu[cpu], self.allowed)
            unit, caching = access.unit, access.caching
            target = cpu if unit == self.unit_of_cpu[cpu] and not caching else None
            if target is None:
                target = self._cpu_for(unit, key, tid) if caching else cpu
            if target != cpu:
                self.engine.push_migrate(tid, target, _migration_cost(self.cfg, cpu, target))
            self.engine.push_access(
                tid, obj, offset, length, "read" if caching else "nt", self.compute
            )
            offset += length
            index += 1

    def tick(self, now: float, tids: list[int]) -> None:
        self.tids = tids
        self.table.set_units(self._views(tids))
        if now >= self.next_update:
            self.table.update_use(self.options.max_chunks)  # Figure 2 lines 45-47
            self.next_update = now + self.spec.update_use_s * self.cfg.clock_ghz * 1e9


class _UnicacheRounds(_Baseline):
    """The live loop: SimHost observes, UnicachePolicy (OBS + SCU) decides, SimHost acts."""

    name = "unicache"

    def __init__(
        self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine, topo: Topology
    ) -> None:
        super().__init__(cfg, spec, engine)
        self.host = SimHost(cfg, engine, VM_NAME, spec.lag_cycles)
        self.shim = GuestShim(self.host)
        self.policy = UnicachePolicy(topo, Unify.LLC)
        self.state = RoundState()
        self.policy.start(self.state)
        self.chunk = self.policy.scu.options.chunk_size
        self.next_round = spec.lag_cycles

    def attach(self, tids: list[int]) -> None:
        for i, tid in enumerate(tids):
            self.host.add_thread(tid, i % self.cfg.n_cpus)

    def read(self, tid: int, obj: int, file_index: int) -> None:
        size = self.spec.file_bytes
        offset = 0
        index = 0
        while offset < size:
            length = min(self.chunk, size - offset)
            chunk = ChunkId(file_index, index)
            self.shim.read_chunk(tid, obj, chunk, offset, length, self.compute)
            offset += length
            index += 1

    def tick(self, now: float, tids: list[int]) -> None:
        while now >= self.next_round:
            obs = self.host.observe()
            if obs is not None:
                decision, self.state = self.policy.decide(obs, self.state)
                self.host.act(decision.actions)
            self.next_round += self.spec.lag_cycles


class _CoRunner:
    """The co-runner's endless work, one step per call."""

    #: bytes per step
    STEP = 1024 * 1024
    #: mergesort compute per byte (a comparison and a move per 64-byte record; an estimate)
    SORT_CYCLES_PER_BYTE = 0.5

    def __init__(self, kind: str, engine: _native.Engine, cfg: SimConfig) -> None:
        self.kind = kind
        self.engine = engine
        self.offset = 0
        if kind == "cachebuster":
            self.size = 4 * cfg.on_chip_bytes()
            self.regions = [engine.add_object(self.size)]
        elif kind == "mergesort":
            self.size = 16 * MIB
            self.regions = [engine.add_object(self.size), engine.add_object(self.size)]
        else:
            self.size = 0
            self.regions = []

    def step(self, tid: int) -> None:
        if self.kind == "spinloop":
            self.engine.push_compute(tid, 1e6)
            return
        length = min(self.STEP, self.size - self.offset)
        if self.kind == "cachebuster":
            self.engine.push_access(tid, self.regions[0], self.offset, length, "read", 0.0)
        else:
            # one merge step: read a slice of the source run, write it merged to the target
            src, dst = self.regions
            self.engine.push_access(
                tid, src, self.offset, length, "read", self.SORT_CYCLES_PER_BYTE
            )
            self.engine.push_access(tid, dst, self.offset, length, "write", 0.0)
        self.offset += length
        if self.offset >= self.size:
            self.offset = 0
            self.regions.reverse()


class _Background:
    """The other users of the caches (MFC §4.6): per CPU, a footprint read every period."""

    def __init__(self, spec: MfcSpec, engine: _native.Engine, cfg: SimConfig) -> None:
        self.engine = engine
        self.size = spec.background_bytes
        self.period = spec.background_period_s * cfg.clock_ghz * 1e9
        on = self.size > 0 and self.period > 0
        self.objects = [engine.add_object(self.size, "node", n) for n in cfg.cpu_node] if on else []
        self.next = self.period if on else math.inf

    def run_until(self, now: float) -> None:
        """Read every CPU's footprint once per period elapsed up to ``now``.

        :param now: simulated time, cycles.
        """
        while self.next <= now:
            for cpu, obj in enumerate(self.objects):
                self.engine.touch(cpu, obj, 0, self.size, "read", self.next)
            self.next += self.period


def _migration_cost(cfg: SimConfig, src: int, dst: int) -> float:
    if src == dst:
        return 0.0
    if cfg.group_of(src) == cfg.group_of(dst):
        return cfg.migration_cycles
    return cfg.migration_cycles_remote


def run_baseline(
    baseline: str, topo: Topology, cfg: SimConfig, spec: MfcSpec, ws_bytes: int
) -> BaselineResult:
    """Simulate one baseline at one working-set size.

    :param baseline: linux, unicache or oracle.
    :param topo: the machine model.
    :param cfg: its simulator configuration (the oracle machine is derived here).
    :param spec: the experiment.
    :param ws_bytes: working set (number of files x file size).
    :returns: throughput and DRAM traffic of the measured phase.
    """
    machine = oracle(cfg) if baseline == "oracle" else cfg
    engine = machine.engine(seed=spec.seed)
    policy: _Baseline
    if baseline == "linux":
        policy = _Linux(machine, spec, engine)
    elif baseline == "oracle":
        policy = _Oracle(machine, spec, engine)
    elif spec.lag_cycles > 0:
        policy = _UnicacheRounds(machine, spec, engine, topo)
    else:
        policy = _Unicache(machine, spec, engine, topo)
    n_files = max(1, ws_bytes // spec.file_bytes)
    n_nodes = len(machine.nodes)
    if spec.file_placement == "spread":
        files = [engine.add_object(spec.file_bytes, "node", i % n_nodes) for i in range(n_files)]
    else:
        files = [engine.add_object(spec.file_bytes) for _ in range(n_files)]
    picker = _Picker(n_files, spec.dist, random.Random(spec.seed))
    tids = [engine.add_thread(policy.start_cpu(t)) for t in range(spec.threads)]
    policy.attach(tids)
    corunner = _CoRunner(spec.corunner, engine, machine)
    background = _Background(spec, engine, machine)
    co_tid = -1
    if spec.corunner != "none":
        co_tid = engine.add_thread(machine.n_cpus - 1)
    ws = n_files * spec.file_bytes
    warm = max(spec.min_warm_bytes, int(spec.warm_factor * ws))
    measure = max(spec.min_measure_bytes, int(spec.measure_factor * ws))
    tick = spec.balance_interval_s * machine.clock_ghz * 1e9
    if baseline == "unicache" and spec.lag_cycles > 0:
        tick = min(tick, spec.lag_cycles)
    # with a host-guest lag, warm up for at least WARM_ROUNDS policy rounds too
    warm_time = WARM_ROUNDS * spec.lag_cycles if baseline == "unicache" else 0.0
    issued = 0
    measuring = False
    start_time = 0.0
    reads = 0
    next_tick = tick
    live = set(tids)
    while live:
        deadline = min(next_tick, background.next)
        stop, tid = engine.run(deadline)
        if stop == "deadline":
            background.run_until(deadline)
            if deadline >= next_tick:
                policy.tick(next_tick, sorted(live | ({co_tid} if co_tid >= 0 else set())))
                next_tick += tick
            continue
        if stop == "idle":
            break
        if tid == co_tid:
            corunner.step(tid)
            continue
        if not measuring and issued >= warm and engine.thread_time(tid) >= warm_time:
            measuring = True
            engine.reset_stats()
            start_time = min(engine.thread_time(t) for t in live)
            issued = 0
        if measuring and issued >= measure:
            engine.retire(tid)
            live.discard(tid)
            continue
        index = picker.next()
        policy.read(tid, files[index], index)
        issued += spec.file_bytes
        reads += 1 if measuring else 0
    end_time = max(engine.thread_time(t) for t in tids)
    stats = [engine.thread_stats(t) for t in tids]
    file_bytes = sum(s.bytes for s in stats)
    # the readers' own DRAM lines (a co-runner's traffic is not the benchmark's)
    dram_bytes = sum(s.dram_lines for s in stats) * machine.line_size
    seconds = (end_time - start_time) / (machine.clock_ghz * 1e9)
    migrations = sum(s.migrations for s in stats)
    return BaselineResult(
        baseline,
        file_bytes / seconds / 1e6 if seconds > 0 else math.nan,
        dram_bytes / file_bytes if file_bytes else math.nan,
        migrations / reads if reads else 0.0,
        reads,
        seconds,
    )


def run_mfc(
    topo: Topology,
    spec: MfcSpec,
    ws_mb: list[float],
    progress: Callable[[str], None] | None = None,
) -> list[PointResult]:
    """Run every baseline at every working-set size.

    :param topo: the machine model.
    :param spec: the experiment.
    :param ws_mb: working sets in MiB.
    :param progress: called after each simulated (size, baseline) with a label.
    :returns: one point per size, in the given order.
    """
    cfg = from_topology(topo, spec.dram_bw_scale)
    out = []
    for ws in ws_mb:
        results = []
        for baseline in BASELINES:
            results.append(run_baseline(baseline, topo, cfg, spec, int(ws * MIB)))
            if progress is not None:
                progress(f"{ws:g} MiB {baseline}")
        out.append(PointResult(ws, tuple(results)))
    return out
