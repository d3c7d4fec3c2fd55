"""The SRM-buffer experiment of the SRM paper's §2 (Figures 1-2) on the simulated host.

A streaming reader (*grep* over a kernel-source tarball already in the page cache) runs
next to *mergesort* (a non-recursive 2-way mergesort of 64-byte records, arrays of
256 KiB to 1.5 MiB, working set about twice the array) on an ``xeon-x5355``, whose two
cores of a pair share a 4 MiB 16-way L2. As in §2:

* ``T1``: grep on a core of *another* L2 (``apart``); ``T2``: grep on the other core of
  mergesort's own L2 (``shared``); slowdown ``(T2 - T1) / T1`` (Figure 2a) and mergesort's
  LLC misses per million instructions (Figure 2b); mergesort ``alone`` is run as well.
* ``coloring`` off: every page comes from the normal allocator (random frames, so page
  colors are spread over the whole LLC, as a buddy allocator's free lists after uptime).
* ``coloring`` on: first the product's step-aside (:mod:`unicache.policy.colorgain`, run
  through :func:`unicache.policy.colors.colors_round`) judges the uncolored ``shared`` run
  from the counters a host would read (mergesort's and grep's LLC references and misses,
  grep's bytes from the guest report of its stream); where it predicts no gain the host
  colors nothing and the SRM point is the uncolored one. Otherwise the host runs
  :class:`unicache.policy.srm.SrmPolicy`, fed the events a host sees: the tarball's
  page-cache fills are ``BufferMiss`` events (the file is classified as streaming by
  :func:`unicache.policy.locality.detect_weak_locality` from the guest report of grep's
  reads), mergesort's anonymous pages are ``PageFault`` events;
  every page gets a frame of the color the policy decided (``Engine.place_page``).

Pages are physical frames of the simulator's allocator; a frame's color is
``frame % page_colors(topology)`` (64 on the xeon-x5355: 4 MiB / 16 ways / 4 KiB).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from unicache.errors import ConfigError
from unicache.model import (
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.colorgain import COLOR_STEP_ASIDE
from unicache.policy.colors import ColorOptions, ColorState, colors_round
from unicache.policy.locality import detect_weak_locality
from unicache.policy.srm import (
    T_L,
    BufferMiss,
    PageFault,
    SrmParams,
    SrmPolicy,
    SrmState,
    page_colors,
)
from unicache.topology import Topology

from unicache_sim import _native
from unicache_sim.calibration import CYCLES_PER_BYTE
from unicache_sim.config import SimConfig, from_topology

KIB = 1024
MIB = 1024 * KIB
#: §2: mergesort sorts an array of 64-byte records
RECORD_BYTES = 64
#: instructions per record and merge pass (an estimate: two key loads, a compare and a
#: branch, the 64-byte copy as 8 loads and 8 stores, index and bound updates)
SORT_INSTRUCTIONS_PER_RECORD = 32
#: instructions per cycle of the merge loop outside memory stalls (an estimate)
SORT_IPC = 1.0
#: §2: "we vary the array size from 256KiB to 1.5MiB"
SIZES_KB = (256, 512, 768, 1024, 1280, 1536)
#: the three placements of §2 (grep absent, on another L2, on the same L2)
PLACEMENTS = ("alone", "apart", "shared")
#: the VM both processes run in, and their guest pids
VM_NAME = "vm0"
GREP_PID = 100
SORT_PID = 200
#: guest file id of the tarball
TARBALL_ID = 1


@dataclass(frozen=True, slots=True)
class SrmSpec:
    """One SRM experiment.

    :param sizes_kb: mergesort array sizes in KiB (§2: 256 KiB .. 1.5 MiB).
    :param tarball_mb: size of grep's file in MiB (§2: a Linux source tarball; here only
        its size matters: far more than the LLC, read again from the start when done).
    :param read_bytes: bytes per grep ``read`` call.
    :param measure_lines: mergesort line accesses to measure per run (whole sorts, at
        least one), after one warm-up sort.
    :param t_l: §3.2 ``T_l``, pages per color of a sequence.
    :param vm_pages: with coloring, where mergesort's anonymous pages come from: ``srm``
        (the policy's Figure 7 ``vm_color`` round-robin, as a host running SRM does) or
        ``spread`` (the normal allocator, as in §2, where only grep's pages were colored).
    :param sort_cpu: CPU of mergesort; grep runs on its L2 mate (``shared``) or on the
        first CPU of another L2 (``apart``).
    :param seed: seed of the page allocator.
    """

    sizes_kb: tuple[int, ...] = SIZES_KB
    tarball_mb: int = 64
    read_bytes: int = 64 * KIB
    measure_lines: int = 1_500_000
    t_l: int = T_L
    vm_pages: str = "srm"
    sort_cpu: int = 0
    seed: int = 1


@dataclass(frozen=True, slots=True)
class SortRun:
    """mergesort in one placement.

    :param placement: alone, apart or shared.
    :param seconds: simulated seconds per sort.
    :param llc_misses: LLC misses (lines from DRAM or another chip) per sort.
    :param instructions: instructions per sort (the estimate above).
    :param grep_mb_per_s: grep's read throughput meanwhile (0 when alone).
    :param llc_references: mergesort's LLC references per sort.
    :param grep_bytes: bytes grep read per sort (0 when alone).
    :param grep_llc_references: grep's LLC references per sort.
    :param grep_llc_misses: grep's LLC misses per sort.
    """

    placement: str
    seconds: float
    llc_misses: float
    instructions: int
    grep_mb_per_s: float
    llc_references: float = 0.0
    grep_bytes: float = 0.0
    grep_llc_references: float = 0.0
    grep_llc_misses: float = 0.0

    @property
    def misses_per_m_instr(self) -> float:
        """LLC misses per million instructions (Figure 2b's LLCM)."""
        return self.llc_misses * 1e6 / self.instructions


@dataclass(frozen=True, slots=True)
class SrmPoint:
    """One array size with or without coloring.

    :param size_kb: the array size.
    :param coloring: whether SRM colored the pages.
    :param runs: one per placement, in ``PLACEMENTS`` order.
    :param aside: with coloring, why the step-aside left the pages uncolored (the runs
        are then the uncolored ones); empty when SRM colored them.
    """

    size_kb: int
    coloring: bool
    runs: tuple[SortRun, ...]
    aside: str = ""

    def get(self, placement: str) -> SortRun:
        """The run of one placement."""
        return next(r for r in self.runs if r.placement == placement)

    @property
    def slowdown_pct(self) -> float:
        """§2's slowdown ``(T2 - T1) / T1`` in percent (Figure 2a)."""
        t1 = self.get("apart").seconds
        return (self.get("shared").seconds - t1) / t1 * 100.0

    @property
    def vs_alone(self) -> float:
        """Time with grep on the same L2 over time alone."""
        return self.get("shared").seconds / self.get("alone").seconds


class _Sort:
    """A non-recursive 2-way mergesort over two arrays, issued page group by page group."""

    #: bytes read (then written) per pushed step
    STEP = 16 * KIB

    def __init__(self, engine: _native.Engine, size: int, src: int, dst: int) -> None:
        self.engine = engine
        self.size = size
        records = max(2, size // RECORD_BYTES)
        #: ceil(log2(records)) passes; each reads one array and writes the other
        self.passes = math.ceil(math.log2(records))
        self.instructions = records * self.passes * SORT_INSTRUCTIONS_PER_RECORD
        self.compute_per_byte = SORT_INSTRUCTIONS_PER_RECORD / SORT_IPC / RECORD_BYTES
        self.arrays = [src, dst]
        self.pass_no = 0
        self.offset = 0
        self.sorts_done = 0

    def step(self, tid: int) -> bool:
        """Push the next step; returns True when a whole sort has just been issued."""
        length = min(self.STEP, self.size - self.offset)
        src, dst = self.arrays
        self.engine.push_access(tid, src, self.offset, length, "read", self.compute_per_byte)
        self.engine.push_access(tid, dst, self.offset, length, "write", 0.0)
        self.offset += length
        if self.offset < self.size:
            return False
        self.offset = 0
        self.arrays.reverse()
        self.pass_no += 1
        if self.pass_no < self.passes:
            return False
        self.pass_no = 0
        self.sorts_done += 1
        return True


class _Colors:
    """The host's SRM policy: page colors for buffer misses and page faults."""

    def __init__(self, topo: Topology, spec: SrmSpec) -> None:
        self.n_colors = page_colors(topo)
        self.policy = SrmPolicy(SrmParams(self.n_colors, t_l=spec.t_l))
        self.state = SrmState.initial(self.policy.params)
        self.policy.start(self.state)
        #: (vm, file id) of the files the host classified as streaming
        self.weak: frozenset[tuple[str, int]] = frozenset()

    def classify(self, file_id: int, size: int, chunk: int) -> None:
        """Classify the file from the guest report of a streaming pass: every chunk read once.

        :param file_id: the guest's file id.
        :param size: its bytes.
        :param chunk: the report's chunk size.
        """
        chunks = []
        for i in range(math.ceil(size / chunk)):
            nbytes = min(chunk, size - i * chunk)
            chunks.append(ChunkAccess(ChunkId(file_id, i), nbytes, 1, 0, ((1, nbytes),)))
        report = GuestReport(VM_NAME, 1, 1.0, tuple(chunks))
        self.weak = detect_weak_locality([report], chunk).weak

    def buffer_misses(self, file_id: int, pages: int) -> tuple[int, ...]:
        """Colors of a file's pages filled into the page cache in order (grep's first read)."""
        events = [BufferMiss(VM_NAME, GREP_PID, file_id, b, pages) for b in range(pages)]
        decision = self.policy.decide(self.state, events, self.weak)
        self.state = decision.state
        return decision.pages

    def page_faults(self, pages: int) -> tuple[int, ...]:
        """Colors of mergesort's anonymous pages, in fault order (Figure 7 vm_color)."""
        decision = self.policy.decide(self.state, [PageFault(VM_NAME, SORT_PID)] * pages)
        self.state = decision.state
        return decision.pages


def _place(engine: _native.Engine, obj: int, colors: tuple[int, ...], n_colors: int) -> None:
    """Back an object's pages on node 0: color ``colors[i]`` of ``n_colors``, or any frame
    where the color is negative."""
    for page, color in enumerate(colors):
        if color < 0:
            engine.place_page(obj, page, 0)
        else:
            engine.place_page(obj, page, 0, n_colors, color)


def grep_cpu(cfg: SimConfig, sort_cpu: int, placement: str) -> int | None:
    """The CPU grep runs on: none, another L2 group's first CPU, or mergesort's L2 mate.

    :param cfg: the machine.
    :param sort_cpu: mergesort's CPU.
    :param placement: alone, apart or shared.
    :returns: the CPU, or None when alone.
    :raises ConfigError: if the machine has no such CPU.
    """
    if placement == "alone":
        return None
    group = cfg.group_of(sort_cpu)
    same = placement == "shared"
    for cpu in range(cfg.n_cpus):
        if cpu != sort_cpu and (cfg.group_of(cpu) == group) == same:
            return cpu
    where = "sharing" if same else "not sharing"
    raise ConfigError(f"model {cfg.name} has no CPU {where} the LLC of CPU {sort_cpu}")


@dataclass(frozen=True, slots=True)
class Memory:
    """The objects of one run, their pages already backed by frames.

    :param engine: the engine.
    :param tarball: grep's file.
    :param src: mergesort's first array.
    :param dst: mergesort's second array.
    :param n_colors: page colors of the LLC.
    :param tar_colors: the SRM policy's color of every tarball page (empty without
        coloring).
    """

    engine: _native.Engine
    tarball: int
    src: int
    dst: int
    n_colors: int
    tar_colors: tuple[int, ...]


def build_memory(
    topo: Topology, cfg: SimConfig, spec: SrmSpec, size: int, coloring: bool
) -> Memory:
    """A cold engine with grep's file in the page cache and mergesort's arrays faulted in.

    Without coloring every frame comes from the normal (random) allocator; with coloring
    from the colors :class:`~unicache.policy.srm.SrmPolicy` decided for the events of a
    host: ``PageFault`` for mergesort's pages (or the normal allocator with
    ``vm_pages="spread"``) and ``BufferMiss`` for the tarball, classified as streaming.

    :param topo: the machine model.
    :param cfg: its simulator configuration.
    :param spec: the experiment.
    :param size: array bytes.
    :param coloring: whether SRM colors the pages.
    :returns: the engine and its objects.
    """
    engine = cfg.engine(seed=spec.seed)
    page = cfg.page_size
    tar_bytes = spec.tarball_mb * MIB
    tar = engine.add_object(tar_bytes, "node", 0)
    src = engine.add_object(size, "node", 0)
    dst = engine.add_object(size, "node", 0)
    sort_pages = 2 * math.ceil(size / page)
    colors = _Colors(topo, spec) if coloring else None
    if colors is not None and spec.vm_pages == "srm":
        # mergesort fills its array, then its first pass writes the other one
        faults = colors.page_faults(sort_pages)
    else:
        # the normal allocator; drawn first in every run, so runs without SRM's page-fault
        # colors get the same frames for mergesort
        faults = (-1,) * sort_pages
    half = sort_pages // 2
    _place(engine, src, faults[:half], colors.n_colors if colors else 0)
    _place(engine, dst, faults[half:], colors.n_colors if colors else 0)
    # the page cache is warmed before the run (§2): grep's first pass fills it
    tar_colors: tuple[int, ...] = ()
    if colors is not None:
        colors.classify(TARBALL_ID, tar_bytes, spec.read_bytes)
        tar_colors = colors.buffer_misses(TARBALL_ID, tar_bytes // page)
        _place(engine, tar, tar_colors, colors.n_colors)
    else:
        _place(engine, tar, (-1,) * (tar_bytes // page), 0)
    return Memory(engine, tar, src, dst, page_colors(topo), tar_colors)


def run_sort(
    topo: Topology, cfg: SimConfig, spec: SrmSpec, size: int, coloring: bool, placement: str
) -> SortRun:
    """Simulate mergesort of one array size in one placement.

    :param topo: the machine model.
    :param cfg: its simulator configuration.
    :param spec: the experiment.
    :param size: array bytes.
    :param coloring: whether SRM colors the pages.
    :param placement: alone, apart or shared.
    :returns: time and LLC misses per sort.
    """
    gcpu = grep_cpu(cfg, spec.sort_cpu, placement)
    mem = build_memory(topo, cfg, spec, size, coloring)
    engine, tar, src, dst = mem.engine, mem.tarball, mem.src, mem.dst
    tar_bytes = spec.tarball_mb * MIB
    sort = _Sort(engine, size, src, dst)
    lines_per_sort = 2 * size / cfg.line_size * sort.passes  # read one array, write the other
    measure_sorts = max(1, math.ceil(spec.measure_lines / lines_per_sort))
    sort_tid = engine.add_thread(spec.sort_cpu)
    grep_tid = engine.add_thread(gcpu) if gcpu is not None else -1
    grep_offset = 0
    compute = CYCLES_PER_BYTE["grep"]
    t0 = -1.0
    t1 = 0.0
    while True:
        stop, tid = engine.run()
        if stop != "need":
            raise ConfigError(f"simulation stopped early ({stop})")
        if tid == grep_tid:
            length = min(spec.read_bytes, tar_bytes - grep_offset)
            engine.push_access(tid, tar, grep_offset, length, "read", compute)
            grep_offset = (grep_offset + length) % tar_bytes
            continue
        if sort.sorts_done == 1 and t0 < 0:
            # one warm-up sort: arrays in the LLC, grep streaming
            engine.reset_stats()
            t0 = engine.thread_time(tid)
        if sort.sorts_done == 1 + measure_sorts:
            t1 = engine.thread_time(tid)
            break
        sort.step(tid)
    st = engine.thread_stats(sort_tid)
    seconds = (t1 - t0) / (cfg.clock_ghz * 1e9)
    grep_mbps = grep_bytes = grep_refs = grep_misses = 0.0
    if grep_tid >= 0 and seconds > 0:
        gst = engine.thread_stats(grep_tid)
        grep_mbps = gst.bytes / seconds / 1e6
        grep_bytes, grep_refs = gst.bytes / measure_sorts, gst.llc_lines / measure_sorts
        grep_misses = (gst.dram_lines + gst.c2c_lines) / measure_sorts
    return SortRun(
        placement,
        seconds / measure_sorts,
        (st.dram_lines + st.c2c_lines) / measure_sorts,
        sort.instructions,
        grep_mbps,
        st.llc_lines / measure_sorts,
        grep_bytes,
        grep_refs,
        grep_misses,
    )


def step_aside(topo: Topology, cfg: SimConfig, spec: SrmSpec, shared: SortRun) -> str:
    """What the product's SRM round decides from one uncolored ``shared`` run (one sort).

    The VM runs mergesort on vCPU 0 and grep on vCPU 1; its colored node holds one of the
    LLC's page colors, as much of the LLC as Figure 7 gives a stream at a time (one color
    per run of ``T_l`` pages). The round sees grep's guest report (every chunk it read,
    once) and both vCPUs' LLC counters, as a host with hardware counters does.

    :returns: the refusal's reason, or ``""`` when SRM colors.
    """
    n_colors = page_colors(topo)
    vcpus = tuple(Vcpu(VcpuId(VM_NAME, i), None, frozenset({i})) for i in range(2))
    vm = Vm(
        VM_NAME,
        vcpus,
        2 * spec.tarball_mb * MIB,
        (
            GuestNode(0, frozenset({0, 1}), spec.tarball_mb * MIB),
            GuestNode(1, frozenset(), spec.tarball_mb * MIB, frozenset({0})),
        ),
    )
    chunk = spec.read_bytes
    left = int(shared.grep_bytes)
    chunks: list[ChunkAccess] = []
    while left > 0:
        nbytes = min(chunk, left)
        index = len(chunks)
        chunks.append(ChunkAccess(ChunkId(TARBALL_ID, index), nbytes, 1, 0, ((1, nbytes),)))
        left -= nbytes
    report = GuestReport(VM_NAME, 0, 1.0, tuple(chunks))
    samples = (
        CounterSample(
            vcpus[0].id,
            CounterSource.SIMULATED,
            instructions=shared.instructions,
            llc_references=round(shared.llc_references),
            llc_misses=round(shared.llc_misses),
        ),
        CounterSample(
            vcpus[1].id,
            CounterSource.SIMULATED,
            llc_references=round(shared.grep_llc_references),
            llc_misses=round(shared.grep_llc_misses),
        ),
    )
    options = ColorOptions(
        chunk_size=chunk, page_size=topo.page_size, host_colors=n_colors, line_size=cfg.line_size
    )
    decision = colors_round([vm], [report], ColorState(), options, samples)
    aside = [r.reason for r in decision.refusals if r.kind == COLOR_STEP_ASIDE]
    return aside[0] if aside else ""


def run_srm(
    topo: Topology, spec: SrmSpec, progress: Callable[[str], None] | None = None
) -> list[tuple[SrmPoint, SrmPoint]]:
    """Run every array size without and with coloring, in every placement.

    :param topo: the machine model.
    :param spec: the experiment.
    :param progress: called after each simulated run with a label.
    :returns: (without coloring, with coloring) per size, in the given order.
    :raises ConfigError: if the model has no pair of CPUs sharing an LLC.
    """
    cfg = from_topology(topo)
    for placement in PLACEMENTS:
        grep_cpu(cfg, spec.sort_cpu, placement)
    out = []
    for size_kb in spec.sizes_kb:
        pair: list[SrmPoint] = []
        for coloring in (False, True):
            aside = step_aside(topo, cfg, spec, pair[0].get("shared")) if coloring else ""
            runs = []
            for placement in PLACEMENTS:
                if aside:  # the host colors nothing: exactly the uncolored run
                    runs.append(pair[0].get(placement))
                else:
                    runs.append(run_sort(topo, cfg, spec, size_kb * KIB, coloring, placement))
                if progress is not None:
                    label = "colored" if coloring else "spread"
                    progress(f"{size_kb} KiB {label} {placement}")
            pair.append(SrmPoint(size_kb, coloring, tuple(runs), aside))
        out.append((pair[0], pair[1]))
    return out
