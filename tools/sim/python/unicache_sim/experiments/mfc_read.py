"""The MFC experiment (MFC paper §6.1-§6.3, Figures 3-7) with three baselines in one run.

* ``linux``: no unicache. Each thread stays on its vCPU; vCPUs float the way Linux's
  load balancer moves threads (a heuristic: every ``balance_interval`` a busy vCPU moves
  with probability ``float_prob``, mostly inside its LLC group).
* ``unicache``: by default the product (``path="live"``): the simulated host runs the
  daemon's loop at its default round period (OBS + SCU, ``unicache.policy.round``), the
  guest follows the published tables with the shim's rule (``unicache_sim.shimrule``).
  ``path="whatif"`` runs instead the in-kernel MFC what-if: ``mfc_access`` synchronously
  on every read, as MFC's kernel did — a figure of that path is not a figure of unicache.
* ``linux-same-readers`` (the parallel set-up only): Linux with unicache's reader count.
* ``oracle``: one shared cache of the machine's total on-chip size (every level's
  instances merged), free migration: the limit.

Set-ups (``setup``): ``equal`` runs ``threads`` readers in every baseline; ``parallel`` is
MFC §6.3's: ``threads`` instances under Linux, twice as many under unicache and the
oracle (the paper ran 16 under Linux and 32 under MFC so that a thread waiting for a
migration leaves no core idle). Throughput is always the sum over the readers.

Workload: the read microbenchmark (pick a file at random — uniform or Zipf 1/n — and
pread it whole) or grep/wc/md5sum as the same reads plus calibrated compute per byte.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from unicache.topology import Topology

from unicache_sim.calibration import CYCLES_PER_BYTE
from unicache_sim.config import SimConfig, from_topology, oracle
from unicache_sim.experiments.corunners import Background, CoRunner
from unicache_sim.experiments.dmc_whatif import MigrationMode, dmc_topology
from unicache_sim.experiments.mfc_baselines import (
    Baseline,
    Linux,
    Oracle,
    UnicacheLive,
    UnicacheWhatIf,
)
from unicache_sim.livetiming import LoopTiming

BASELINES = ("linux", "unicache", "oracle")
#: the parallel set-up's fourth baseline: Linux with as many readers as unicache, so that a
#: loss of the set-up itself (twice the readers on the same CPUs) is not read as unicache's
LINUX_SAME_READERS = "linux-same-readers"
WORKLOADS = tuple(CYCLES_PER_BYTE)
DISTRIBUTIONS = ("uniform", "zipf")
#: how unicache runs: the product's loop, or the in-kernel MFC what-if
PATHS = ("live", "whatif")
#: equal threads in every baseline, or MFC §6.3's 16 under Linux and 32 under MFC
SETUPS = ("equal", "parallel")
#: co-runners of the observations paper, in a second VM on the last CPU
CORUNNERS = ("none", "mergesort", "cachebuster", "spinloop")
MIB = 1024 * 1024
#: §6.1: every file of the read benchmark is 256 KiB
FILE_BYTES = 256 * 1024
#: policy rounds the live unicache baseline decides before it measures: SCU's watch
#: measures a VM unplaced (rounds 1-2) and placed (3-4) before it keeps or withdraws the
#: placement, and the prediction's hysteresis settles in a few more; the measured phase
#: is then the steady state a long-running VM sees, not the first probe
WARM_ROUNDS = 8
#: ... and until the policy's standing has held for this many rounds in a row: no vCPU
#: pinned anew, SCU leaving the VM alone or placing it as in the round before (a watch
#: trial that withdraws a placement in round 7 would otherwise be measured in round 8)
SETTLE_ROUNDS = 3
#: ... but never longer than this: a policy that keeps changing its mind is measured so
MAX_WARM_ROUNDS = 2 * WARM_ROUNDS


@dataclass(frozen=True, slots=True)
class MfcSpec:
    """One experiment.

    :param workload: read, grep, wc or md5sum.
    :param dist: uniform or zipf.
    :param threads: reader threads (one VM, one vCPU per host CPU); in the parallel
        set-up, the Linux baseline's (unicache and the oracle run twice as many).
    :param file_bytes: size of every file (MFC §6.1: 256 KiB).
    :param read_bytes: bytes per read call of the guest's program on the product's path
        (``live``); 0: one call per chunk, as MFC §6.1's benchmark reads each file whole.
        coreutils' ``cat``, ``wc`` and ``md5sum`` read 128 KiB at a time (``IO_BUFSIZE``,
        src/ioblksize.h). The shim counts a sequential reader's rest of the chunk
        (``uc_read_span``), so buffers smaller than ``min_read_size`` still migrate.
    :param dram_bw_scale: factor on DRAM bandwidth (§6.5.1).
    :param timing: the live loop's timing (the daemon's defaults) and its sampling.
    :param warm_factor: warm-up reads, in working sets (at least ``min_warm_bytes``).
    :param measure_factor: measured reads, in working sets (at least ``min_measure_bytes``).
    :param min_warm_bytes: smallest warm-up.
    :param min_measure_bytes: smallest measurement.
    :param min_measure_per_reader: smallest measurement per reader thread: the measured
        time runs from the first reader's start to the last reader's end, so with many
        readers each must read many files for one read's skew not to matter (64 of
        §6.1's files: 1/64 of a reader's measured time; 128 readers on ``epyc-2s`` read 8
        files each in the 256 MiB the other floors give).
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
    :param unify: the unification level, the daemon's ``--unify``: ``llc`` (default: a unit
        is an LLC group) or ``l2`` (a unit is one core and its private levels).
    :param dmc_migration: WHAT-IF, hardware that does not exist: ``none`` (default) keeps
        the model's migration cost; ``push`` or ``handoff`` gives the machine (and the
        daemon's cost model) DMC's ``cpush``-assisted cost (``dmc_whatif``).
    :param dmc_lookup: WHAT-IF: the live path's shim finds chunks with DMC's ``cllookup``
        before the table's assignment (``dmc_whatif.LookupShim``).
    :param seed: seed of file choice, page placement and floating.
    """

    workload: str = "read"
    dist: str = "uniform"
    threads: int = 1
    file_bytes: int = FILE_BYTES
    read_bytes: int = 0
    dram_bw_scale: float = 1.0
    timing: LoopTiming = field(default_factory=LoopTiming.daemon_defaults)
    warm_factor: float = 3.0
    measure_factor: float = 4.0
    min_warm_bytes: int = 32 * MIB
    min_measure_bytes: int = 256 * MIB
    min_measure_per_reader: int = 64 * FILE_BYTES
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
    unify: str = "llc"
    dmc_migration: MigrationMode = "none"
    dmc_lookup: bool = False
    seed: int = 1


@dataclass(frozen=True, slots=True)
class BaselineResult:
    """One baseline at one working set.

    :param baseline: one of ``baselines_for`` (linux, unicache, oracle, ...).
    :param mb_per_s: file bytes read per second (MB = 10^6 bytes, as the paper).
    :param dram_per_byte: DRAM bytes read per file byte.
    :param migrations: thread migrations per file read.
    :param reads: files read in the measured phase.
    :param seconds: simulated seconds of the measured phase.
    :param warm_bytes: file bytes read before the measured phase.
    """

    baseline: str
    mb_per_s: float
    dram_per_byte: float
    migrations: float
    reads: int
    seconds: float
    warm_bytes: int = 0


@dataclass(frozen=True, slots=True)
class PointResult:
    """All baselines at one working-set size.

    :param ws_mb: working set in MiB.
    :param results: one per baseline, in ``baselines_for`` order.
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
    def same_readers_speedup(self) -> float:
        """unicache over Linux running as many readers (the speedup itself in the equal
        set-up): what turning unicache on changes, whatever the set-up."""
        same = next((r for r in self.results if r.baseline == LINUX_SAME_READERS), None)
        base = same if same is not None else self.get("linux")
        return self.get("unicache").mb_per_s / base.mb_per_s

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


def run_baseline(
    baseline: str,
    topo: Topology,
    cfg: SimConfig,
    spec: MfcSpec,
    ws_bytes: int,
    warm_bytes: int | None = None,
) -> BaselineResult:
    """Simulate one baseline at one working-set size.

    :param baseline: one of ``baselines_for`` (linux, unicache, oracle, ...).
    :param topo: the machine model.
    :param cfg: its simulator configuration (the oracle machine is derived here).
    :param spec: the experiment.
    :param ws_bytes: working set (number of files x file size).
    :param warm_bytes: read this many bytes before measuring (default: the spec's
        warm-up; the live path also waits for ``WARM_ROUNDS`` rounds and a settled
        standing, ``SETTLE_ROUNDS`` rounds in a row, at most ``MAX_WARM_ROUNDS``).
    :returns: throughput and DRAM traffic of the measured phase.
    """
    machine = oracle(cfg) if baseline == "oracle" else cfg
    engine = machine.engine(seed=spec.seed)
    n_files = max(1, ws_bytes // spec.file_bytes)
    ws = n_files * spec.file_bytes
    policy: Baseline
    if baseline in ("linux", LINUX_SAME_READERS):
        policy = Linux(machine, spec, engine)
    elif baseline == "oracle":
        policy = Oracle(machine, spec, engine)
    elif spec.path == "live":
        policy = UnicacheLive(machine, spec, engine, topo, ws)
    else:
        policy = UnicacheWhatIf(machine, spec, engine, topo)
    n_nodes = len(machine.nodes)
    if spec.file_placement == "spread":
        files = [engine.add_object(spec.file_bytes, "node", i % n_nodes) for i in range(n_files)]
    else:
        files = [engine.add_object(spec.file_bytes) for _ in range(n_files)]
    picker = _Picker(n_files, spec.dist, random.Random(spec.seed))
    n_readers = readers(spec, baseline)
    tids = [engine.add_thread(policy.start_cpu(t)) for t in range(n_readers)]
    policy.attach(tids)
    corunner = CoRunner(spec.corunner, engine, machine)
    background = Background(spec, engine, machine)
    co_tid = -1
    if spec.corunner != "none":
        co_tid = engine.add_thread(machine.n_cpus - 1)
    warm = max(spec.min_warm_bytes, int(spec.warm_factor * ws))
    if warm_bytes is not None:
        warm = warm_bytes
    warmed = 0
    measure = max(
        spec.min_measure_bytes,
        int(spec.measure_factor * ws),
        # every baseline measures as many bytes, the parallel set-up's Linux too
        max(readers(spec, b) for b in baselines_for(spec)) * spec.min_measure_per_reader,
    )
    tick = spec.balance_interval_s * machine.clock_ghz * 1e9
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
        if (
            not measuring
            and issued >= warm
            and policy.warm(WARM_ROUNDS, SETTLE_ROUNDS, MAX_WARM_ROUNDS)
        ):
            measuring = True
            warmed = issued
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
        warmed,
    )


def baselines_for(spec: MfcSpec) -> tuple[str, ...]:
    """The baselines one point runs: ``BASELINES``, and in the parallel set-up also Linux
    with unicache's reader count."""
    return (*BASELINES, LINUX_SAME_READERS) if spec.setup == "parallel" else BASELINES


def readers(spec: MfcSpec, baseline: str) -> int:
    """Reader threads of one baseline: equal, or MFC §6.3's twice as many under unicache
    (and under ``linux-same-readers``)."""
    if spec.setup == "parallel" and baseline != "linux":
        return 2 * spec.threads
    return spec.threads


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
    topo = dmc_topology(topo, spec.dmc_migration)
    cfg = from_topology(topo, spec.dram_bw_scale)
    out = []
    for ws in ws_mb:
        # unicache first: its warm-up lasts WARM_ROUNDS rounds, and the other baselines
        # warm up as many bytes, so that all three measure the same reads of the same
        # file sequence (one seed's picks): a different stretch of a random sequence
        # differs by a few percent on its own
        by_name: dict[str, BaselineResult] = {}
        names = baselines_for(spec)
        for baseline in ("unicache", *(b for b in names if b != "unicache")):
            warm = by_name["unicache"].warm_bytes if by_name else None
            by_name[baseline] = run_baseline(baseline, topo, cfg, spec, int(ws * MIB), warm)
            if progress is not None:
                progress(f"{ws:g} MiB {baseline}")
        out.append(PointResult(ws, tuple(by_name[b] for b in names)))
    return out
