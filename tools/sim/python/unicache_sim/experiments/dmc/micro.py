"""The DMC paper's three microbenchmarks (§6, Figures 3-5) on the simulator's caches.

* :func:`scan` (§6.1, Figure 3): one core has modified a 64 KiB array; the other reads
  it in segments of N lines, with loads or with a ``cmsg`` whose handler reads them where
  they are. Cycles per segment.
* :func:`pingpong` (§6.2, Figure 4): a thread migrates between two cores through their
  run queues; the source pushes the first k lines of the saved context with ``cpush``.
  Cycles per round trip.
* :func:`linked_list` (§6.3, Figure 5): two threads insert into or remove from a locked
  list of 20 elements and modify E extra lines under the lock, directly or in a ``cmsg``
  addressed by the lock. Cycles per operation.

Instruction counts are the programs' own (named below), one cycle each; the memory costs
are the cache model's and :class:`~unicache_sim.experiments.dmc.costs.DmcCosts`'. Nothing
here is fitted to the paper's figures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from unicache_sim.experiments.dmc.costs import (
    PAPER_COSTS,
    PAPER_LINE_BYTES,
    DmcCosts,
    paper_config,
)
from unicache_sim.experiments.dmc.isa import Core, DmcMachine, Region

#: §6.1: "a 64 Kbyte array"
SCAN_BYTES = 64 * 1024
#: per segment: the call of the read routine and its return
SEGMENT_INSTRUCTIONS = 4
#: per line read: the address increment and the loop branch
LOOP_INSTRUCTIONS = 2
#: the cmsg variant: set the flag before sending, and the spin load that sees it cleared
#: plus its branch
FLAG_INSTRUCTIONS = 3
#: a handler's call and return
HANDLER_INSTRUCTIONS = 4

#: a cooperative switch saves the registers the 32-bit PowerPC ELF ABI calls
#: non-volatile: r1, r2, r13-r31, CR and LR, 23 words (92 bytes: 6 lines of 16 bytes)
CONTEXT_WORDS = 23
#: the scheduler's own work per migration: deschedule and pick the idle thread (10),
#: enqueue on the remote run queue (10), dequeue (10), resume the thread (5)
SCHED_INSTRUCTIONS = 35
#: the idle loop's poll: load, compare, branch, and the jump back
POLL_INSTRUCTIONS = 4

#: §6.3: "initializes a list by inserting 20 elements"
LIST_ELEMENTS = 20
#: spin-lock acquire (lwarx, compare, stwcx., branch) and release (sync, store)
LOCK_INSTRUCTIONS = 6
#: pointer updates and the choice of insert or remove, besides the memory accesses
LIST_INSTRUCTIONS = 10
#: per extra line: load, add (the store is the access)
EXTRA_INSTRUCTIONS = 2
#: operations measured per seed, after a warm-up
LIST_OPS = 2_000
LIST_WARM_OPS = 200


@dataclass(frozen=True, slots=True)
class ScanPoint:
    """Figure 3 at one segment size.

    :param lines: lines per segment.
    :param lw: cycles per segment read with loads.
    :param cmsg: cycles per segment read by a cmsg handler.
    """

    lines: int
    lw: float
    cmsg: float

    @property
    def faster(self) -> float:
        """How much faster cmsg is (0.17 = 17 % less time)."""
        return 1.0 - self.cmsg / self.lw


def scan(lines: int, costs: DmcCosts = PAPER_COSTS) -> ScanPoint:
    """§6.1: read a 64 KiB array the other core modified, ``lines`` lines at a time."""
    return ScanPoint(lines, _scan(lines, False, costs), _scan(lines, True, costs))


def _scan(lines: int, use_cmsg: bool, costs: DmcCosts) -> float:
    machine = DmcMachine(paper_config(costs), costs)
    writer, reader = machine.cores
    array = machine.alloc(SCAN_BYTES // machine.cfg.line_size)
    for line in range(array.lines):
        writer.store(array, line)
    segments = array.lines // lines
    total = 0.0
    for s in range(segments):
        first = s * lines

        def read(core: Core, first: int = first) -> float:
            return sum(core.load(array, first + i) + LOOP_INSTRUCTIONS for i in range(lines))

        total += SEGMENT_INSTRUCTIONS
        if use_cmsg:
            delivered, cycles = reader.cmsg(
                array, first, lambda core: HANDLER_INSTRUCTIONS + read(core)
            )
            total += cycles + FLAG_INSTRUCTIONS + (0.0 if delivered else read(reader))
        else:
            total += read(reader)
    return total / segments


def pingpong(
    pushed: int,
    costs: DmcCosts = PAPER_COSTS,
    line_size: int = PAPER_LINE_BYTES,
    round_trips: int = 50,
) -> float:
    """§6.2: cycles per round trip of a thread between two cores, the source pushing the
    first ``pushed`` lines of the saved context (pushes past the context find nothing).
    With another model's ``costs`` and ``line_size``: the same program at its latencies."""
    machine = DmcMachine(paper_config(costs, line_size), costs)
    line_words = machine.cfg.line_size // 4
    context = machine.alloc(-(-CONTEXT_WORDS // line_words))
    run_queues = machine.alloc(2)  # one line per core
    src, dst = machine.cores
    # the thread starts on core 0, its context saved there; each core polls its queue
    for line in range(context.lines):
        src.store(context, line)
    dst.load(run_queues, dst.cpu)
    src.load(run_queues, src.cpu)
    total = 0.0
    warm = 2
    for trip in range(warm + round_trips):
        cycles = 0.0
        for _ in range(2):
            cycles += _migrate(src, dst, context, run_queues, pushed)
            src, dst = dst, src
        if trip >= warm:
            total += cycles
    return total / round_trips


def _migrate(src: Core, dst: Core, context: Region, run_queues: Region, pushed: int) -> float:
    """One migration from ``src`` to ``dst``: save, push, enqueue; poll, dequeue, restore."""
    saved_words = CONTEXT_WORDS - context.lines  # the words after each line's first
    cycles = float(SCHED_INSTRUCTIONS + POLL_INSTRUCTIONS + 2 * saved_words)
    cycles += sum(src.store(context, line) for line in range(context.lines))
    push = [line for line in range(min(pushed, context.lines))]
    cycles += src.cpush(context, push, dst.cpu)
    cycles += (pushed - len(push)) * src.machine.costs.push_issue  # nothing to push
    cycles += src.store(run_queues, dst.cpu)  # enqueue
    cycles += dst.load(run_queues, dst.cpu)  # the idle loop's poll sees it
    cycles += dst.store(run_queues, dst.cpu)  # dequeue
    cycles += sum(dst.load(context, line) for line in range(context.lines))
    # the source goes back to polling its own queue
    src.load(run_queues, src.cpu)
    return cycles


def linked_list(
    extra: int, use_cmsg: bool, seed: int, costs: DmcCosts = PAPER_COSTS, ops: int = LIST_OPS
) -> float:
    """§6.3: cycles per list operation with ``extra`` extra lines modified under the lock,
    the operations issued by two threads (one per core, the issuer drawn at random)."""
    machine = DmcMachine(paper_config(costs), costs)
    rng = random.Random(seed)
    lock = machine.alloc(1)
    head = machine.alloc(1)
    extras = machine.alloc(max(1, extra))
    pool = machine.alloc(4 * LIST_ELEMENTS)
    elements: list[int] = []
    free = list(range(pool.lines))
    state = _List(lock, head, extras, pool, extra, elements, free)
    first = machine.cores[0]
    for _ in range(LIST_ELEMENTS):
        state.operate(first, None, insert=True)
    total = 0.0
    for n in range(LIST_WARM_OPS + ops):
        issuer = machine.cores[rng.randrange(2)]
        rival = machine.cores[1 - issuer.cpu]
        insert = not elements or (rng.random() < 0.5 and bool(free))
        if use_cmsg:

            def handler(core: Core, insert: bool = insert) -> float:
                return state.operate(core, None, insert)

            delivered, cycles = issuer.cmsg(lock, 0, handler)
            if not delivered:
                cycles += state.operate(issuer, None, insert)
        else:
            cycles = state.operate(issuer, rival, insert)
        if n >= LIST_WARM_OPS:
            total += cycles
    return total / ops


@dataclass(slots=True)
class _List:
    """The list, its lock and its extra lines (one element per line, inserted and removed
    at the head)."""

    lock: Region
    head: Region
    extras: Region
    pool: Region
    extra: int
    elements: list[int]
    free: list[int]

    def operate(self, core: Core, rival: Core | None, insert: bool) -> float:
        """One operation by ``core``; ``rival`` spins on the lock meanwhile (its reads
        are its own time, but they make the release an invalidation)."""
        cycles = float(LOCK_INSTRUCTIONS + LIST_INSTRUCTIONS)
        cycles += core.store(self.lock, 0)  # acquire
        if rival is not None:
            rival.load(self.lock, 0)  # spinning
        cycles += core.load(self.head, 0)
        if insert:
            new = self.free.pop()
            cycles += core.store(self.pool, new)  # new.next, new.prev
            cycles += core.store(self.head, 0)  # head.next = new
            if self.elements:
                cycles += core.store(self.pool, self.elements[0])  # old first.prev
            self.elements.insert(0, new)
        else:
            gone = self.elements.pop(0)
            cycles += core.load(self.pool, gone)  # gone.next
            cycles += core.store(self.head, 0)  # head.next = gone.next
            if self.elements:
                cycles += core.store(self.pool, self.elements[0])  # its prev
            self.free.append(gone)
        for line in range(self.extra):
            cycles += core.store(self.extras, line) + EXTRA_INSTRUCTIONS
        cycles += core.store(self.lock, 0)  # release
        return cycles
