"""The memory of the SRM experiments: grep's file in the page cache and mergesort's arrays,
their frames of the colors the product's SRM policy decides (or of the normal allocator).

Split from :mod:`.colors` (the runs) so the §2 experiment and the §4 cases
(:mod:`.cases`) build their memory one way. A frame's color is
``frame % page_colors(topology)`` (64 on the xeon-x5355: 4 MiB / 16 ways / 4 KiB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from unicache.model import ChunkAccess, ChunkId, GuestReport
from unicache.policy.srm.buffer import (
    T_L,
    BufferMiss,
    PageFault,
    SrmParams,
    SrmPolicy,
    SrmState,
    page_colors,
)
from unicache.policy.srm.locality import detect_weak_locality
from unicache.topology import Topology

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig

KIB = 1024
MIB = 1024 * KIB
#: §2: "we vary the array size from 256KiB to 1.5MiB"
SIZES_KB = (256, 512, 768, 1024, 1280, 1536)
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
    :param reader: what the file-intensive co-runner does: ``grep`` (§2: streams the
        tarball ``read_bytes`` at a time) or ``random`` (§4.5: 4 KiB reads at random
        offsets, no think time, after a sequential scan warmed the page cache).
    :param readers: how many of them run, each on its own core of mergesort's LLC
        (``shared``) or of another LLC (``apart``); each starts at its own offset.
    :param color_only_weak: the product's filter (:mod:`unicache.policy.srm.locality`):
        confine only files classified as streaming; ``False`` is the paper's SRM-buffer,
        which confines every file larger than ``T_l`` (a what-if, not the product).
    :param scan_passes: how often the reader read each chunk of the file in the interval
        the host classified it from (1: a stream; §4.5's re-scan reads a small file again
        and again).
    """

    sizes_kb: tuple[int, ...] = SIZES_KB
    tarball_mb: float = 64
    read_bytes: int = 64 * KIB
    measure_lines: int = 1_500_000
    t_l: int = T_L
    vm_pages: str = "srm"
    sort_cpu: int = 0
    seed: int = 1
    reader: str = "grep"
    readers: int = 1
    color_only_weak: bool = True
    scan_passes: int = 1

    @property
    def file_bytes(self) -> int:
        """The file's size, whole pages of 4 KiB."""
        return int(self.tarball_mb * MIB) // (4 * KIB) * (4 * KIB)


class HostColors:
    """The host's SRM policy: page colors for buffer misses and page faults."""

    def __init__(self, topo: Topology, spec: SrmSpec) -> None:
        self.n_colors = page_colors(topo)
        self.policy = SrmPolicy(
            SrmParams(self.n_colors, t_l=spec.t_l, color_only_weak=spec.color_only_weak)
        )
        self.state = SrmState.initial(self.policy.params)
        self.policy.start(self.state)
        #: (vm, file id) of the files the host classified as streaming
        self.weak: frozenset[tuple[str, int]] = frozenset()

    def classify(self, file_id: int, size: int, chunk: int, passes: int = 1) -> None:
        """Classify the file from the guest report of ``passes`` passes over it in one
        interval (1: a stream reads every chunk once).

        :param file_id: the guest's file id.
        :param size: its bytes.
        :param chunk: the report's chunk size.
        :param passes: reads of every chunk in the interval.
        """
        chunks = []
        for i in range(math.ceil(size / chunk)):
            nbytes = min(chunk, size - i * chunk) * passes
            chunks.append(ChunkAccess(ChunkId(file_id, i), nbytes, passes, 0, ((1, nbytes),)))
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


def place_pages(engine: _native.Engine, obj: int, colors: tuple[int, ...], n_colors: int) -> None:
    """Back an object's pages on node 0: color ``colors[i]`` of ``n_colors``, or any frame
    where the color is negative."""
    for page, color in enumerate(colors):
        if color < 0:
            engine.place_page(obj, page, 0)
        else:
            engine.place_page(obj, page, 0, n_colors, color)


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


def _every_file(spec: SrmSpec) -> frozenset[tuple[str, int]]:
    """The files confined whatever their locality: the paper's SRM-buffer confines every
    file larger than ``T_l`` (``color_only_weak=False``), the product none."""
    return frozenset() if spec.color_only_weak else frozenset({(VM_NAME, TARBALL_ID)})


def build_memory(
    topo: Topology, cfg: SimConfig, spec: SrmSpec, size: int, coloring: bool
) -> Memory:
    """A cold engine with grep's file in the page cache and mergesort's arrays faulted in.

    Without coloring every frame comes from the normal (random) allocator; with coloring
    from the colors :class:`~unicache.policy.srm.buffer.SrmPolicy` decided for the events of a
    host: ``PageFault`` for mergesort's pages (or the normal allocator with
    ``vm_pages="spread"``) and ``BufferMiss`` for the tarball when the product's filter
    classifies it as streaming from the guest report of ``scan_passes`` passes (or always,
    ``color_only_weak=False``: the paper's SRM-buffer); a re-read file keeps the normal
    allocator's frames, as the per-VM adapter leaves it in the VM's normal memory.

    :param topo: the machine model.
    :param cfg: its simulator configuration.
    :param spec: the experiment.
    :param size: array bytes.
    :param coloring: whether SRM colors the pages.
    :returns: the engine and its objects.
    """
    engine = cfg.engine(seed=spec.seed)
    page = cfg.page_size
    tar_bytes = spec.file_bytes
    tar = engine.add_object(tar_bytes, "node", 0)
    src = engine.add_object(size, "node", 0)
    dst = engine.add_object(size, "node", 0)
    sort_pages = 2 * math.ceil(size / page)
    colors = HostColors(topo, spec) if coloring else None
    if colors is not None and spec.vm_pages == "srm":
        # mergesort fills its array, then its first pass writes the other one
        faults = colors.page_faults(sort_pages)
    else:
        # the normal allocator; drawn first in every run, so runs without SRM's page-fault
        # colors get the same frames for mergesort
        faults = (-1,) * sort_pages
    half = sort_pages // 2
    place_pages(engine, src, faults[:half], colors.n_colors if colors else 0)
    place_pages(engine, dst, faults[half:], colors.n_colors if colors else 0)
    # the page cache is warmed before the run (§2): grep's first pass fills it
    tar_colors: tuple[int, ...] = ()
    if colors is not None:
        colors.classify(TARBALL_ID, tar_bytes, spec.read_bytes, spec.scan_passes)
    if colors is not None and (VM_NAME, TARBALL_ID) in colors.weak | _every_file(spec):
        tar_colors = colors.buffer_misses(TARBALL_ID, tar_bytes // page)
        place_pages(engine, tar, tar_colors, colors.n_colors)
    else:
        # no coloring, or a file the product's filter finds re-read: the per-VM adapter
        # (policy/srm/colors.py) colors only streams, so its pages stay in the VM's normal
        # memory, the normal allocator's frames
        place_pages(engine, tar, (-1,) * (tar_bytes // page), 0)
    return Memory(engine, tar, src, dst, page_colors(topo), tar_colors)
