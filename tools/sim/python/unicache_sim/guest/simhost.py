"""The simulated host: the Host port over the native engine, for one simulated VM.

``SimHost`` implements :class:`unicache.host.ports.Host` for one simulated VM: ``observe``
turns the engine's per-thread counters and the reads the guest made since the last round
into an :class:`~unicache.model.Observation` (counter samples per vCPU, a guest report
per VM, exactly the shapes the live daemon builds); ``act`` carries out the policy's
actions: ``PinVcpu`` moves a vCPU (and the thread on it) into its new CPU set,
``ReleaseVcpu`` lets it float over every CPU again,
``PublishPlacement`` hands the guest its table, ``SetCpuWeight`` is accepted but has no
effect (the engine shares a CPU first come, first served). The guest reads through
:class:`~unicache_sim.guest.shim.GuestShim`, which records what the agent counts
(:meth:`SimHost.record_read`) and follows the published table. The policy behind the host
is whatever drives it: the simulator uses :class:`unicache.policy.round.UnicachePolicy`
(OBS then SCU), as the daemon does.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
        #: the files the table names (its file entries: an entry for one of their chunks)
        self.named_files: frozenset[int] = frozenset()
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

    def record_read(
        self, tid: int, chunk: ChunkId, nbytes: int, run: bool = True, scale: int = 1
    ) -> None:
        """What the guest agent counts for its next report.

        :param run: the read starts a run in the chunk (``uc_count``: a read continuing the
            thread's previous one inside the chunk adds bytes only).
        :param scale: the counts (bytes and runs) are multiplied by this: a sampled file's
            stand for the opens not counted (:mod:`~unicache_sim.guest.opensample`).
        """
        acc = self._reads.get(chunk)
        if acc is None:  # built for a chunk's first read only (this runs on every read)
            acc = self._reads[chunk] = _ChunkReads()
        nbytes *= scale
        acc.bytes_read += nbytes
        acc.reads += run * scale
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
                self.named_files = frozenset(e.chunk.file_id for e in action.table.entries)
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
