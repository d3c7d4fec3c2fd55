"""SRM-buffer for VMs: which LLC color each page-cache sequence of a guest gets.

Follows the SRM-buffer paper (srm-buffer-llc-thrashing.md) §3.2 and its Figure 7, with
guest processes and guest files in the place of the kernel's:

* a *sequence* is a group of blocks that are read one after the other; §3.2 forms them
  with two heuristics: the *same-file heuristic* (files longer than ``T_l`` blocks, a new
  color every ``T_l`` consecutively read blocks) and the *same-application heuristic*
  (blocks read one after the other by one process, for small files);
* the *colored zone* (§3.2, Figure 6) keeps one free list per color; a sequence is handed
  an unmarked list with more than ``T_l`` pages, and the zone is refilled from the
  normal zone's inactive pages when no such list exists or a list becomes empty, so a
  color is never exhausted;
* VM (anonymous) page faults rotate over *all* colors (Figure 7, ``p->vm_color``), so
  virtual memory still spreads evenly over the whole LLC;
* weak-locality detection (unicache's addition): only files the guest reports as
  streaming (each chunk read at most once and not read again in the next interval) are
  confined; a file that is scanned again and again and would fit the LLC is §4.5's
  adverse case (12-17 % slowdown when confined), so it keeps normal spread placement.

Pure: no I/O, no clock, no threads; the same state and events give the same decision.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from unicache.errors import ConfigError, StateError
from unicache.topology import Topology

#: §3.2: sequence length threshold T_l (pages); §4.6 finds 128-512 a good range
T_L = 256

# Rule names as they appear in reasons, logs and metrics.
RULE_SAME_FILE = "§3.2 same-file"
RULE_SAME_APP = "§3.2 same-application"
RULE_NEW_SEQUENCE = "fig7 first-block"
RULE_ROTATE = "fig7 update_color T_l"
RULE_REFILL = "§3.2 refill-colored-zone"
RULE_VM_FAULT = "fig7 vm_color round-robin"
RULE_STRONG_LOCALITY = "§4.5 strong-locality spread"
RULE_SHARED = "§3.2 all-colors-marked shared"


def page_colors(topology: Topology) -> int:
    """Number of page colors of a machine's LLC (§2.2: 4 MiB 16-way, 4 KiB pages -> 64).

    :param topology: the machine.
    :returns: ``llc.size_bytes // llc.ways // page_size``, at least 1.
    """
    llc = topology.llc
    return max(1, llc.size_bytes // llc.ways // topology.page_size)


class SequenceKind(enum.StrEnum):
    """Which §3.2 heuristic formed a sequence."""

    #: same-file heuristic: one file larger than T_l blocks
    FILE = "file"
    #: same-application heuristic: one process's consecutive blocks
    PROCESS = "process"


@dataclass(frozen=True, slots=True, order=True)
class SequenceKey:
    """A sequence of one VM: a large file or a process.

    :param vm: the VM.
    :param kind: the heuristic that formed it.
    :param ident: the guest's opaque file id, or the guest pid.
    """

    vm: str
    kind: SequenceKind
    ident: int

    def __str__(self) -> str:
        return f"{self.vm}/{self.kind}:{self.ident:x}"


@dataclass(frozen=True, slots=True, order=True)
class ProcessKey:
    """A guest process: VM and pid.

    :param vm: the VM.
    :param pid: the guest pid.
    """

    vm: str
    pid: int


@dataclass(frozen=True, slots=True)
class BufferMiss:
    """A page-cache miss in a guest (Figure 7 "ON A BUFFER CACHE MISS").

    :param vm: the VM.
    :param pid: the guest process that reads (or writes) the block.
    :param file_id: the guest's opaque file id.
    :param block: the page index in the file.
    :param file_blocks: the file's size in pages.
    """

    vm: str
    pid: int
    file_id: int
    block: int
    file_blocks: int


@dataclass(frozen=True, slots=True)
class PageFault:
    """An anonymous page fault of a guest process (Figure 7 "ON A VM PAGE FAULT").

    :param vm: the VM.
    :param pid: the guest process.
    """

    vm: str
    pid: int


@dataclass(frozen=True, slots=True)
class CloseFile:
    """A guest file is no longer read (closed or evicted): its sequence releases its color.

    :param vm: the VM.
    :param file_id: the guest's opaque file id.
    """

    vm: str
    file_id: int


@dataclass(frozen=True, slots=True)
class ProcessExit:
    """A guest process exited: its sequence releases its color, its VM color is forgotten.

    :param vm: the VM.
    :param pid: the guest pid.
    """

    vm: str
    pid: int


#: every event the policy handles, in the order they happened
SrmEvent = BufferMiss | PageFault | CloseFile | ProcessExit


@dataclass(frozen=True, slots=True)
class SequenceColor:
    """A sequence gets a (new) color: its next ``T_l`` pages are allocated in it.

    Figure 7's own record, per sequence and color, inside the policy: the host's action
    is :class:`unicache.model.AssignColor`, per run of a guest file's chunks, which
    :mod:`unicache.policy.srm.colors` (the per-VM adapter) builds from the colors of the
    pages (:attr:`SrmDecision.pages`).

    :param sequence: which sequence.
    :param color: the color.
    :param rule: the rule that produced it.
    :param reason: one line for humans.
    """

    sequence: SequenceKey
    color: int
    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class RefillZone:
    """Move inactive pages of one color from the normal zone into the colored zone.

    :param color: the color list to refill.
    :param pages: how many pages.
    :param reason: one line for humans.
    """

    color: int
    pages: int
    reason: str


@dataclass(frozen=True, slots=True)
class SrmParams:
    """Parameters of SRM-buffer.

    :param n_colors: Figure 7 ``NR_COLORS``; see :func:`page_colors`.
    :param t_l: §3.2 sequence length threshold ``T_l``.
    :param color_only_weak: confine only files detected as weak-locality (streaming).
    """

    n_colors: int
    t_l: int = T_L
    color_only_weak: bool = True

    def __post_init__(self) -> None:
        if self.n_colors < 1 or self.t_l < 1:
            raise ConfigError(f"SrmParams needs n_colors >= 1 and t_l >= 1, got {self}")


@dataclass(frozen=True, slots=True)
class SequenceState:
    """Figure 7's ``color`` and ``nr_block`` of one sequence.

    :param key: the sequence.
    :param color: its current color.
    :param nr_block: pages allocated in that color since it was assigned (0..T_l).
    """

    key: SequenceKey
    color: int
    nr_block: int


@dataclass(frozen=True, slots=True)
class SrmState:
    """Everything SRM remembers between rounds (immutable; each round returns a new one).

    :param free: free pages in the colored zone, one entry per color (§3.2 color lists).
    :param marks: sequences currently holding each color (Figure 7 "mark l").
    :param sequences: the sequences, sorted by key.
    :param vm_colors: Figure 7 ``p->vm_color`` per process, sorted by process.
    :param weak_files: ``(vm, file id)`` of files detected as weak-locality.
    """

    free: tuple[int, ...]
    marks: tuple[int, ...]
    sequences: tuple[SequenceState, ...] = ()
    vm_colors: tuple[tuple[ProcessKey, int], ...] = ()
    weak_files: frozenset[tuple[str, int]] = frozenset()

    @staticmethod
    def initial(params: SrmParams) -> SrmState:
        """A colored zone filled as §3.2 refills it (T_l + 1 pages per color), no sequences."""
        return SrmState(free=(params.t_l + 1,) * params.n_colors, marks=(0,) * params.n_colors)

    def sequence(self, key: SequenceKey) -> SequenceState | None:
        """The state of one sequence, if it exists."""
        for seq in self.sequences:
            if seq.key == key:
                return seq
        return None


@dataclass(frozen=True, slots=True)
class SrmDecision:
    """What one SRM round decided.

    :param assignments: colors handed to sequences, in order.
    :param refills: colored-zone refills, in order.
    :param pages: the color of the page allocated for each miss and fault, in order.
    :param state: the state after the round.
    """

    assignments: tuple[SequenceColor, ...]
    refills: tuple[RefillZone, ...]
    pages: tuple[int, ...]
    state: SrmState


class _Work:
    """Mutable scratch copy of a state, used only inside :func:`srm_round`."""

    def __init__(self, state: SrmState, params: SrmParams) -> None:
        if len(state.free) != params.n_colors or len(state.marks) != params.n_colors:
            raise StateError.restored("SrmState does not have one free list per color")
        self.params = params
        self.free = list(state.free)
        self.marks = list(state.marks)
        self.seqs = {s.key: s for s in state.sequences}
        self.vm_colors = dict(state.vm_colors)
        self.weak = state.weak_files
        self.assignments: list[SequenceColor] = []
        self.refills: list[RefillZone] = []
        self.pages: list[int] = []

    def refill(self, why: str) -> None:
        """§3.2: refill "until the shortest list has more pages than T_l"."""
        target = self.params.t_l + 1
        for color, have in enumerate(self.free):
            if have < target:
                self.refills.append(
                    RefillZone(color, target - have, f"{RULE_REFILL}: {why} (color {color})")
                )
                self.free[color] = target

    def pick(self, previous: int | None) -> tuple[int, str]:
        """Figure 7: an unmarked list with more pages than T_l, most free pages first.

        Sort keys: unmarked first, then more free pages, then lower color. The sequence's
        previous color is avoided whenever another color exists, so a sequence rotates.
        """
        n = self.params.n_colors
        candidates = [c for c in range(n) if c != previous] or [previous or 0]
        usable = [c for c in candidates if self.marks[c] == 0 and self.free[c] > self.params.t_l]
        if not usable:
            self.refill("no unmarked list with more than T_l pages")
            usable = [c for c in candidates if self.marks[c] == 0]
        if usable:
            return min(usable, key=lambda c: (-self.free[c], c)), ""
        # More live sequences than colors: share the least-marked color.
        return min(candidates, key=lambda c: (self.marks[c], -self.free[c], c)), RULE_SHARED

    def allocate(self, color: int) -> None:
        """Take one page of ``color``; refill when its list becomes empty (§3.2)."""
        if self.free[color] == 0:
            self.refill(f"list of color {color} empty")
        self.free[color] -= 1
        self.pages.append(color)
        if self.free[color] == 0:
            self.refill(f"list of color {color} became empty")

    def buffer_miss(self, ev: BufferMiss) -> None:
        if self.params.color_only_weak and (ev.vm, ev.file_id) not in self.weak:
            # strong locality: spread like a conventional buffer (round-robin of its process)
            self.allocate(self._next_vm_color(ProcessKey(ev.vm, ev.pid)))
            return
        # Figure 7 FILE_SIZE_THRESHOLD = THRESHOLD * 4096 bytes: files of more than T_l pages
        if ev.file_blocks > self.params.t_l:
            key, rule = SequenceKey(ev.vm, SequenceKind.FILE, ev.file_id), RULE_SAME_FILE
        else:
            key, rule = SequenceKey(ev.vm, SequenceKind.PROCESS, ev.pid), RULE_SAME_APP
        seq = self.seqs.get(key)
        if seq is None or seq.nr_block >= self.params.t_l:
            previous = None if seq is None else seq.color
            if seq is not None:
                self.marks[seq.color] -= 1  # Figure 7: remove the mark on the list
            color, shared = self.pick(previous)
            self.marks[color] += 1
            step = RULE_NEW_SEQUENCE if seq is None else RULE_ROTATE
            why = f"{rule}, {step}" + (f", {shared}" if shared else "")
            self.assignments.append(
                SequenceColor(key, color, rule, f"{why}: {self.free[color]} free pages")
            )
            seq = SequenceState(key, color, 0)
        self.allocate(seq.color)
        self.seqs[key] = SequenceState(key, seq.color, seq.nr_block + 1)

    def _next_vm_color(self, proc: ProcessKey) -> int:
        color = self.vm_colors.get(proc, 0)
        self.vm_colors[proc] = (color + 1) % self.params.n_colors
        return color

    def page_fault(self, ev: PageFault) -> None:
        self.allocate(self._next_vm_color(ProcessKey(ev.vm, ev.pid)))

    def release(self, key: SequenceKey) -> None:
        seq = self.seqs.pop(key, None)
        if seq is not None:
            self.marks[seq.color] -= 1

    def state(self) -> SrmState:
        return SrmState(
            free=tuple(self.free),
            marks=tuple(self.marks),
            sequences=tuple(self.seqs[k] for k in sorted(self.seqs)),
            vm_colors=tuple(sorted(self.vm_colors.items())),
            weak_files=self.weak,
        )


def srm_round(
    state: SrmState,
    events: Iterable[SrmEvent],
    params: SrmParams,
    weak_files: frozenset[tuple[str, int]] | None = None,
) -> SrmDecision:
    """Figure 7 over a batch of events: the colors of their pages and of their sequences.

    1. Files in ``weak_files`` (or the state's, when ``None``) are confined; others spread.
    2. A buffer miss of a weak file larger than ``T_l`` blocks belongs to the file's
       sequence (same-file), otherwise to its process's (same-application).
    3. A sequence's first block, and every ``T_l``-th after it, gets a new color: an
       unmarked list with more than ``T_l`` free pages, the zone refilled if none.
    4. A VM page fault takes the process's next color in round-robin order.
    5. Closing a file, or the exit of a process, drops its sequence and unmarks its color.

    :param state: the state after the previous round.
    :param events: buffer misses and page faults, in the order they happened.
    :param params: the parameters.
    :param weak_files: new weak-locality classification, if any.
    :returns: assignments, refills, each event's page color and the new state.
    :raises StateError: if the state does not match ``params.n_colors``.
    """
    if weak_files is not None:
        state = SrmState(state.free, state.marks, state.sequences, state.vm_colors, weak_files)
    work = _Work(state, params)
    for ev in events:
        if isinstance(ev, BufferMiss):
            work.buffer_miss(ev)
        elif isinstance(ev, PageFault):
            work.page_fault(ev)
        elif isinstance(ev, CloseFile):
            work.release(SequenceKey(ev.vm, SequenceKind.FILE, ev.file_id))
        else:
            work.release(SequenceKey(ev.vm, SequenceKind.PROCESS, ev.pid))
            work.vm_colors.pop(ProcessKey(ev.vm, ev.pid), None)
    return SrmDecision(
        tuple(work.assignments), tuple(work.refills), tuple(work.pages), work.state()
    )


class SrmPolicy:
    """SRM-buffer with fixed parameters: ``start`` validates a restored state, ``decide``
    runs :func:`srm_round`.

    Invariants of every state it returns (checked by ``start``):

    1. one free list and one mark count per color;
    2. no color list is empty (§3.2: refilled before it could be exhausted);
    3. marks count exactly the live sequences holding each color;
    4. every sequence has used at most ``T_l`` pages of its color.

    :param params: the parameters.
    """

    name = "srm"

    def __init__(self, params: SrmParams) -> None:
        self.params = params

    def start(self, state: SrmState) -> None:
        """Validate a restored state (idempotent).

        :raises StateError: naming the broken invariant and the remedy.
        """
        n = self.params.n_colors
        if len(state.free) != n or len(state.marks) != n:
            raise StateError.restored(
                f"srm invariant 1: state has {len(state.free)} colors, params {n}; "
                "discard the state (the LLC or page size changed)"
            )
        if min(state.free) < 1:
            raise StateError.restored("srm invariant 2: an empty color list; discard the state")
        held = [0] * n
        for seq in state.sequences:
            if not 0 <= seq.color < n:
                raise StateError.restored(
                    f"srm invariant 3: {seq.key} has color {seq.color} >= {n}"
                )
            held[seq.color] += 1
        if tuple(held) != state.marks:
            raise StateError.restored(
                "srm invariant 3: marks do not match sequences; discard the state"
            )
        if any(not 0 <= s.nr_block <= self.params.t_l for s in state.sequences):
            raise StateError.restored(
                "srm invariant 4: a sequence used more than T_l pages; lower T_l?"
            )

    def decide(
        self,
        state: SrmState,
        events: Iterable[SrmEvent],
        weak_files: frozenset[tuple[str, int]] | None = None,
    ) -> SrmDecision:
        """One round (see :func:`srm_round`); the same inputs give the same decision."""
        return srm_round(state, events, self.params, weak_files)
