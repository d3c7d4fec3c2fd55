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
* ``coloring`` on: first the product's step-aside (:mod:`unicache.policy.srm.gain`, run
  through :func:`unicache.policy.srm.colors.colors_round`) judges the uncolored ``shared`` run
  from the counters a host would read (mergesort's and grep's LLC references and misses,
  grep's bytes from the guest report of its stream); where it predicts no gain the host
  colors nothing and the SRM point is the uncolored one. Otherwise the host runs
  :class:`unicache.policy.srm.buffer.SrmPolicy`, fed the events a host sees: the tarball's
  page-cache fills are ``BufferMiss`` events (the file is classified as streaming by
  :func:`unicache.policy.srm.locality.detect_weak_locality` from the guest report of grep's
  reads), mergesort's anonymous pages are ``PageFault`` events;
  every page gets a frame of the color the policy decided (``Engine.place_page``).

Pages are physical frames of the simulator's allocator; a frame's color is
``frame % page_colors(topology)`` (64 on the xeon-x5355: 4 MiB / 16 ways / 4 KiB).
"""

from __future__ import annotations

import math
import random
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
from unicache.policy.srm.buffer import page_colors
from unicache.policy.srm.colors import ColorOptions, ColorState, colors_round
from unicache.policy.srm.gain import COLOR_STEP_ASIDE
from unicache.topology import Topology

from unicache_sim import _native
from unicache_sim.engine.calibration import CYCLES_PER_BYTE
from unicache_sim.engine.config import SimConfig, from_topology
from unicache_sim.experiments.srm.memory import (
    KIB,
    TARBALL_ID,
    VM_NAME,
    SrmSpec,
    build_memory,
)

#: §2: mergesort sorts an array of 64-byte records
RECORD_BYTES = 64
#: instructions per record and merge pass (an estimate: two key loads, a compare and a
#: branch, the 64-byte copy as 8 loads and 8 stores, index and bound updates)
SORT_INSTRUCTIONS_PER_RECORD = 32
#: instructions per cycle of the merge loop outside memory stalls (an estimate)
SORT_IPC = 1.0
#: §4.5's random reader: "Each time it reads 4096 bytes"
RANDOM_READ_BYTES = 4 * KIB
#: the three placements of §2 (grep absent, on another L2, on the same L2)
PLACEMENTS = ("alone", "apart", "shared")


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


def reader_cpus(cfg: SimConfig, sort_cpu: int, placement: str, count: int = 1) -> list[int]:
    """The CPUs the readers run on: none, cores of another LLC group, or cores of
    mergesort's own LLC group (never a core mergesort or another reader runs on).

    :param cfg: the machine.
    :param sort_cpu: mergesort's CPU.
    :param placement: alone, apart or shared.
    :param count: readers.
    :returns: the CPUs, lowest first (empty when alone).
    :raises ConfigError: if the machine has too few such cores.
    """
    if placement == "alone":
        return []
    core = cfg.levels[0].instance_of  # a CPU's first-level cache: its core
    group = cfg.group_of(sort_cpu)
    same = placement == "shared"
    taken = {core[sort_cpu]}
    out: list[int] = []
    for cpu in range(cfg.n_cpus):
        if len(out) < count and core[cpu] not in taken and (cfg.group_of(cpu) == group) == same:
            out.append(cpu)
            taken.add(core[cpu])
    if len(out) < count:
        where = "sharing" if same else "not sharing"
        what = "no CPU" if count == 1 else f"fewer than {count} other cores"
        raise ConfigError(f"model {cfg.name} has {what} {where} the LLC of CPU {sort_cpu}")
    return out


def grep_cpu(cfg: SimConfig, sort_cpu: int, placement: str) -> int | None:
    """The CPU one grep runs on (:func:`reader_cpus`), or None when alone."""
    cpus = reader_cpus(cfg, sort_cpu, placement)
    return cpus[0] if cpus else None


class _Reader:
    """A file-intensive co-runner: grep's stream (§2) or §4.5's random 4 KiB reads."""

    def __init__(self, spec: SrmSpec, index: int, file_bytes: int) -> None:
        self.spec = spec
        self.size = file_bytes
        # each reader starts at its own place in the file
        self.offset = (index * file_bytes // max(1, spec.readers)) // KIB * KIB
        self.rng = random.Random(spec.seed * 7919 + index)

    def step(self, engine: _native.Engine, tid: int, obj: int) -> None:
        if self.spec.reader == "random":
            page = self.rng.randrange(self.size // RANDOM_READ_BYTES)
            engine.push_access(tid, obj, page * RANDOM_READ_BYTES, RANDOM_READ_BYTES, "read", 0.0)
            return
        length = min(self.spec.read_bytes, self.size - self.offset)
        engine.push_access(tid, obj, self.offset, length, "read", CYCLES_PER_BYTE["grep"])
        self.offset = (self.offset + length) % self.size


def run_sort(
    topo: Topology, cfg: SimConfig, spec: SrmSpec, size: int, coloring: bool, placement: str
) -> SortRun:
    """Simulate mergesort of one array size in one placement, next to ``spec.readers``
    readers of the file (``spec.reader``).

    :param topo: the machine model.
    :param cfg: its simulator configuration.
    :param spec: the experiment.
    :param size: array bytes.
    :param coloring: whether SRM colors the pages.
    :param placement: alone, apart or shared.
    :returns: time and LLC misses per sort (the readers' figures summed).
    """
    cpus = reader_cpus(cfg, spec.sort_cpu, placement, spec.readers)
    mem = build_memory(topo, cfg, spec, size, coloring)
    engine, tar, src, dst = mem.engine, mem.tarball, mem.src, mem.dst
    sort = _Sort(engine, size, src, dst)
    lines_per_sort = 2 * size / cfg.line_size * sort.passes  # read one array, write the other
    measure_sorts = max(1, math.ceil(spec.measure_lines / lines_per_sort))
    sort_tid = engine.add_thread(spec.sort_cpu)
    readers = {engine.add_thread(c): _Reader(spec, i, spec.file_bytes)
               for i, c in enumerate(cpus)}
    t0 = -1.0
    t1 = 0.0
    while True:
        stop, tid = engine.run()
        if stop != "need":
            raise ConfigError(f"simulation stopped early ({stop})")
        if tid in readers:
            readers[tid].step(engine, tid, tar)
            continue
        if sort.sorts_done == 1 and t0 < 0:
            # one warm-up sort: arrays in the LLC, the readers reading
            engine.reset_stats()
            t0 = engine.thread_time(tid)
        if sort.sorts_done == 1 + measure_sorts:
            t1 = engine.thread_time(tid)
            break
        sort.step(tid)
    st = engine.thread_stats(sort_tid)
    seconds = (t1 - t0) / (cfg.clock_ghz * 1e9)
    grep_mbps = grep_bytes = grep_refs = grep_misses = 0.0
    if readers and seconds > 0:
        stats = [engine.thread_stats(t) for t in readers]
        nbytes = sum(g.bytes for g in stats)
        grep_mbps = nbytes / seconds / 1e6
        grep_bytes = nbytes / measure_sorts
        grep_refs = sum(g.llc_lines for g in stats) / measure_sorts
        grep_misses = sum(g.dram_lines + g.c2c_lines for g in stats) / measure_sorts
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
        2 * spec.file_bytes,
        (
            GuestNode(0, frozenset({0, 1}), spec.file_bytes),
            GuestNode(1, frozenset(), spec.file_bytes, frozenset({0})),
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
        reader_cpus(cfg, spec.sort_cpu, placement, spec.readers)
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
