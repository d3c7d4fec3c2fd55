"""The NCC paper's iozone experiment (§5, Tables 3-5 and Figure 4) on ``opteron-242-2node``.

iozone in throughput mode (``-t N -s 128m -r 4k``, tests write, re-write, read, re-read,
backward read, stride read, in that order): N threads, each with its own file, written
and then read through the page cache in 4 KB records.

* **Scale**: every size is divided by ``scale`` (default 8: 16 MiB files, 128 MiB nodes),
  so the files' share of node memory is the paper's (128 MB files, 1 GB nodes); the
  daemon's round (1 s, the paper's timer) is divided by it too, so as many rounds fall in
  a test as on the paper's machine. Records stay 4 KiB and chunks are the product's
  (``scu_options_for``: 512 KiB). Caches are flushed between tests: a 128 MB file leaves
  nothing of use in a 1 MiB L2, a scaled one would.
* **Threads and migration**: iozone starts new threads for every test; Linux puts a new
  thread where its balancer finds room, so each test draws (seeded) a balanced
  assignment of the threads to the two CPUs: a thread's file stays on the node it was
  written from, and the thread reading it runs there or not, test by test (the paper's
  "remote page access is produced by thread migration"). Threads of a CPU take turns a
  slice of records each. The files are placed by the write test (first touch), on the
  other node when the writer's is full.
* **Memory**: a node's memory less the system's share (``system_mb``: the paper gives
  none; 20 % of a node, so that at 10 threads the files and the system leave a node near
  the 10 % floor as the paper says memory became tight), its page cache and its replicas.
* **NCC, the product's path**: the guest (:mod:`~unicache_sim.experiments.ncc.iozone_guest`)
  counts reads and writes as the shim does and reports them with its free memory every
  round; the host runs :func:`unicache.policy.ncc.replicas.replicas_round` (the daemon's,
  with its chunk size: the agent's 10 % budget caps a node's replicas, a tight node
  makes none and gives back 2:1), and the guest's agent fills, serves and drops replicas
  from the resulting table.
* **Cost**: reads and writes go through the native engine line by line (caches, local and
  remote DRAM, queues). Compute per byte of each test is set from the paper's Table 3 at
  2 threads (its time per byte on one CPU, the model's mean DRAM cost per byte taken
  off; the simulated 2-thread medians land within 12 % of it): an input, not a result.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from unicache.errors import ConfigError
from unicache.model import DropReplica, GuestNode, Replicate, Vcpu, VcpuId, Vm
from unicache.policy.ncc.cache import NccParams
from unicache.policy.ncc.gain import NCC_NO_GAIN, ReplicaCost, replica_cost_for
from unicache.policy.ncc.memory import replica_budget
from unicache.policy.ncc.replicas import ReplicaState, replicas_round
from unicache.policy.scu.options import scu_options_for
from unicache.topology import Topology, Unify

from unicache_sim.engine.config import SimConfig, from_topology
from unicache_sim.experiments.ncc.iozone_guest import PAGE, VM_NAME, GuestCache
from unicache_sim.experiments.ncc.iozone_slices import IozoneThread, Slices

MIB = 1 << 20
#: iozone's tests in the order it runs them (§5: -i 0 -i 1 -i 3 -i 5)
PHASES = ("write", "re-write", "read", "re-read", "backward read", "stride read")
WRITES = frozenset({"write", "re-write"})
#: §5 Table 3, 2 threads, untouched kernel (MB/s): the calibration point
TABLE3_2_THREADS = {
    "write": 328.0,
    "re-write": 731.0,
    "read": 2087.0,
    "re-read": 2155.0,
    "backward read": 1618.0,
    "stride read": 1542.0,
}
#: iozone's default stride (``-j``): records between two reads of a stride pass
STRIDE = 17


@dataclass(frozen=True, slots=True)
class IozoneSpec:
    """One iozone run.

    :param threads: iozone threads (§5: 2, 4, 6, 8, 10).
    :param file_mb: size of a thread's file at the paper's scale, MiB (§5: 128).
    :param record_kb: record size, KiB (§5: 4).
    :param scale: every size (and the round) divided by this.
    :param system_mb: memory of a node used by the system, MiB at the paper's scale.
    :param round_s: the daemon's round at the paper's scale, seconds (its default: 1).
    :param slice_records: records a thread runs before the next thread of its CPU.
    :param phases: the tests, in order.
    :param seed: seed of the scheduler's draws and the page allocator.
    :param step_aside: NCC steps aside where replicas do not pay (``False``: never, as the
        daemon's ``--always-place``).
    """

    threads: int = 2
    file_mb: float = 128.0
    record_kb: int = 4
    scale: int = 8
    system_mb: float = 204.8
    round_s: float = 1.0
    slice_records: int = 64
    phases: tuple[str, ...] = PHASES
    seed: int = 1
    step_aside: bool = True

    def check(self) -> None:
        """Refuse impossible parameters.

        :raises ConfigError: naming the parameter.
        """
        if self.threads < 1:
            raise ConfigError("--threads must be at least 1")
        if self.scale < 1 or self.slice_records < 1:
            raise ConfigError("scale and slice must be at least 1")
        if self.record_kb < 4 or self.record_kb % 4:
            raise ConfigError("--record-kb must be whole pages (4, 8, ...)")
        if self.file_mb * MIB / self.scale < self.record_kb * 1024:
            raise ConfigError("--file-mb / scale must hold at least one record")
        if self.round_s <= 0 or self.system_mb < 0:
            raise ConfigError("--round-s must be positive and --system-mb not negative")
        unknown = [p for p in self.phases if p not in PHASES]
        if unknown or not self.phases or self.phases[0] != "write":
            raise ConfigError(f"phases must start with write and name only {PHASES}")

    @property
    def file_bytes(self) -> int:
        """A thread's file, scaled, in whole records."""
        record = self.record_kb * 1024
        return int(self.file_mb * MIB / self.scale) // record * record


@dataclass(frozen=True, slots=True)
class PhaseRun:
    """One test of one run.

    :param phase: the test.
    :param bytes: bytes all threads moved.
    :param seconds: simulated time from the test's start to its last thread's end.
    :param local_pages: page reads (writes) served by a copy on the thread's node.
    :param pages: page reads (writes).
    """

    phase: str
    bytes: int
    seconds: float
    local_pages: int
    pages: int

    @property
    def mb_s(self) -> float:
        """Throughput, MiB/s (iozone's "parent sees": all bytes over the test's time)."""
        return self.bytes / MIB / self.seconds

    @property
    def local_ratio(self) -> float:
        """Share of page accesses served locally (Figure 4)."""
        return self.local_pages / self.pages


@dataclass(frozen=True, slots=True)
class IozoneRun:
    """One configuration of one run.

    :param replicas: whether the host ran NCC.
    :param threads: iozone threads.
    :param phases: each test.
    :param rounds: the daemon's rounds.
    :param tight_rounds: rounds in which a node's free share was below the floor.
    :param replicated: ``Replicate`` actions.
    :param drops: ``DropReplica`` actions by rule.
    :param fills: replicas the agent filled.
    :param fills_refused: fills refused (memory-tight node, no room).
    :param stale_refused: serves the shim refused (file written since the fill).
    :param replica_peak_bytes: most replica memory a node held.
    :param replica_budget_bytes: the agent's budget of a node.
    :param node_bytes: memory of a node (scaled).
    :param aside_rounds: rounds in which NCC made no replicas on a node it predicted no
        gain for (an ``NCC_NO_GAIN`` refusal).
    """

    replicas: bool
    threads: int
    phases: tuple[PhaseRun, ...]
    rounds: int = 0
    tight_rounds: int = 0
    replicated: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    fills: int = 0
    fills_refused: int = 0
    stale_refused: int = 0
    replica_peak_bytes: int = 0
    replica_budget_bytes: int = 0
    node_bytes: int = 0
    aside_rounds: int = 0

    def phase(self, name: str) -> PhaseRun:
        """The run of one test."""
        return next(p for p in self.phases if p.phase == name)


@dataclass(frozen=True, slots=True)
class IozoneResult:
    """Both configurations of one run.

    :param without: first touch only.
    :param with_replicas: the product's NCC.
    """

    without: IozoneRun
    with_replicas: IozoneRun

    def speedup_pct(self, phase: str) -> float:
        """Table 5: throughput with replicas over without, minus one, in percent."""
        return 100.0 * (self.with_replicas.phase(phase).mb_s / self.without.phase(phase).mb_s - 1)


def compute_per_byte(cfg: SimConfig) -> dict[str, float]:
    """Compute cycles per byte of each test: Table 3's 2-thread time per byte on one CPU,
    less the model's mean DRAM cost per byte (a page as likely on any node)."""
    n = len(cfg.nodes)
    node = cfg.nodes[0]
    stall = (node.local_line_cycles + (n - 1) * node.remote_line_cycles) / n / cfg.line_size
    hz = cfg.clock_ghz * 1e9
    return {
        phase: max(0.0, hz * cfg.n_cpus / (mb_s * MIB) - stall)
        for phase, mb_s in TABLE3_2_THREADS.items()
    }


def record_order(phase: str, records: int) -> list[int]:
    """Record numbers in the order a test accesses them (stride: iozone's passes of
    every ``STRIDE``-th record, each starting one record further)."""
    if phase == "backward read":
        return list(range(records - 1, -1, -1))
    if phase == "stride read":
        return [r for start in range(STRIDE) for r in range(start, records, STRIDE)]
    return list(range(records))


def _vm(cfg: SimConfig, node_bytes: int) -> Vm:
    """The paper's machine as one guest: vCPU i on CPU i, guest node n = host node n."""
    vcpus = tuple(Vcpu(VcpuId(VM_NAME, c), None, frozenset({c}), c) for c in range(cfg.n_cpus))
    nodes = tuple(
        GuestNode(n, frozenset(c for c in range(cfg.n_cpus) if cfg.cpu_node[c] == n), node_bytes)
        for n in range(len(cfg.nodes))
    )
    return Vm(VM_NAME, vcpus, node_bytes * len(nodes), nodes)


class _Host:
    """The daemon's NCC round every ``period`` cycles, over the guest's reports."""

    def __init__(
        self,
        cfg: SimConfig,
        guest: GuestCache,
        period: float,
        interval_s: float,
        cost: ReplicaCost | None,
    ) -> None:
        self.vm = _vm(cfg, guest.node_bytes)
        self.guest = guest
        self.cost = cost
        self.period = period
        self.interval_s = interval_s
        self.next_at = period
        self.state = ReplicaState()
        self.rounds = self.tight_rounds = self.replicated = self.aside_rounds = 0
        self.drops: dict[str, int] = {}

    def maybe_round(self, now: float) -> None:
        while now >= self.next_at:
            self.next_at += self.period
            report = self.guest.report(self.rounds, self.interval_s)
            self.rounds += 1
            params = NccParams()
            if any(
                m.free_bytes < m.total_bytes * params.min_free_ratio for m in report.node_memory
            ):
                self.tight_rounds += 1
            decision = replicas_round(
                [self.vm], [report], self.state, params, chunk_size=self.guest.chunk, cost=self.cost
            )
            self.state = decision.state
            if any(r.kind == NCC_NO_GAIN for r in decision.refusals):
                self.aside_rounds += 1
            for act in decision.actions:
                if isinstance(act, Replicate):
                    self.replicated += 1
                elif isinstance(act, DropReplica):
                    self.drops[act.rule] = self.drops.get(act.rule, 0) + 1
            self.guest.agent_round(dict(decision.replica_nodes.get(VM_NAME, {})))


def run_config(topo: Topology, spec: IozoneSpec, replicas: bool) -> IozoneRun:
    """Simulate one iozone run with or without the product's NCC.

    :param topo: the machine model (two or more NUMA nodes).
    :param spec: the run.
    :param replicas: whether the host runs NCC.
    :returns: each test's throughput and local page hits.
    :raises ConfigError: on impossible parameters or files that do not fit in memory.
    """
    spec.check()
    cfg = from_topology(topo)
    if len(cfg.nodes) < 2:
        raise ConfigError(f"model {topo.name} has one NUMA node: replicas need two or more")
    engine = cfg.engine(seed=spec.seed)
    node_bytes = min(n.memory_bytes for n in cfg.nodes) // spec.scale // PAGE * PAGE
    system = int(spec.system_mb * MIB / spec.scale)
    chunk = scu_options_for(topo, Unify.LLC).chunk_size
    guest = GuestCache(
        engine, len(cfg.nodes), node_bytes, system, [spec.file_bytes] * spec.threads, chunk
    )
    hz = cfg.clock_ghz * 1e9
    cost = replica_cost_for(topo, chunk) if spec.step_aside else None
    host = _Host(cfg, guest, spec.round_s / spec.scale * hz, spec.round_s, cost)
    compute = compute_per_byte(cfg)
    record = spec.record_kb * 1024
    records = spec.file_bytes // record
    rng = random.Random(spec.seed)
    start = 0.0
    phases = []
    for phase in spec.phases:
        engine.flush()
        order = record_order(phase, records)
        slices = Slices(engine, guest, record, spec.slice_records, compute[phase], replicas)
        end, local, pages = _run_test(cfg, spec, slices, phase, order, host, rng, start)
        guest.free_dropped()  # no access of this test is queued any more
        phases.append(
            PhaseRun(phase, spec.file_bytes * spec.threads, (end - start) / hz, local, pages)
        )
        start = end
    return IozoneRun(
        replicas,
        spec.threads,
        tuple(phases),
        host.rounds,
        host.tight_rounds,
        host.replicated,
        dict(sorted(host.drops.items())),
        guest.fills,
        guest.fills_refused,
        guest.stale_refused,
        max(guest.replica_peak),
        replica_budget(node_bytes),
        node_bytes,
        host.aside_rounds,
    )


def _run_test(
    cfg: SimConfig,
    spec: IozoneSpec,
    slices: Slices,
    phase: str,
    order: list[int],
    host: _Host,
    rng: random.Random,
    start: float,
) -> tuple[float, int, int]:
    """One iozone test from cycle ``start``: its new threads placed by the balancer, each
    CPU's threads taking turns a slice of records each, the host's rounds due meanwhile
    (with replicas).

    :returns: the cycle the last thread finished, local pages, pages.
    """
    engine = slices.engine
    # the balancer's placement of this test's new threads: balanced, in a random order
    shuffled = rng.sample(range(spec.threads), spec.threads)
    queues: dict[int, deque[IozoneThread]] = {}
    cpu_of: dict[int, int] = {}
    for slot, t in enumerate(shuffled):
        cpu = slot % cfg.n_cpus
        tid = next((k for k, c in cpu_of.items() if c == cpu), None)
        if tid is None:
            tid = engine.add_thread(cpu, start)
            cpu_of[tid] = cpu
            queues[tid] = deque()
        queues[tid].append(IozoneThread(t, order))
    running: dict[int, IozoneThread | None] = dict.fromkeys(queues)
    push = slices.writes if phase in WRITES else slices.reads
    local = pages = 0
    live = set(queues)
    while live:
        stop, tid = engine.run()
        if stop != "need":
            raise ConfigError(f"simulation stopped early ({stop})")
        if slices.replicas:
            host.maybe_round(engine.thread_time(tid))
        prev = running[tid]
        if prev is not None and prev.at < len(prev.order):
            queues[tid].append(prev)
        if not queues[tid]:
            engine.retire(tid)
            live.discard(tid)
            continue
        th = running[tid] = queues[tid].popleft()
        hits, done = push(tid, th, cfg.cpu_node[cpu_of[tid]])
        local += hits
        pages += done
    return max(engine.thread_time(t) for t in queues), local, pages


def run_iozone(
    topo: Topology, spec: IozoneSpec, progress: Callable[[str], None] | None = None
) -> IozoneResult:
    """One iozone run without and with the product's NCC.

    :param topo: the machine model.
    :param spec: the run.
    :param progress: called after each configuration with a label.
    :returns: both configurations.
    """
    runs = []
    for replicas in (False, True):
        runs.append(run_config(topo, spec, replicas))
        if progress is not None:
            progress(f"{spec.threads} threads {'with' if replicas else 'without'} replicas")
    return IozoneResult(runs[0], runs[1])
