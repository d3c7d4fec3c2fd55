"""The MFC experiment (MFC paper §6.1-§6.3, Figures 3-7) with three baselines in one run.

* ``linux``: no unicache. Each thread stays on its vCPU; vCPUs float the way Linux's
  load balancer moves threads (a heuristic: every ``balance_interval`` a busy vCPU moves
  with probability ``float_prob``, mostly inside its LLC group).
* ``unicache``: by default the product (``path="live"``): the simulated host runs the
  daemon's loop at its default round period (OBS + SCU, ``unicache.policy.round``), the
  guest follows the published tables with the shim's rule (``unicache_sim.guest.shimrule``).
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
from dataclasses import dataclass

from unicache.loop import RoundResult
from unicache.topology import Topology

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig, from_topology, oracle
from unicache_sim.experiments.dmc.whatif import dmc_topology
from unicache_sim.experiments.mfc.baselines import (
    Baseline,
    Linux,
    Oracle,
    UnicacheLive,
    UnicacheWhatIf,
)
from unicache_sim.experiments.mfc.corunners import Background, CoRunner
from unicache_sim.experiments.mfc.spec import (
    BASELINES,
    LINUX_SAME_READERS,
    MAX_WARM_ROUNDS,
    MIB,
    SETTLE_ROUNDS,
    WARM_ROUNDS,
    MfcSpec,
)


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
    on_round: Callable[[RoundResult], None] | None = None,
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
    :param on_round: the live unicache baseline calls it with every round of its loop.
    :returns: throughput and DRAM traffic of the measured phase.
    """
    machine = oracle(cfg) if baseline == "oracle" else cfg
    engine = machine.engine(seed=spec.seed)
    n_files = max(1, ws_bytes // spec.file_bytes)
    ws = n_files * spec.file_bytes
    # the order below is the engine's order of objects and threads: keep it
    policy = _policy(baseline, machine, spec, engine, topo, ws, on_round)
    files = _add_files(engine, machine, spec, n_files)
    picker = _Picker(n_files, spec.dist, random.Random(spec.seed))
    tids = [engine.add_thread(policy.start_cpu(t)) for t in range(readers(spec, baseline))]
    policy.attach(tids)
    corunner = CoRunner(spec.corunner, engine, machine)
    background = Background(spec, engine, machine)
    co_tid = engine.add_thread(machine.n_cpus - 1) if spec.corunner != "none" else -1
    run = _BaselineRun(
        machine, spec, engine, policy, files, picker, tids, corunner, background, co_tid
    )
    warm = max(spec.min_warm_bytes, int(spec.warm_factor * ws))
    if warm_bytes is not None:
        warm = warm_bytes
    measure = max(
        spec.min_measure_bytes,
        int(spec.measure_factor * ws),
        # every baseline measures as many bytes, the parallel set-up's Linux too
        max(readers(spec, b) for b in baselines_for(spec)) * spec.min_measure_per_reader,
    )
    return run.result(baseline, run.read(warm, measure))


def _policy(
    baseline: str,
    machine: SimConfig,
    spec: MfcSpec,
    engine: _native.Engine,
    topo: Topology,
    ws: int,
    on_round: Callable[[RoundResult], None] | None = None,
) -> Baseline:
    """What places the readers under one baseline (the live path's loop calls
    ``on_round`` with every round)."""
    if baseline in ("linux", LINUX_SAME_READERS):
        return Linux(machine, spec, engine)
    if baseline == "oracle":
        return Oracle(machine, spec, engine)
    if spec.path == "live":
        return UnicacheLive(machine, spec, engine, topo, ws, on_round)
    return UnicacheWhatIf(machine, spec, engine, topo)


def _add_files(
    engine: _native.Engine, machine: SimConfig, spec: MfcSpec, n_files: int
) -> list[int]:
    """The working set's files in the engine, spread over the nodes or first-touch."""
    if spec.file_placement == "spread":
        n_nodes = len(machine.nodes)
        return [engine.add_object(spec.file_bytes, "node", i % n_nodes) for i in range(n_files)]
    return [engine.add_object(spec.file_bytes) for _ in range(n_files)]


@dataclass(frozen=True, slots=True)
class _Measured:
    """The measured phase of a run.

    :param start_time: cycle at which it started (the earliest live reader's clock).
    :param reads: files read in it.
    :param warmed: file bytes read before it.
    """

    start_time: float
    reads: int
    warmed: int


@dataclass(frozen=True, slots=True)
class _BaselineRun:
    """One baseline's simulation, set up: the machine, its readers and what runs beside
    them (``co_tid``: the co-runner's thread, -1 without one)."""

    machine: SimConfig
    spec: MfcSpec
    engine: _native.Engine
    policy: Baseline
    files: list[int]
    picker: _Picker
    tids: list[int]
    corunner: CoRunner
    background: Background
    co_tid: int

    def read(self, warm: int, measure: int) -> _Measured:
        """Run the readers: ``warm`` bytes (and the policy's warm-up), then ``measure``
        bytes more, each reader retiring once they are read.

        :returns: where the measured phase started and what it read.
        """
        engine, spec, policy, co_tid = self.engine, self.spec, self.policy, self.co_tid
        tick = spec.balance_interval_s * self.machine.clock_ghz * 1e9
        issued = reads = warmed = 0
        measuring = False
        start_time = 0.0
        next_tick = tick
        live = set(self.tids)
        while live:
            deadline = min(next_tick, self.background.next)
            stop, tid = engine.run(deadline)
            if stop == "deadline":
                self.background.run_until(deadline)
                if deadline >= next_tick:
                    policy.tick(next_tick, sorted(live | ({co_tid} if co_tid >= 0 else set())))
                    next_tick += tick
                continue
            if stop == "idle":
                break
            if tid == co_tid:
                self.corunner.step(tid)
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
            index = self.picker.next()
            policy.read(tid, self.files[index], index)
            issued += spec.file_bytes
            reads += 1 if measuring else 0
        return _Measured(start_time, reads, warmed)

    def result(self, baseline: str, measured: _Measured) -> BaselineResult:
        """Throughput, DRAM traffic and migrations of the readers in the measured phase."""
        engine, machine, tids, reads = self.engine, self.machine, self.tids, measured.reads
        end_time = max(engine.thread_time(t) for t in tids)
        stats = [engine.thread_stats(t) for t in tids]
        file_bytes = sum(s.bytes for s in stats)
        # the readers' own DRAM lines (a co-runner's traffic is not the benchmark's)
        dram_bytes = sum(s.dram_lines for s in stats) * machine.line_size
        seconds = (end_time - measured.start_time) / (machine.clock_ghz * 1e9)
        migrations = sum(s.migrations for s in stats)
        return BaselineResult(
            baseline,
            file_bytes / seconds / 1e6 if seconds > 0 else math.nan,
            dram_bytes / file_bytes if file_bytes else math.nan,
            migrations / reads if reads else 0.0,
            reads,
            seconds,
            measured.warmed,
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
