"""How each baseline of the MFC experiment places threads and issues reads.

* ``Linux``: no unicache; threads float the way Linux's load balancer moves them.
* ``UnicacheLive``: the product (the default): the simulated host runs the daemon's loop
  (``unicache.policy.round.UnicachePolicy``, OBS then SCU) on sampled intervals of the
  daemon's round period (``unicache_sim.guest.livetiming``), and the guest follows the tables
  with the shim's rule.
* ``UnicacheWhatIf``: the in-kernel MFC what-if, ``mfc_access`` synchronously per read.
* ``Oracle``: the machine's caches merged into one, free migration.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from unicache.host.ports import ActResult
from unicache.loop import RoundResult, run_rounds_sync
from unicache.model import (
    Action,
    ChunkAccess,
    ChunkId,
    GuestReport,
    Observation,
    PinVcpu,
    PublishPlacement,
    ReleaseVcpu,
)
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import ChunkKey, UnitView
from unicache.policy.scu.options import scu_options_for
from unicache.roundpace import RoundTrigger
from unicache.topology import Topology, Unify

from unicache_sim import _native
from unicache_sim.engine.calibration import CYCLES_PER_BYTE
from unicache_sim.engine.config import SimConfig
from unicache_sim.experiments.dmc.whatif import LookupShim
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.guest.earlyreport import EarlyReports
from unicache_sim.guest.opensample import COUNTED_WHOLE
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.simhost import SimHost, linux_float

#: the VM the simulated threads belong to
VM_NAME = "vm0"


class Baseline:
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

    def warm(self, rounds: int, settle: int = 0, most: int = 0) -> bool:
        """Whether the baseline has warmed up (the live loop: ``rounds`` rounds decided,
        its policy's standing unchanged for ``settle`` of them, or ``most`` rounds)."""
        return True

    def read(self, tid: int, obj: int, file_index: int) -> None:
        self.engine.push_access(tid, obj, 0, self.spec.file_bytes, "read", self.compute)

    def tick(self, now: float, tids: list[int]) -> None:
        """Periodic work at simulated time ``now``."""


class Linux(Baseline):
    name = "linux"

    def __init__(self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine) -> None:
        super().__init__(cfg, spec, engine)
        self.rng = random.Random(spec.seed * 7919)

    def tick(self, now: float, tids: list[int]) -> None:
        placed = {tid: self.engine.thread_cpu(tid) for tid in tids}
        for tid, to in linux_float(self.rng, self.spec.float_prob, self.cfg, placed):
            self.engine.move_thread(tid, to, self.cfg.migration_cost(placed[tid], to))


class Oracle(Baseline):
    name = "oracle"


class UnicacheWhatIf(Baseline):
    """The in-kernel MFC what-if: ``MfcTable.mfc_access`` synchronously on every read.

    Not the product: no host-guest loop, a core chosen per chunk by the simulator, no
    migration budget. It shows what an in-kernel MFC (the paper's own set-up) would gain.
    """

    name = "unicache"

    def __init__(
        self, cfg: SimConfig, spec: MfcSpec, engine: _native.Engine, topo: Topology
    ) -> None:
        super().__init__(cfg, spec, engine)
        unify = Unify(spec.unify)
        self.options = scu_options_for(topo, unify)
        self.units = topo.units(unify)
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
                self.engine.push_migrate(tid, target, self.cfg.migration_cost(cpu, target))
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


class UnicacheLive(Baseline):
    """The product: the daemon's loop on the simulated host, the shim's rule in the guest.

    Every sampled interval (``LoopTiming``) ends with the agent's report of it, scaled
    to the whole interval; the round (OBS + SCU, as ``unicache run`` decides) follows,
    and its actions (pins, the placement table) take effect before the next interval.
    Between those, a read of a chunk the host has not heard of makes the agent report
    early (its rule, :mod:`unicache_sim.guest.earlyreport`) and the daemon run an early round
    (its :class:`~unicache.roundpace.RoundTrigger`), as the product does; the channel
    takes no time here, so the report and the round's observation are one. With
    ``MfcSpec.opens`` the guest program opens each file it reads (:meth:`GuestShim.open_file`:
    the shim's per-file work, and its per-open sampling); without, it reads files it keeps
    open, counted whole.

    :param on_round: called with every round the loop ran (``tools/gen_traces.py`` records
        their observations as a trace).
    """

    name = "unicache"

    def __init__(
        self,
        cfg: SimConfig,
        spec: MfcSpec,
        engine: _native.Engine,
        topo: Topology,
        ws_bytes: int,
        on_round: Callable[[RoundResult], None] | None = None,
    ) -> None:
        super().__init__(cfg, spec, engine)
        self.on_round = on_round
        timing = spec.timing
        hz = cfg.clock_ghz * 1e9
        self.round_cycles = timing.round_s * hz
        self.host = SimHost(cfg, engine, VM_NAME, self.round_cycles)
        #: the host scheduler's randomness, drawn as ``Linux``'s is
        self.rng = random.Random(spec.seed * 7919)
        # WHAT-IF (no such hardware): the shim asks DMC's cllookup where a chunk is
        self.shim = (
            LookupShim(self.host, topo, spec.seed)
            if spec.dmc_lookup
            else GuestShim(self.host, seed=spec.seed)
        )
        self.policy = UnicachePolicy(topo, Unify(spec.unify))
        self.state = RoundState()
        #: the observation of the interval that just ended, for the loop's next round
        self._window: Observation | None = None
        # the daemon's loop itself (unicache.loop): a round runs when an interval ends
        self._rounds = run_rounds_sync(_WindowHost(self), self.policy, self.state)
        self.chunk = self.policy.scu.options.chunk_size
        self.sampled = timing.sampled
        self.ws_bytes = ws_bytes
        #: the sampled window's floors (:meth:`attach` sets them for the readers)
        self.window_bytes = timing.window_bytes(ws_bytes)
        self.hz = hz
        self.min_window = timing.min_window_s * hz
        self.window_start = 0.0
        self.window_issued = 0
        #: policy rounds decided so far, and how many of them early
        self.rounds = 0
        self.early_rounds = 0
        #: the agent's early-report rule and the daemon's round trigger
        self.early = EarlyReports(timing.early_report_s)
        self.trigger = RoundTrigger(timing.round_s, timing.early_round_s)
        #: rounds in a row the policy's standing has not changed (:meth:`warm`)
        self.settled = 0
        self._standing: tuple[frozenset[str], frozenset[str]] | None = None

    def attach(self, tids: list[int]) -> None:
        for i, tid in enumerate(tids):
            self.host.add_thread(tid, i % self.cfg.n_cpus)
        timing = self.spec.timing
        self.min_window = timing.min_window_per_thread(len(tids)) * self.hz
        self.window_bytes = timing.window_bytes(self.ws_bytes, len(tids))

    def tick(self, now: float, tids: list[int]) -> None:
        # the host is Linux: it load-balances the vCPU threads as it balances any thread
        # (``Linux.tick``), inside the cpusets OBS gave them
        self.host.float_vcpus(self.rng, self.spec.float_prob, tids)

    def read(self, tid: int, obj: int, file_index: int) -> None:
        size = self.spec.file_bytes
        # the program opens the file to read it whole (the shim counts it or skips it), or
        # reads a file it keeps open (counted whole, as the shim counts a long-open file)
        opened = self.shim.open_file(tid, file_index, size) if self.spec.opens else COUNTED_WHOLE
        # the program's read calls: its buffer, or one call per chunk; never across one
        buffer = self.spec.read_bytes or self.chunk
        offset = 0
        # the chunks the agent sees read (a skipped file's reads are not counted)
        read: set[ChunkId] = set()
        while offset < size:
            index = offset // self.chunk
            length = min(buffer, (index + 1) * self.chunk - offset, size - offset)
            chunk = ChunkId(file_index, index)
            if opened.counted:
                read.add(chunk)
            self.shim.read_chunk(tid, obj, chunk, offset, length, self.compute, size, opened)
            offset += length
        self.window_issued += size
        now = self.engine.thread_time(tid)
        elapsed = now - self.window_start
        full = elapsed >= self.round_cycles
        sampled = self.window_issued >= self.window_bytes and elapsed >= self.min_window
        if full or sampled:
            self._round(now, elapsed, periodic=True)
        elif self._early_report(now / self.hz, read):
            self._round(now, elapsed, periodic=False)

    def _early_report(self, t: float, read: set[ChunkId]) -> bool:
        """The agent's early report of a fresh chunk, and whether the daemon's trigger
        starts a round on it now."""
        if self.early.saw(read) and t >= self.early.due_at():
            chunks = self.host.read_chunks()
            report = GuestReport(
                VM_NAME, self.host.seq, 0.0, tuple(ChunkAccess(c, 0, 0, 0, ()) for c in chunks)
            )
            self.early.reported(chunks, t)
            self.trigger.arrived(report, t)
        return self.trigger.wanted and t >= self.trigger.next_start()

    def warm(self, rounds: int, settle: int = 0, most: int = 0) -> bool:
        if self.rounds < rounds:
            return False
        return self.settled >= settle or (most > 0 and self.rounds >= most)

    def _round(self, now: float, elapsed: float, periodic: bool) -> None:
        t = now / self.hz
        self.trigger.started(t)
        self.trigger.drained()
        if periodic:
            # the agent's report of this interval (a sampled window stands for all of it)
            scale = max(1.0, self.round_cycles / elapsed) if self.sampled and elapsed > 0 else 1.0
            self._window = self.host.observe(elapsed, scale)
        else:  # an early report covers what was read since the last, unscaled
            self._window = self.host.observe(elapsed, 1.0, seconds=elapsed / self.hz)
        reported = [a.chunk for r in self._window.reports for a in r.chunks]
        rnd = next(self._rounds)
        if self.on_round is not None:
            self.on_round(rnd)
        decision, self.state = rnd.decision, rnd.state
        self.rounds += 1
        self.early_rounds += not periodic
        self.trigger.took(rnd.observation.reports, [VM_NAME], t, periodic)
        self.early.reported(reported, t)
        for action in decision.actions:
            if isinstance(action, PublishPlacement) and action.vm == VM_NAME:
                self.early.table(action.table.version, (e.chunk for e in action.table.entries))
        # the standing: which VMs SCU leaves alone, whether it placed them, no new pins or
        # releases
        standing = (self.state.scu.aside, self.policy.scu.placed(self.state.scu))
        pinned = any(isinstance(a, PinVcpu | ReleaseVcpu) for a in decision.actions)
        same = standing == self._standing and not pinned
        self.settled = self.settled + 1 if same else 0
        self._standing = standing
        self.window_start = now
        self.window_issued = 0


class _WindowHost:
    """The simulated host as the daemon's loop sees it: it observes the interval that
    just ended (:meth:`UnicacheLive._round` sampled it) and acts on the simulated host."""

    name = "simulated"

    def __init__(self, live: UnicacheLive) -> None:
        self.live = live

    def observe(self) -> Observation | None:
        window, self.live._window = self.live._window, None
        return window

    def act(self, actions: Sequence[Action]) -> ActResult:
        return self.live.host.act(actions)
