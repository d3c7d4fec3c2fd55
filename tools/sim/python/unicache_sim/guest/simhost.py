"""The simulated host: the Host port over the native engine, and the guest shim's reads.

``SimHost`` implements :class:`unicache.host.ports.Host` for one simulated VM: ``observe``
turns the engine's per-thread counters and the reads the guest made since the last round
into an :class:`~unicache.model.Observation` (counter samples per vCPU, a guest report
per VM, exactly the shapes the live daemon builds); ``act`` carries out the policy's
actions: ``PinVcpu`` moves a vCPU (and the thread on it) into its new CPU set,
``ReleaseVcpu`` lets it float over every CPU again,
``PublishPlacement`` hands the guest its table, ``SetCpuWeight`` is accepted but has no
effect (the engine shares a CPU first come, first served).

``GuestShim`` is what libunicache does on every read: look the chunk up in the last
published table, let the shim's rule (``uc_decide.c``, mirrored by
:mod:`unicache_sim.guest.shimrule`) pick the vCPU the read runs on (stay, or move to the chunk's
home vCPU or the next one no other reader claims, within the entry's migration budget per
round), settle the claims, then read with caching or non-temporal loads; each call first
pays what the real shim adds to it (:mod:`unicache_sim.guest.shimcost`).
The policy behind it is whatever drives the host: the simulator uses
:class:`unicache.policy.round.UnicachePolicy` (OBS then SCU), as the daemon does.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from unicache.host.ports import ActResult
from unicache.model import (
    Action,
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestReport,
    Observation,
    PinVcpu,
    PlacementEntry,
    PlacementTable,
    PublishPlacement,
    ReleaseVcpu,
    Vcpu,
    VcpuId,
    Vm,
)

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig
from unicache_sim.guest import shimrule
from unicache_sim.guest.shimcost import SHIM_COST, ShimCost


@dataclass(slots=True)
class _ChunkReads:
    bytes_read: int = 0
    reads: int = 0
    vcpu_bytes: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _ThreadMark:
    cycles: float = 0.0
    llc_lines: int = 0  # the LLC references a hardware counter reads
    misses: int = 0


class SimHost:
    """One VM, its vCPUs and its reader threads, on the native engine.

    By default the VM has one vCPU per host CPU, vCPU i on CPU i, each free to float over
    every CPU (the MFC experiment). A VM placed on a host shared with others
    (:mod:`unicache_sim.guest.multihost`) has its own vCPU count, the CPU sets its placement
    pinned them to (what ``ReleaseVcpu`` restores: the live actuator's journaled set) and
    the CPUs they start on.

    :param cfg: the simulated machine.
    :param engine: the engine running the threads.
    :param vm: the VM's name.
    :param period_cycles: the round period (the host-guest lag).
    :param vcpus: the VM's vCPUs (default: one per host CPU).
    :param affinity: vCPU -> the CPUs it may run on (default: every CPU).
    :param cpus: vCPU -> the CPU it starts on (default: vCPU i on CPU i).
    """

    name = "sim"

    def __init__(
        self,
        cfg: SimConfig,
        engine: _native.Engine,
        vm: str,
        period_cycles: float,
        vcpus: int | None = None,
        affinity: Mapping[int, frozenset[int]] | None = None,
        cpus: Mapping[int, int] | None = None,
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.vm = vm
        self.period = period_cycles
        n = cfg.n_cpus
        #: the VM's vCPUs
        self.n_vcpus = n if vcpus is None else vcpus
        everywhere = frozenset(range(n))
        #: vCPU index -> the host CPUs it may run on (floating over all at first)
        self.affinity: dict[int, frozenset[int]] = {
            i: everywhere if affinity is None else affinity[i] for i in range(self.n_vcpus)
        }
        #: vCPU index -> the CPU set a release restores (the placement's, or every CPU)
        self.home = dict(self.affinity)
        #: vCPU index -> the host CPU it runs on
        self.vcpu_cpu: dict[int, int] = {
            i: i if cpus is None else cpus[i] for i in range(self.n_vcpus)
        }
        #: thread id -> vCPU index it runs on (set by the guest)
        self.thread_vcpu: dict[int, int] = {}
        self.table: PlacementTable | None = None
        #: the table's entries by chunk
        self.entries: dict[ChunkId, PlacementEntry] = {}
        #: per thread, the vCPU the guest's scheduler gives it when nothing pins it: the even
        #: spread it started from (a thread the shim unpins goes back there)
        self.spread_vcpu: dict[int, int] = {}
        #: some entry of the table has home vCPUs (``UC_TABLE_HOMES``)
        self.homes = False
        self.tick = 0
        self.seq = 0
        self._reads: dict[ChunkId, _ChunkReads] = {}
        self._marks: dict[int, _ThreadMark] = {}

    # --- guest side -------------------------------------------------------------------

    def add_thread(self, tid: int, vcpu: int) -> None:
        """Register a reader thread running on a vCPU (where the guest's scheduler spread it)."""
        self.thread_vcpu[tid] = vcpu
        self.spread_vcpu[tid] = vcpu
        self._marks[tid] = _ThreadMark()

    def record_read(self, tid: int, chunk: ChunkId, nbytes: int, run: bool = True) -> None:
        """What the guest agent counts for its next report.

        :param run: the read starts a run in the chunk (``uc_count``: a read continuing the
            thread's previous one inside the chunk adds bytes only).
        """
        acc = self._reads.get(chunk)
        if acc is None:  # built for a chunk's first read only (this runs on every read)
            acc = self._reads[chunk] = _ChunkReads()
        acc.bytes_read += nbytes
        acc.reads += run
        vcpu = self.thread_vcpu[tid]
        per_vcpu = acc.vcpu_bytes
        per_vcpu[vcpu] = per_vcpu.get(vcpu, 0) + nbytes

    # --- Host port --------------------------------------------------------------------

    def read_chunks(self) -> frozenset[ChunkId]:
        """The chunks the guest read since the last observation (its shims' counters)."""
        return frozenset(self._reads)

    def observe(
        self, window_cycles: float | None = None, scale: float = 1.0, seconds: float | None = None
    ) -> Observation:
        """This round's observation: samples per vCPU and the guest's report.

        :param window_cycles: the simulated time the observation covers (default: the
            round period); a sampled interval (``unicache_sim.guest.livetiming``) covers less.
        :param scale: the report's counts are multiplied by this, so that a sampled
            window's report stands for the whole interval (1: unsampled).
        :param seconds: the interval the report says it covers (default: the round
            period; an early report covers the time since the last).
        """
        self.tick += 1
        window = self.period if window_cycles is None else window_cycles
        # every vCPU has a sample, idle or not, as the live host counts every vCPU thread
        per_vcpu = {vcpu: _ThreadMark() for vcpu in range(self.n_vcpus)}
        for tid, vcpu in self.thread_vcpu.items():
            st = self.engine.thread_stats(tid)
            cycles = st.compute_cycles + st.stall_cycles + st.migration_cycles
            misses = st.dram_lines + st.c2c_lines
            mark = self._marks[tid]
            acc = per_vcpu[vcpu]
            acc.cycles += max(0.0, cycles - mark.cycles)
            acc.llc_lines += max(0, st.llc_lines - mark.llc_lines)
            acc.misses += max(0, misses - mark.misses)
            self._marks[tid] = _ThreadMark(cycles, st.llc_lines, misses)
        samples = tuple(
            CounterSample(
                VcpuId(self.vm, vcpu),
                CounterSource.SIMULATED,
                cycles=int(m.cycles),
                llc_references=m.llc_lines,
                llc_misses=m.misses,
                busy=min(1.0, m.cycles / window) if window > 0 else 0.0,
            )
            for vcpu, m in sorted(per_vcpu.items())
        )
        chunks = tuple(
            ChunkAccess(
                chunk,
                _scaled(r.bytes_read, scale),
                _scaled(r.reads, scale),
                0,
                tuple((v, _scaled(b, scale)) for v, b in sorted(r.vcpu_bytes.items())),
            )
            for chunk, r in sorted(self._reads.items(), key=lambda kv: (kv[0].file_id, kv[0].index))
        )
        self._reads = {}
        self.seq += 1
        if seconds is None:
            seconds = self.period / (self.cfg.clock_ghz * 1e9)
        report = GuestReport(self.vm, self.seq, seconds, chunks, guest_vcpus=self.n_vcpus)
        vcpus = tuple(
            Vcpu(VcpuId(self.vm, i), None, self.affinity[i], self.vcpu_cpu[i])
            for i in range(self.n_vcpus)
        )
        return Observation(self.tick, (Vm(self.vm, vcpus),), samples, (report,))

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out pinning and placement; never raises for one action."""
        result = self.apply(actions)
        self._place_vcpus()
        return result

    def apply(self, actions: Sequence[Action]) -> ActResult:
        """Take the actions' CPU sets and table, without running the vCPUs anywhere new
        yet (:meth:`act` does; a host shared by several VMs places them all at once)."""
        applied: list[Action] = []
        failed: list[tuple[Action, str]] = []
        for action in actions:
            if isinstance(action, PinVcpu):
                if action.vcpu.vm != self.vm or action.vcpu.index not in self.affinity:
                    failed.append((action, f"{action.vcpu} is not running"))
                    continue
                cpus = frozenset(c for c in action.cpus if 0 <= c < self.cfg.n_cpus)
                if not cpus:
                    failed.append((action, "no simulated CPU in the set"))
                    continue
                self.affinity[action.vcpu.index] = cpus
            elif isinstance(action, ReleaseVcpu):
                if action.vcpu.vm != self.vm or action.vcpu.index not in self.affinity:
                    failed.append((action, f"{action.vcpu} is not running"))
                    continue
                # back where it started (the live actuator's journaled set): every CPU, or
                # the CPUs its placement pinned it to
                self.affinity[action.vcpu.index] = self.home[action.vcpu.index]
            elif isinstance(action, PublishPlacement) and action.vm == self.vm:
                self.table = action.table
                self.entries = {e.chunk: e for e in action.table.entries}
                self.homes = any(e.vcpus for e in action.table.entries)
            applied.append(action)
        return ActResult(tuple(applied), tuple(failed))

    def float_vcpus(self, rng: random.Random, float_prob: float, tids: Sequence[int]) -> None:
        """One load-balancing tick of the host's scheduler over the busy vCPUs.

        The vCPUs that run a reader move as :func:`linux_float` moves any thread, inside
        their CPU sets; another thread of ``tids`` (a co-runner: a VM this host does not
        pin) moves as it would under ``linux``, anywhere. Threads are considered in the
        order ``linux`` considers them (readers, then the co-runner, the highest tid), so
        both baselines take the same draws.
        """
        busy = sorted(set(self.thread_vcpu.values()))
        # vCPUs by index, other threads as -1 - tid (the two never collide)
        placed = {vcpu: self.vcpu_cpu[vcpu] for vcpu in busy}
        others = sorted(t for t in tids if t not in self.thread_vcpu)
        placed.update({-1 - t: self.engine.thread_cpu(t) for t in others})
        for key, cpu in linux_float(rng, float_prob, self.cfg, placed, self.affinity):
            if key >= 0:
                self._move_vcpu(key, cpu)
            else:
                old = placed[key]
                self.engine.move_thread(-1 - key, cpu, self.cfg.migration_cost(old, cpu))

    def _place_vcpus(self) -> None:
        """Run each vCPU on a CPU of its set, as the host scheduler spreads runnable threads.

        A vCPU stays where it is while that CPU is in its set and it has the CPU to itself;
        the others go to the least shared CPU of their set (lowest first). The host's
        scheduler would do the same within a round: it never keeps two busy vCPU threads
        on one CPU while their cpuset has an idle one.
        """
        load: dict[int, int] = {}
        keep: dict[int, int] = {}
        # vCPUs that run a reader keep their CPU first (one may have floated onto the CPU
        # of an idle vCPU)
        running = set(self.thread_vcpu.values())
        for vcpu in sorted(self.vcpu_cpu, key=lambda v: (v not in running, v)):
            cpu = self.vcpu_cpu[vcpu]
            if cpu in self.affinity[vcpu] and cpu not in load:
                keep[vcpu] = cpu
                load[cpu] = 1
        for vcpu in sorted(self.vcpu_cpu):
            if vcpu in keep:
                continue
            cpu = min(self.affinity[vcpu], key=lambda c: (load.get(c, 0), c))
            load[cpu] = load.get(cpu, 0) + 1
            self._move_vcpu(vcpu, cpu)

    def move_vcpu(self, vcpu: int, cpu: int, cycles: float | None = None) -> None:
        """Run a vCPU (and the threads on it) on ``cpu``.

        :param cycles: what the move costs each thread (default: the model's migration).
        """
        self._move_vcpu(vcpu, cpu, cycles)

    def _move_vcpu(self, vcpu: int, cpu: int, cycles: float | None = None) -> None:
        old = self.vcpu_cpu[vcpu]
        self.vcpu_cpu[vcpu] = cpu
        cost = self.cfg.migration_cost(old, cpu) if cycles is None else cycles
        for tid, on in self.thread_vcpu.items():
            if on == vcpu:
                self.engine.move_thread(tid, cpu, cost)


class GuestShim:
    """libunicache's read path in the simulated guest (``uc_pre`` and ``uc_maybe_migrate``).

    Every thread could use every vCPU when the shim loaded (the rule's ``allowed``); the
    claims are the guest's one :class:`~unicache_sim.guest.shimrule.ClaimTable`, a word per
    vCPU, and the budgets start again with each report, as the agent's harvest resets the
    shim's per-chunk migration counts. Each call pays what the real shim adds to it
    (:mod:`~unicache_sim.guest.shimcost`: by what the table says of the chunk, and the call's
    size), before its read.

    :param host: the simulated host (its table is the guest's view).
    :param cost: the shim's cost per call (default: the shipped calibration,
        :data:`SHIM_COST`, as this module holds it when the shim is made).
    """

    def __init__(self, host: SimHost, cost: ShimCost | None = None) -> None:
        self.host = host
        self.cost = cost if cost is not None else SHIM_COST
        self.claims = shimrule.ClaimTable(host.n_vcpus)
        self._allowed = (1 << host.n_vcpus) - 1  # every vCPU
        self._spent: dict[ChunkId, int] = {}
        self._spent_tick = -1
        #: threads the shim moved: each is pinned to one vCPU (``uc_pinned``)
        self._pinned: set[int] = set()
        #: per thread, (chunk, end offset) of its last read (``uc_seq_file``, ``uc_seq_end``)
        self._seq: dict[int, tuple[ChunkId, int]] = {}

    def read_chunk(
        self,
        tid: int,
        obj: int,
        chunk: ChunkId,
        offset: int,
        length: int,
        compute: float,
        file_bytes: int,
    ) -> None:
        """Queue one read call of thread ``tid`` inside one chunk (``length`` bytes at file
        offset ``offset`` of a file of ``file_bytes``): run it where the rule says."""
        host = self.host
        seq = self._seq
        previous = seq.get(tid)
        seq[tid] = (chunk, offset + length)
        # a read continuing the thread's previous one inside the chunk is the same run
        host.record_read(tid, chunk, length, previous != (chunk, offset))
        table = host.table
        if table is not None and not host.homes and tid in self._pinned:
            # a table that sends no chunk to a vCPU (SCU left the VM alone; colors and
            # replicas may stay): the thread gets its own CPUs back (``uc_unpin``) and the
            # guest's scheduler spreads it again
            self._unpin(tid)
        entry = host.entries.get(chunk) if table is not None else None
        state = "none" if table is None else "unplaced" if entry is None else "placed"
        host.engine.push_compute(tid, self.cost.cycles(state, length))
        kind: Literal["read", "nt"] = "read"
        if entry is not None and table is not None:
            prev_end = shimrule.NO_PREVIOUS_END
            if previous is not None and previous[0].file_id == chunk.file_id:
                prev_end = previous[1]
            # a sequential reader counts the rest of the chunk (uc_span)
            span = length
            if length < table.min_read_size:
                span = shimrule.read_span(
                    length,
                    offset,
                    table.chunk_size,
                    file_bytes,
                    prev_end,
                )
            # MFC Figure 2 lines 3-4: reads below min_read_size always use caching loads
            if not entry.caching and span >= table.min_read_size:
                kind = "nt"
            self._place(tid, entry.vcpus, entry.migration_budget, chunk, span, table.min_read_size)
        elif table is not None and tid in self._pinned:
            # a pinned thread reading an unplaced chunk: any vCPU it may use, no budget, no
            # min_read_size (a move for CPU, not for data)
            self._place(tid, self._allowed, shimrule.BUDGET_UNLIMITED, chunk, length, 0)
        host.engine.push_access(tid, obj, offset, length, kind, compute)

    def _unpin(self, tid: int) -> None:
        """``uc_unpin``: the thread is no longer pinned; the guest's scheduler balances the
        runnable threads over the vCPUs, modelled as its return to the vCPU it was spread to
        (a move between vCPUs costs what the shim's moves cost)."""
        host = self.host
        self._pinned.discard(tid)
        src, dst = host.thread_vcpu[tid], host.spread_vcpu[tid]
        if src != dst:
            host.thread_vcpu[tid] = dst
            cost = host.cfg.migration_cost(host.vcpu_cpu[src], host.vcpu_cpu[dst])
            host.engine.push_migrate(tid, host.vcpu_cpu[dst], cost)

    def _place(
        self,
        tid: int,
        vcpus: shimrule.VcpuMaskT,
        budget: int,
        chunk: ChunkId,
        length: int,
        min_read_size: int,
    ) -> None:
        host = self.host
        if self._spent_tick != host.tick:
            self._spent = {}
            self._spent_tick = host.tick
        reader = tid + 1  # claim words name threads 1..CLAIM_TID_MAX
        now_ns = int(host.engine.thread_time(tid) / host.cfg.clock_ghz)
        spent = self._spent.get(chunk, 0)
        decision = shimrule.decide(
            n=length,
            min_read_size=min_read_size,
            cur=host.thread_vcpu[tid],
            mask=vcpus,
            allowed=self._allowed,
            file_id=chunk.file_id,
            chunk=chunk.index,
            budget=budget,
            spent=spent,
            claims=self.claims,
            tid=reader,
            now_ns=now_ns,
        )
        if decision.action is shimrule.Action.NONE:
            return
        if decision.action is shimrule.Action.MIGRATE:
            self._spent[chunk] = spent + 1
            src = host.vcpu_cpu[host.thread_vcpu[tid]]
            dst = host.vcpu_cpu[decision.vcpu]
            host.thread_vcpu[tid] = decision.vcpu
            host.engine.push_migrate(tid, dst, host.cfg.migration_cost(src, dst))
            self._pinned.add(tid)
        self.claims.settle(decision, reader, now_ns)


def _scaled(count: int, scale: float) -> int:
    # a count seen in a sampled window, for the whole interval (a seen read stays seen)
    return max(1, round(count * scale)) if count > 0 else 0


def linux_float(
    rng: random.Random,
    float_prob: float,
    cfg: SimConfig,
    placed: dict[int, int],
    allowed: dict[int, frozenset[int]] | None = None,
) -> list[tuple[int, int]]:
    """A heuristic of CFS load balancing, for the host's runnable threads.

    Each thread moves now and then (``float_prob`` per balancing tick) to an idle CPU of
    its own LLC group (wake-affine) four times out of five, else of another group; only
    to CPUs it is allowed on (a cpuset), and never to one another thread runs on.

    :param rng: the random source (one per run).
    :param float_prob: probability that a thread moves at this tick.
    :param cfg: the machine.
    :param placed: thread -> the CPU it runs on, in the order threads are considered.
    :param allowed: thread -> the CPUs it may run on (missing: all).
    :returns: (thread, new CPU) per move, in order.
    """
    busy = set(placed.values())
    moves = []
    for thread, cpu in placed.items():
        if rng.random() >= float_prob:
            continue
        group = cfg.group_of(cpu)
        same = rng.random() < 0.8
        mine = (allowed or {}).get(thread)
        idle = [
            c
            for c in range(cfg.n_cpus)
            if c not in busy and (cfg.group_of(c) == group) == same and (mine is None or c in mine)
        ]
        if not idle:
            continue
        to = rng.choice(idle)
        moves.append((thread, to))
        busy.discard(cpu)
        busy.add(to)
    return moves


if TYPE_CHECKING:  # conformance to the Host port, as mypy sees it
    from unicache.host.ports import Host

    _check: Host = SimHost.__new__(SimHost)
