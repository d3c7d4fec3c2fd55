"""SRM-buffer over guest reports: which colored guest node each run of a streaming file gets.

:mod:`unicache.policy.srm.buffer` is the paper's Figure 7 at page granularity, as a kernel would
run it on every buffer-cache miss. A host sees guests only through their reports, which
count chunks, one report interval late. This module adapts one to the other:

* the colors of a VM's colored zone are its colored guest NUMA nodes (``Vm.colored_nodes``,
  in node order): color ``c`` is the node ``colored_nodes[c]``, backed by host pages whose
  LLC colors are that node's ``colors``;
* one chunk stands for ``chunk_size / page_size`` pages, so the policy's ``T_l`` (§3.2,
  256 pages) becomes ``T_l * page_size / chunk_size`` chunks (at least one);
* which files are streaming comes from :func:`~unicache.policy.srm.locality.detect_weak_locality`;
  the others keep normal placement (§4.5's adverse case), and lose their colors;
* the report arrives after the read, and the table one round after the report, so each
  stream is colored ahead by ``lookahead_intervals`` (2) times what it read in the last
  interval (its rate times the host-guest lag), and by at least ``lookahead_runs`` runs
  of ``T_l`` pages: the guest finds the color node of the chunks it is about to read in
  its table before it reads them;
* a guest's file ids are opaque and the agent does not report processes, so every small
  streaming file of one VM belongs to one same-application sequence (pid 0);
* coloring steps aside where it is predicted to cost the co-runners more LLC hits than
  it saves them misses, or was measured to save none (:mod:`unicache.policy.srm.gain`);
* bounded per VM: at most ``max_colored_chunks`` chunks colored per round and remembered;
  the chunks left uncolored over the bound, and the oldest forgotten, are counted in an
  ``SRM_BOUNDED`` refusal.

Pure: no I/O, no clock; the same state and observation give the same decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from unicache.errors import ConfigError
from unicache.model import (
    AssignColor,
    ChunkId,
    CounterSample,
    GuestNode,
    GuestReport,
    Refusal,
    VcpuId,
    Vm,
)
from unicache.policy.srm import buffer as srm
from unicache.policy.srm.gain import (
    COLOR_STEP_ASIDE,
    GateState,
    corunner_counters,
    gate_round,
)
from unicache.policy.srm.locality import detect_weak_locality

#: pages per color of a sequence (SRM §3.2 ``T_l``)
T_L = srm.T_L
#: runs of ``T_l`` pages colored ahead of a stream (covers one report interval of lag)
LOOKAHEAD_RUNS = 1
#: report intervals between a guest's read and its table carrying the colors: the report
#: is sent one interval after the read, the table comes back after the next round
LOOKAHEAD_INTERVALS = 2
#: the most colored chunks remembered per VM (a guest cannot grow the table without bound)
MAX_COLORED_CHUNKS = 2_048
#: refusal kind: chunks of a VM's streams left uncolored, or colors forgotten, over
#: ``max_colored_chunks``
SRM_BOUNDED = "SRM_BOUNDED"


@dataclass(frozen=True, slots=True)
class ColorOptions:
    """How SRM-buffer runs over reports.

    :param chunk_size: bytes per chunk (the placement table's).
    :param page_size: bytes per page.
    :param t_l: §3.2 ``T_l``, in pages.
    :param lookahead_runs: runs of ``T_l`` pages colored ahead of a stream, at least.
    :param lookahead_intervals: intervals' worth of a stream's reads colored ahead of it.
    :param max_colored_chunks: the most colored chunks per VM.
    :param host_colors: page colors of the host's LLC (the share a colored node's colors
        take of it is what coloring costs the co-runners; 0: unknown, counted as the
        colors the VM's nodes name).
    :param line_size: bytes per cache line (a stream's bytes in lines).
    :param step_aside: color only where :mod:`unicache.policy.srm.gain` predicts a gain
        (``False``: always, to check the mechanism, as the daemon's ``--always-place``).
    """

    chunk_size: int
    page_size: int = 4096
    t_l: int = T_L
    lookahead_runs: int = LOOKAHEAD_RUNS
    lookahead_intervals: int = LOOKAHEAD_INTERVALS
    max_colored_chunks: int = MAX_COLORED_CHUNKS
    host_colors: int = 0
    line_size: int = 64
    step_aside: bool = True

    def __post_init__(self) -> None:
        if (
            min(self.chunk_size, self.page_size, self.t_l, self.line_size) < 1
            or min(self.lookahead_runs, self.lookahead_intervals, self.host_colors) < 0
        ):
            raise ConfigError(f"invalid ColorOptions: {self}")

    @property
    def t_l_chunks(self) -> int:
        """``T_l`` in chunks: the pages of one color run divided by the pages of a chunk."""
        return max(1, self.t_l * self.page_size // self.chunk_size)


@dataclass(frozen=True, slots=True, order=True)
class ColoredChunk:
    """A chunk whose page cache goes to one color.

    :param chunk: the chunk.
    :param color: the color (index into the VM's colored nodes).
    """

    chunk: ChunkId
    color: int


@dataclass(frozen=True, slots=True)
class VmColors:
    """SRM-buffer's state for one VM.

    :param vm: the VM.
    :param srm: the policy's state, in chunk units.
    :param seen: chunks read in the previous interval, for weak-locality detection.
    :param colored: the colored chunks, oldest first.
    :param gate: the step-aside's memory (:mod:`unicache.policy.srm.gain`).
    """

    vm: str
    srm: srm.SrmState
    seen: frozenset[tuple[str, int, int, int]] = frozenset()
    colored: tuple[ColoredChunk, ...] = ()
    gate: GateState = field(default_factory=GateState)


@dataclass(frozen=True, slots=True)
class ColorState:
    """SRM-buffer's state for every VM with colored nodes, by VM name.

    :param vms: per-VM states, sorted by VM.
    :param round: rounds decided so far.
    """

    vms: tuple[VmColors, ...] = ()
    round: int = 0

    def of(self, vm: str) -> VmColors | None:
        """The state of one VM, if it has one."""
        return next((v for v in self.vms if v.vm == vm), None)


@dataclass(frozen=True, slots=True)
class ColorDecision:
    """What one round decided.

    :param actions: new color runs, one action per run of chunks with one color.
    :param color_nodes: per VM, the color node of every colored chunk.
    :param state: the state after the round.
    :param refusals: VMs whose streams stay uncolored, and why; chunks dropped over the
        bounds.
    """

    actions: tuple[AssignColor, ...]
    color_nodes: Mapping[str, Mapping[ChunkId, int]]
    state: ColorState = field(default_factory=ColorState)
    refusals: tuple[Refusal, ...] = ()


def _runs(
    vm: Vm,
    nodes: tuple[GuestNode, ...],
    misses: list[srm.BufferMiss],
    colors: tuple[int, ...],
    why: dict[int, str],
) -> list[AssignColor]:
    """Group consecutive chunks of one file with one color into one action each."""
    actions: list[AssignColor] = []
    start = 0
    for i in range(1, len(misses) + 1):
        if (
            i < len(misses)
            and misses[i].file_id == misses[start].file_id
            and misses[i].block == misses[i - 1].block + 1
            and colors[i] == colors[start]
        ):
            continue
        first, last, color = misses[start], misses[i - 1], colors[start]
        rule = why.get(start, srm.RULE_SAME_FILE)
        actions.append(
            AssignColor(
                vm.name,
                first.file_id,
                first.block,
                last.block,
                color,
                nodes[color].node,
                rule,
                f"{rule}: chunks {first.block}-{last.block} of {first.file_id:016x} "
                f"to color {color} (guest node {nodes[color].node})",
            )
        )
        start = i
    return actions


def _vm_round(
    vm: Vm,
    nodes: tuple[GuestNode, ...],
    reports: list[GuestReport],
    prev: VmColors | None,
    options: ColorOptions,
) -> tuple[VmColors, Callable[[], list[AssignColor]], dict[int, int], str]:
    """Figure 7 over one VM's colored ``nodes`` and reports: its colored chunks, the new
    runs (built when called: the step-aside may drop them), the bytes of streaming files
    each vCPU read (the stream's own LLC traffic, for the step-aside), and what the bounds
    dropped ("" when nothing)."""
    params = srm.SrmParams(n_colors=len(nodes), t_l=options.t_l_chunks)
    if prev is None or len(prev.srm.free) != params.n_colors:
        prev = VmColors(vm.name, srm.SrmState.initial(params))  # the colored zone changed
    locality = detect_weak_locality(reports, options.chunk_size, prev.seen)
    colored = {c.chunk: c.color for c in prev.colored}
    # §4.5: files re-read within the LLC's reach lose their colors and spread again
    events: list[srm.SrmEvent] = [srm.CloseFile(vm.name, f) for _, f in sorted(locality.strong)]
    colored = {c: k for c, k in colored.items() if (vm.name, c.file_id) not in locality.strong}
    wanted, reached, rate, ahead, streamed = _wanted(
        vm.name, reports, locality.weak, params, options
    )
    # Figure 7's sequences end with their stream: a file not read this interval releases its
    # color (so the sequences a guest can hold are bounded by what it reads per interval)
    events += [
        srm.CloseFile(vm.name, seq.key.ident)
        for seq in prev.srm.sequences
        if seq.key.kind is srm.SequenceKind.FILE
        and seq.key.ident not in reached
        and (vm.name, seq.key.ident) not in locality.strong
    ]
    # bounded work per round: the fastest streams first, at most max_colored_chunks misses
    todo = sorted(wanted - colored.keys(), key=lambda c: (-rate[c.file_id], c))
    misses = [
        srm.BufferMiss(vm.name, 0, c.file_id, c.index, reached[c.file_id] + 1 + ahead[c.file_id])
        for c in sorted(todo[: options.max_colored_chunks])
    ]
    events += misses
    decision = srm.srm_round(prev.srm, events, params, locality.weak)
    # decision.pages holds one color per BufferMiss, in order (CloseFile allocates none)
    colors = decision.pages[-len(misses) :] if misses else ()
    # each run's rule: its heuristic, and whether it starts a new color (Figure 7) or goes
    # on with the color of the chunk before it (read in an earlier round)
    why: dict[int, str] = {}
    for i, miss in enumerate(misses):
        rule = srm.RULE_SAME_FILE if miss.file_blocks > params.t_l else srm.RULE_SAME_APP
        before = ChunkId(miss.file_id, miss.block - 1)
        if i > 0 and misses[i - 1].file_id == miss.file_id and misses[i - 1].block == before.index:
            previous: int | None = colors[i - 1]
        else:
            previous = colored.get(before)
        why[i] = rule if previous == colors[i] else f"{rule}, {srm.RULE_ROTATE}"
    for miss, color in zip(misses, colors, strict=True):
        colored[ChunkId(miss.file_id, miss.block)] = color
    kept = list(colored.items())[-options.max_colored_chunks :]  # dicts keep insertion order
    colored_now = tuple(ColoredChunk(c, k) for c, k in kept)
    return (
        VmColors(vm.name, decision.state, locality.seen, colored_now, prev.gate),
        lambda: _runs(vm, nodes, misses, colors, why),
        streamed,
        _bounded(vm.name, len(todo) - len(misses), len(colored) - len(kept), options),
    )


def _wanted(
    vm: str,
    reports: list[GuestReport],
    weak: AbstractSet[tuple[str, int]],
    params: srm.SrmParams,
    options: ColorOptions,
) -> tuple[set[ChunkId], dict[int, int], dict[int, int], dict[int, int], dict[int, int]]:
    """The chunks of streaming files read this interval and the runs ahead of each stream:
    the chunks wanted colored, each stream's last chunk read, its reads, its lookahead, and
    the bytes of streams each vCPU read."""
    reached: dict[int, int] = {}
    rate: dict[int, int] = {}
    wanted: set[ChunkId] = set()
    streamed: dict[int, int] = {}
    for report in reports:
        for access in report.chunks:
            fid = access.chunk.file_id
            if (vm, fid) in weak:
                for index, nbytes in access.vcpu_bytes:
                    streamed[index] = streamed.get(index, 0) + nbytes
                wanted.add(access.chunk)
                reached[fid] = max(reached.get(fid, -1), access.chunk.index)
                rate[fid] = rate.get(fid, 0) + 1
    ahead: dict[int, int] = {}
    for fid, last in reached.items():
        # one interval's worth of the stream, in whole T_l runs, bounded by the plan's size
        runs = max(
            options.lookahead_runs,
            -(-rate[fid] * options.lookahead_intervals // params.t_l),
        )
        ahead[fid] = min(runs * params.t_l, options.max_colored_chunks // 4)
        wanted.update(ChunkId(fid, i) for i in range(last + 1, last + 1 + ahead[fid]))
    return wanted, reached, rate, ahead, streamed


def _bounded(vm: str, uncolored: int, forgotten: int, options: ColorOptions) -> str:
    """The ``SRM_BOUNDED`` line of one VM and round ("" when nothing was dropped)."""
    cap = options.max_colored_chunks
    parts = []
    if uncolored > 0:
        parts.append(f"{uncolored} chunks of its streams left uncolored (over {cap} a round)")
    if forgotten > 0:
        parts.append(f"{forgotten} colored chunks forgotten, the oldest (over the {cap} kept)")
    return f"SRM dropped input of {vm}: {'; '.join(parts)}" if parts else ""


def colors_round(
    vms: Iterable[Vm],
    reports: Iterable[GuestReport],
    state: ColorState,
    options: ColorOptions,
    samples: Iterable[CounterSample] = (),
    co_runners: Mapping[str, frozenset[VcpuId]] | None = None,
) -> ColorDecision:
    """One round of SRM-buffer for every VM with colored guest nodes.

    1. Classify the VM's files by locality from this and the previous interval's reports.
    2. Strong-locality files close their sequences and lose their colors (§4.5).
    3. Each chunk of a streaming file read this interval is a buffer miss of Figure 7
       (same-file for files longer than ``T_l``, otherwise the VM's same-application
       sequence), and so are the chunks ahead of the stream: ``lookahead_intervals``
       times what it read this interval, at least ``lookahead_runs`` runs of ``T_l``.
    4. Consecutive chunks of one file that got one color become one ``AssignColor``.
    5. Step aside (``options.step_aside``): a VM that streams this round keeps its colors
       only while :func:`~unicache.policy.srm.gain.gate_round` says they pay, from the
       LLC counters of its co-runners; otherwise its chunks lose their colors.

    :param vms: the managed VMs (those without colored nodes are skipped).
    :param reports: this round's guest reports.
    :param state: the state after the previous round.
    :param options: the options.
    :param samples: this round's counter samples.
    :param co_runners: per VM, the vCPUs that share its LLC groups (missing: its own).
    :returns: the actions, every colored chunk's node, the new state and the refusals.
    """
    by_vm: dict[str, list[GuestReport]] = {}
    for report in reports:
        by_vm.setdefault(report.vm, []).append(report)
    samples = tuple(samples)
    before = {v.vm: v for v in state.vms}  # one lookup per VM, not a scan (a fleet's VMs)
    round_no = state.round + 1
    out: list[VmColors] = []
    actions: list[AssignColor] = []
    refusals: list[Refusal] = []
    nodes: dict[str, dict[ChunkId, int]] = {}
    for vm in sorted(vms, key=lambda v: v.name):
        colored_nodes = vm.colored_nodes() if vm.nodes else ()  # most VMs: no guest nodes
        if not colored_nodes:
            continue
        vm_state, runs, streamed, bounded = _vm_round(
            vm, colored_nodes, by_vm.get(vm.name, []), before.get(vm.name), options
        )
        colored_now = True
        if bounded:
            refusals.append(Refusal(SRM_BOUNDED, bounded))
        if options.step_aside and streamed:
            own = {v.id for v in vm.vcpus}
            lines = {VcpuId(vm.name, i): n // options.line_size for i, n in streamed.items()}
            counters = corunner_counters(
                samples, (co_runners or {}).get(vm.name, frozenset()) | own, lines
            )
            gate, gain = gate_round(
                vm_state.gate, counters, _llc_share(colored_nodes, options), round_no
            )
            colored_now = gain.pays
            if not gain.pays:
                refusals.append(
                    Refusal(
                        COLOR_STEP_ASIDE,
                        f"SRM leaves {vm.name}'s streams uncolored: {gain.reason}",
                    )
                )
            # the state's own fields, not dataclasses.replace (every streaming VM, every round)
            colored = vm_state.colored if gain.pays else ()
            vm_state = VmColors(vm.name, vm_state.srm, vm_state.seen, colored, gate)
        out.append(vm_state)
        if colored_now:
            actions += runs()
        nodes[vm.name] = {c.chunk: colored_nodes[c.color].node for c in vm_state.colored}
    return ColorDecision(tuple(actions), nodes, ColorState(tuple(out), round_no), tuple(refusals))


def _llc_share(colored_nodes: Iterable[GuestNode], options: ColorOptions) -> float:
    """The share of the host's LLC that the colored nodes' colors take."""
    colors: set[int] = set()
    for node in colored_nodes:
        colors |= node.colors
    total = options.host_colors or (max(colors) + 1 if colors else 1)
    return min(len(colors) / total, 1.0)
