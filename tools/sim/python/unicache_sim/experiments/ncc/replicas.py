"""The NCC experiment of the dual-layered file cache paper's §5 (parallel greps, Figure 3).

Shells run ``grep`` over a directory tree (the paper: ``/etc``, 40 MB) one after the
other, in parallel, on a two-node cc-NUMA ``opteron-242-2node``; shell i runs on CPU
i mod CPUs, and the shells of one CPU take turns, a batch of files each (about a
scheduler time slice). Every grep reads every file of the tree, whole, in directory
order.

* The primary copy of a file's page-cache pages lives on the node of the shell that
  read it first (Linux's first touch); a read from the other node is remote.
* ``replicas`` off: every read is served by the primary copy.
* ``replicas`` on: the host runs :class:`unicache.policy.ncc.cache.NccPolicy` and feeds it a
  ``Read`` event per chunk read (chunks of ``scu_options_for(...).chunk_size``, as the
  guest shim reports them); once a node has read a chunk remotely ``NCC_THRESHOLD`` times
  the policy replicates it there: the reading thread copies the chunk into a new object
  on its node (the remote read it makes anyway, plus a local write), and later reads from
  that node are served by the replica. ``DropReplica`` frees the replica's frames.
* As in the guest (docs/replicas.md "Guest enforcement"), a node holds **one replica of a
  chunk, shared by every shell on it**, charged as the guest agent charges its replica
  file (:func:`unicache.policy.ncc.memory.replica_bytes`: a header page and the chunk's
  pages); the run reports the peak of that memory on any node and the agent's budget
  (:func:`~unicache.policy.ncc.memory.replica_budget`, 10 % of the node), so the memory
  figure is the product's. The policy's node capacity is the daemon's: what that budget
  holds on the smallest node (:func:`~unicache.policy.ncc.memory.budgeted`, as
  ``replicas_round`` derives it), so a node at its budget evicts in MQ order here as the
  daemon's round does; ``within_budget`` checks the peak against it.

Reads are simulated line by line by the native engine (caches, local and remote DRAM
costs, DRAM queues); grep's compute per byte is the calibrated one. The policy runs one
round per batch of files a shell starts (its events in read order, so a replica made in
a round serves the later reads of that round); a file not yet read by anyone gets its home
when a shell issues its read.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from unicache.errors import ConfigError
from unicache.model import ChunkId, DropReplica, NodeMemory, Replicate
from unicache.policy.ncc.cache import (
    NccAction,
    NccParams,
    NccPolicy,
    NccState,
    Read,
    ReplicaKey,
)
from unicache.policy.ncc.gain import NodeLedger, judge, predict, remote_chunks, replica_cost_for
from unicache.policy.ncc.memory import budgeted, replica_budget, replica_bytes
from unicache.policy.scu.options import scu_options_for
from unicache.topology import Topology, Unify

from unicache_sim import _native
from unicache_sim.engine.calibration import CYCLES_PER_BYTE
from unicache_sim.engine.config import SimConfig, from_topology

MB = 1_000_000
KB = 1000
#: the VM the shells run in
VM_NAME = "vm0"


@dataclass(frozen=True, slots=True)
class NccSpec:
    """One NCC experiment.

    :param tree_mb: size of the tree in MB (§5: ``/etc``, 40 MB).
    :param file_kb: mean file size in KB (sizes uniform in 0.1 .. 1.9 times it).
    :param shells: parallel shells (§5 Table 1: 2, 4, 6, 8, 10).
    :param greps: greps in total, split evenly over the shells (§5: 120).
    :param batch_files: files a shell issues per policy round.
    :param seed: seed of the file sizes and the page allocator.
    :param step_aside: NCC steps aside where replicas do not pay (``False``: never, as the
        daemon's ``--always-place``).
    """

    tree_mb: float = 40.0
    file_kb: float = 100.0
    shells: int = 2
    greps: int = 120
    batch_files: int = 40
    seed: int = 1
    step_aside: bool = True

    def check(self) -> None:
        """Refuse impossible parameters.

        :raises ConfigError: naming the parameter.
        """
        if self.tree_mb <= 0 or self.file_kb <= 0:
            raise ConfigError("--tree-mb and --file-kb must be positive")
        if self.tree_mb * MB < self.file_kb * KB:
            raise ConfigError("--tree-mb must hold at least one file of --file-kb")
        if self.shells < 1:
            raise ConfigError("--shells must be at least 1")
        if self.greps < self.shells:
            raise ConfigError("--greps must be at least --shells (one grep per shell)")
        if self.batch_files < 1:
            raise ConfigError("batch_files must be at least 1")


@dataclass(frozen=True, slots=True)
class NccRun:
    """One configuration.

    :param replicas: whether NCC made replicas.
    :param local_pages: page reads served by a copy on the reader's node.
    :param remote_pages: page reads served by another node.
    :param avg_grep_s: mean simulated run time of one grep (§5 Table 1 "Avg").
    :param first_grep_s: mean run time of the first grep of each shell (Table 1 "First").
    :param makespan_s: simulated time until the last shell finished.
    :param replicas_made: ``Replicate`` actions carried out.
    :param replicas_dropped: ``DropReplica`` actions carried out.
    :param dram_remote_lines: lines the greps read from another node's DRAM.
    :param replica_bytes_peak: most replica memory any node held at once (one copy per
        chunk and node, shared by its shells; charged as the guest agent charges it).
    :param replica_budget_bytes: the guest agent's replica budget of one node.
    :param node_bytes: memory of the smallest node.
    :param aside_rounds: policy rounds in which NCC made no replicas on a node whose
        dropped replicas did not pay (the daemon's ``NCC_NO_GAIN``).
    """

    replicas: bool
    local_pages: int
    remote_pages: int
    avg_grep_s: float
    first_grep_s: float
    makespan_s: float
    replicas_made: int
    replicas_dropped: int
    dram_remote_lines: int
    replica_bytes_peak: int = 0
    replica_budget_bytes: int = 0
    node_bytes: int = 0
    aside_rounds: int = 0

    @property
    def replica_memory_ratio(self) -> float:
        """Peak replica memory of a node as a share of the node's memory."""
        return self.replica_bytes_peak / self.node_bytes if self.node_bytes else math.nan

    @property
    def within_budget(self) -> bool:
        """Whether the peak fits the guest agent's budget (no eviction it would make)."""
        return self.replica_bytes_peak <= self.replica_budget_bytes

    @property
    def local_ratio(self) -> float:
        """Share of page reads that were local (Figure 3's local page hits)."""
        total = self.local_pages + self.remote_pages
        return self.local_pages / total if total else math.nan


@dataclass(frozen=True, slots=True)
class NccResult:
    """Both configurations.

    :param without: first touch only.
    :param with_replicas: NCC replicas.
    """

    without: NccRun
    with_replicas: NccRun

    @property
    def speedup(self) -> float:
        """Mean grep time without replicas over with."""
        return self.without.avg_grep_s / self.with_replicas.avg_grep_s


def tree_sizes(spec: NccSpec) -> list[int]:
    """File sizes of the tree in bytes: uniform in 0.1 .. 1.9 x the mean, summing to it.

    :param spec: the experiment.
    :returns: one size per file.
    """
    n = max(1, round(spec.tree_mb * MB / (spec.file_kb * KB)))
    rng = random.Random(spec.seed)
    raw = [rng.uniform(0.1, 1.9) for _ in range(n)]
    scale = spec.tree_mb * MB / sum(raw)
    return [max(1, round(r * scale)) for r in raw]


@dataclass(slots=True)
class _Shell:
    tid: int
    node: int
    greps_left: int
    next_file: int = 0
    started: float = 0.0
    durations: list[float] = field(default_factory=list)


class _Tree:
    """The files, their primary copies and their replicas in the engine."""

    def __init__(self, engine: _native.Engine, sizes: list[int], chunk: int) -> None:
        self.engine = engine
        self.sizes = sizes
        self.chunk = chunk
        self.home: list[int] = [-1] * len(sizes)
        self.primary: list[int] = [-1] * len(sizes)
        #: (file, chunk index, node) -> replica object (the chunk's bytes): one per node,
        #: whichever shell on the node made it, every shell there reads it
        self.replica: dict[tuple[int, int, int], int] = {}
        #: replica object -> node memory it holds (the guest agent's charge)
        self.replica_len: dict[int, int] = {}

    def touch(self, f: int, node: int) -> int:
        """The home of file ``f``; the first toucher's node when new."""
        if self.home[f] < 0:
            self.home[f] = node
            self.primary[f] = self.engine.add_object(self.sizes[f], "node", node)
        return self.home[f]

    def chunks(self, f: int) -> list[tuple[int, int, int]]:
        """(chunk index, offset, length) of file ``f``."""
        size = self.sizes[f]
        starts = range(0, size, self.chunk)
        return [(i, off, min(self.chunk, size - off)) for i, off in enumerate(starts)]


def _memory(engine: _native.Engine, cfg: SimConfig) -> list[NodeMemory]:
    out = []
    for node in range(len(cfg.nodes)):
        used, total = engine.node_frames(node)
        out.append(NodeMemory(node, (total - used) * cfg.page_size, total * cfg.page_size))
    return out


def run_config(topo: Topology, cfg: SimConfig, spec: NccSpec, replicas: bool) -> NccRun:
    """Simulate the parallel greps with or without replicas.

    :param topo: the machine model.
    :param cfg: its simulator configuration.
    :param spec: the experiment.
    :param replicas: whether NCC runs.
    :returns: local page hits and run times.
    """
    spec.check()
    run = _GrepRun(topo, cfg, spec)
    live = set(run.shells.queues)
    while live:
        stop, tid = run.engine.run()
        if stop != "need":
            raise ConfigError(f"simulation stopped early ({stop})")
        sh = run.shells.next(tid, run.engine.thread_time(tid), len(run.tree.sizes))
        if sh is None:
            run.engine.retire(tid)
            live.discard(tid)
            continue
        reads, events = run.batch(sh)
        if replicas:
            served, actions = run.ncc.decide(run.engine, cfg, events)
        else:
            served, actions = [ev.home for ev in events], []
        # the previous batch of this CPU's thread has run: replicas dropped meanwhile go now
        for obj in run.unfree.pop(tid, []):
            run.engine.free_object(obj)
        run.push(tid, sh, reads, events, served, actions)
    return run.result(replicas)


#: a chunk a grep reads: (file, chunk index, offset in the file, length)
_ChunkRead = tuple[int, int, int, int]


class _Shells:
    """The shells and the engine threads that run them: one thread per CPU runs that
    CPU's shells in turn, a batch each (a batch of 40 files of 100 KB takes about 3 ms: a
    scheduler time slice)."""

    def __init__(self, engine: _native.Engine, cfg: SimConfig, spec: NccSpec) -> None:
        self.queues: dict[int, deque[_Shell]] = {}
        self.running: dict[int, _Shell | None] = {}
        self.all: list[_Shell] = []
        for s in range(spec.shells):
            cpu = s % cfg.n_cpus
            greps = spec.greps // spec.shells + (1 if s < spec.greps % spec.shells else 0)
            if cpu not in self.queues:
                tid = engine.add_thread(cpu)
                self.queues[tid] = deque()
                self.running[tid] = None
            tid = next(t for t in self.queues if engine.thread_cpu(t) == cpu)
            sh = _Shell(tid, cfg.cpu_node[cpu], greps)
            self.queues[tid].append(sh)
            self.all.append(sh)

    def next(self, tid: int, now: float, n_files: int) -> _Shell | None:
        """The shell whose batch thread ``tid`` runs next, the one before it queued again
        unless its greps are done; ``None`` once the thread has no shell left."""
        prev = self.running[tid]
        if prev is not None:
            # its batch is done: the end of a grep, and the end of its turn on the CPU
            if prev.next_file == n_files:
                prev.durations.append(now - prev.started)
                prev.greps_left -= 1
                prev.next_file = 0
            if prev.greps_left > 0:
                self.queues[tid].append(prev)
        if not self.queues[tid]:
            return None
        sh = self.queues[tid].popleft()
        self.running[tid] = sh
        if sh.next_file == 0:
            sh.started = now
        return sh


class _HostNcc:
    """The host's NCC as the daemon runs it (replicas_round): the policy with a node
    holding what the agent's budget takes, and the step-aside on nodes whose dropped
    replicas did not pay."""

    def __init__(
        self, topo: Topology, engine: _native.Engine, cfg: SimConfig, chunk: int, step_aside: bool
    ) -> None:
        frames = [engine.node_frames(n)[1] * cfg.page_size for n in range(len(cfg.nodes))]
        self.policy = NccPolicy(budgeted(NccParams(), frames, chunk))
        self.state = NccState()
        self.policy.start(self.state)
        self.cost = replica_cost_for(topo, chunk)
        self.capacity = self.policy.params.max_replicas_per_node
        self.ledgers: tuple[NodeLedger, ...] = ()
        self.aside_rounds = 0
        self.step_aside = step_aside

    def decide(
        self, engine: _native.Engine, cfg: SimConfig, events: list[Read]
    ) -> tuple[list[int], list[NccAction]]:
        """One round over a batch's reads.

        :returns: the node serving each read, and the replicas to make and drop.
        """
        verdict = predict(
            self.ledgers,
            remote_chunks(events, self.state),
            range(len(cfg.nodes)),
            self.capacity,
            self.policy.params.ncc_threshold,
            self.cost,
        )
        aside = verdict.aside if self.step_aside else frozenset()
        decision = self.policy.decide(self.state, _memory(engine, cfg), events, aside)
        self.state = decision.state
        judged = judge(verdict, decision.retired, self.cost)
        self.ledgers = judged.ledgers
        self.aside_rounds += bool(aside)
        return list(decision.served), list(decision.actions)


class _GrepRun:
    """One configuration's simulation: the tree, the shells, the host's NCC, and what the
    reads and replicas counted so far."""

    def __init__(self, topo: Topology, cfg: SimConfig, spec: NccSpec) -> None:
        self.cfg = cfg
        self.spec = spec
        self.engine = cfg.engine(seed=spec.seed)
        chunk = scu_options_for(topo, Unify.LLC).chunk_size
        self.tree = _Tree(self.engine, tree_sizes(spec), chunk)
        self.compute = CYCLES_PER_BYTE["grep"]
        self.ncc = _HostNcc(topo, self.engine, cfg, self.tree.chunk, spec.step_aside)
        self.shells = _Shells(self.engine, cfg, spec)
        self.local = self.remote = self.made = self.dropped = 0
        frames = map(self.engine.node_frames, range(len(cfg.nodes)))
        self.node_bytes = min(total for _used, total in frames) * cfg.page_size
        #: replica memory per node now, and the most any node held
        self.held = [0] * len(cfg.nodes)
        self.peak = 0
        #: replica objects dropped by each engine thread, freed when it next asks for work
        self.unfree: dict[int, list[int]] = {}

    def batch(self, sh: _Shell) -> tuple[list[_ChunkRead], list[Read]]:
        """A shell's next batch of files: its chunk reads and the policy's events, a file
        not read before getting its home on the shell's node."""
        tree = self.tree
        batch = range(sh.next_file, min(len(tree.sizes), sh.next_file + self.spec.batch_files))
        sh.next_file = batch.stop
        reads: list[_ChunkRead] = []
        events: list[Read] = []
        for f in batch:
            home = tree.touch(f, sh.node)
            for index, offset, length in tree.chunks(f):
                reads.append((f, index, offset, length))
                chunk_key = ReplicaKey(VM_NAME, ChunkId(f, index))
                events.append(Read(chunk_key, sh.node, home, length))
        return reads, events

    def push(
        self,
        tid: int,
        sh: _Shell,
        reads: list[_ChunkRead],
        events: list[Read],
        served: list[int],
        actions: list[NccAction],
    ) -> None:
        """Queue a batch's reads on the shell's thread, each from the copy that serves it,
        and after each read the actions it caused."""
        engine, tree, page = self.engine, self.tree, self.cfg.page_size
        pending = deque(actions)
        for (f, index, offset, length), ev, node in zip(reads, events, served, strict=True):
            obj = tree.primary[f]
            at = offset
            if node == sh.node and node != tree.home[f]:
                obj, at = tree.replica[(f, index, sh.node)], 0
            engine.push_access(tid, obj, at, length, "read", self.compute)
            pages = math.ceil(length / page)
            if node == sh.node:
                self.local += pages
            else:
                self.remote += pages
            self._apply(tid, sh, (f, index, offset, length), ev, pending)

    def _apply(
        self, tid: int, sh: _Shell, read: _ChunkRead, ev: Read, pending: deque[NccAction]
    ) -> None:
        """The actions a read caused, in order: an MQ victim dropped, then the replica."""
        engine, tree = self.engine, self.tree
        f, index, _offset, length = read
        key = (f, index, sh.node)
        while pending:
            act = pending[0]
            if isinstance(act, DropReplica):
                gone = tree.replica.pop((act.chunk.file_id, act.chunk.index, act.node), None)
                if gone is not None:
                    self.held[act.node] -= tree.replica_len.pop(gone)
                    # freed once the reads queued before it have run
                    self.unfree.setdefault(tid, []).append(gone)
                    self.dropped += 1
            elif (
                isinstance(act, Replicate) and ReplicaKey.of(act) == ev.key and act.node == ev.node
            ):
                # the NCC generator copies the chunk it has just read into a local page
                tree.replica[key] = engine.add_object(length, "node", sh.node)
                tree.replica_len[tree.replica[key]] = replica_bytes(length)
                self.held[sh.node] += replica_bytes(length)
                self.peak = max(self.peak, self.held[sh.node])
                engine.push_access(tid, tree.replica[key], 0, length, "write", 0.0)
                self.made += 1
            else:
                break
            pending.popleft()

    def result(self, replicas: bool) -> NccRun:
        """The run's page hits, grep times and replica memory."""
        engine = self.engine
        hz = self.cfg.clock_ghz * 1e9
        shells = self.shells.all
        durations = [d for sh in shells for d in sh.durations]
        firsts = [sh.durations[0] for sh in shells if sh.durations]
        remote_index = engine.source_names().index("dram_remote")
        return NccRun(
            replicas,
            self.local,
            self.remote,
            sum(durations) / len(durations) / hz,
            sum(firsts) / len(firsts) / hz,
            max(engine.thread_time(t) for t in self.shells.queues) / hz,
            self.made,
            self.dropped,
            engine.counters().served[remote_index],
            self.peak,
            replica_budget(self.node_bytes),
            self.node_bytes,
            self.ncc.aside_rounds,
        )


def run_ncc(
    topo: Topology, spec: NccSpec, progress: Callable[[str], None] | None = None
) -> NccResult:
    """Run the parallel greps without and with replicas.

    :param topo: the machine model (it needs at least two NUMA nodes).
    :param spec: the experiment.
    :param progress: called after each configuration with a label.
    :returns: both runs.
    :raises ConfigError: if the model has a single node or the parameters are impossible.
    """
    spec.check()
    if len(topo.nodes) < 2:
        raise ConfigError(f"model {topo.name} has one NUMA node: replicas need two or more")
    cfg = from_topology(topo)
    runs = []
    for replicas in (False, True):
        runs.append(run_config(topo, cfg, spec, replicas))
        if progress is not None:
            progress("with replicas" if replicas else "without replicas")
    return NccResult(runs[0], runs[1])
