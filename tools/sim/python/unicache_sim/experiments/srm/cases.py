"""The SRM paper's §4 experiments beyond §2's figure, on the simulated host, each over
several seeds (the page allocator's frames).

* ``sweep-tl`` (Figure 16): mergesort (1.5 MiB, §4.3's array) next to grep on its LLC,
  the product's SRM with ``T_l`` from 16 to 512 pages; mergesort's execution time
  reduction over no coloring (the paper, FFT/MM/LU with grep or tar: 14 % at 16, 24 % at
  128, 1.7 points more at 512).
* ``random`` (§4.5, first scenario): the same mergesort next to a reader of 4 KiB at
  random offsets of a 512 MiB file, warmed by a sequential scan (so its pages got their
  colors as a stream); the change of mergesort's time with coloring ("does not change").
* ``rescan`` (§4.5, second scenario): one process scanning a 3.4 MiB file again and
  again, alone on the xeon-x5355; time per scan without SRM, with the product's SRM
  (its locality filter classifies the file from the guest report of the re-scans) and
  with the paper's SRM-buffer, which confines every file larger than ``T_l`` (a what-if:
  the paper measured 12 % slower on the PowerEdge 1900).
* ``corunners`` (Figure 13): mergesort next to 1, 2 and 3 greps on the four cores of a
  ``core-i7-860`` (8 MiB L3), array 3 MiB (the working set 3/4 of the LLC, as 1.5 MiB on
  the xeon's 4 MiB); its slowdown over running alone, without and with SRM (the paper,
  MM: 32 % to 84 % without, below 26 % with).

Coloring is the product's path of :func:`.colors.run_srm`: the step-aside judges the
uncolored shared run, then :class:`unicache.policy.srm.buffer.SrmPolicy` colors the pages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from unicache.errors import ConfigError
from unicache.topology import Topology

from unicache_sim.engine.calibration import CYCLES_PER_BYTE
from unicache_sim.engine.config import SimConfig, from_topology
from unicache_sim.experiments.findings import Finding, merge_seed_findings
from unicache_sim.experiments.srm.colors import SortRun, run_sort, step_aside
from unicache_sim.experiments.srm.memory import KIB, SrmSpec, build_memory

CASES = ("sweep-tl", "random", "rescan", "corunners")
#: Figure 16's thresholds
T_LS = (16, 32, 64, 128, 256, 512)
#: §4.3: "mergesort ... The array size is 1.5MiB"
SORT_KB = 1536
#: §4.5: the re-scanned file on the PowerEdge 1900
RESCAN_MB = 3.4
#: §4.5: "reads the blocks in a 512MiB file with a random access pattern"
RANDOM_FILE_MB = 512

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A case's findings and the curves its plot draws.

    :param name: the case.
    :param findings: what it found.
    :param curves: label -> (x, one value per seed) points.
    """

    name: str
    findings: tuple[Finding, ...]
    curves: Mapping[str, tuple[tuple[float, tuple[float, ...]], ...]]


def _colored(
    topo: Topology, cfg: SimConfig, spec: SrmSpec, size: int, base: SortRun
) -> tuple[SortRun, bool]:
    """The shared run as the product colors it: (run, whether it colored)."""
    if step_aside(topo, cfg, spec, base):
        return base, False
    return run_sort(topo, cfg, spec, size, True, "shared"), True


def _reduction(base: SortRun, run: SortRun) -> float:
    return 100.0 * (base.seconds - run.seconds) / base.seconds


def sweep_tl(topo: Topology, seeds: Sequence[int], progress: Progress | None = None) -> CaseResult:
    """Figure 16: mergesort's time reduction by SRM against ``T_l``."""
    cfg = from_topology(topo)
    size = SORT_KB * KIB
    per_tl: dict[int, list[float]] = {t: [] for t in T_LS}
    for seed in seeds:
        spec = SrmSpec(tarball_mb=32, measure_lines=800_000, seed=seed)
        base = run_sort(topo, cfg, spec, size, False, "shared")
        for t_l in T_LS:
            run, _ = _colored(topo, cfg, replace(spec, t_l=t_l), size, base)
            per_tl[t_l].append(_reduction(base, run))
            if progress is not None:
                progress(f"T_l {t_l} seed {seed}")
    paper = {16: "14 % (mean of FFT, MM, LU)", 128: "24 %", 512: "24 % + 1.7"}
    fig = "SRM Figure 16 (T_l sweep)"
    findings = tuple(
        Finding("sweep-tl", fig, f"mergesort time reduction by SRM, T_l {t} (%)",
                paper.get(t, "-"), tuple(per_tl[t]))
        for t in T_LS
    )
    curves = {"time reduction (%)": tuple((float(t), tuple(per_tl[t])) for t in T_LS)}
    return CaseResult("sweep-tl", findings, curves)


def random_read(
    topo: Topology, seeds: Sequence[int], progress: Progress | None = None
) -> CaseResult:
    """§4.5: mergesort next to random 4 KiB reads of a large file; coloring must not hurt."""
    cfg = from_topology(topo)
    size = SORT_KB * KIB
    change, file_only, reader_change, colored = [], [], [], []
    for seed in seeds:
        spec = SrmSpec(tarball_mb=RANDOM_FILE_MB, measure_lines=800_000, reader="random",
                       seed=seed)
        base = run_sort(topo, cfg, spec, size, False, "shared")
        run, did = _colored(topo, cfg, spec, size, base)
        change.append(100.0 * (run.seconds - base.seconds) / base.seconds)
        # the file's colors alone: mergesort's pages from the normal allocator, as uncolored
        spread = replace(spec, vm_pages="spread")
        files = run_sort(topo, cfg, spread, size, True, "shared") if did else base
        file_only.append(100.0 * (files.seconds - base.seconds) / base.seconds)
        reader_change.append(100.0 * (run.grep_mb_per_s - base.grep_mb_per_s)
                             / base.grep_mb_per_s)
        colored.append(1.0 if did else 0.0)
        if progress is not None:
            progress(f"random seed {seed}")
    fig = "SRM §4.5 random reads"
    findings = (
        Finding("random", fig, "mergesort time change with SRM (%)", "0 (does not change)",
                tuple(change)),
        Finding("random", fig, "mergesort time change, the file's colors alone (%)", "-",
                tuple(file_only)),
        Finding("random", fig, "random reader's throughput change with SRM (%)", "-",
                tuple(reader_change)),
        Finding("random", fig, "seeds where the product colored the file (1 = yes)", "-",
                tuple(colored)),
    )
    curves = {"mergesort time change (%)": tuple((float(s), (c,))
                                                 for s, c in zip(seeds, change, strict=True))}
    return CaseResult("random", findings, curves)


def scan_seconds(topo: Topology, spec: SrmSpec, coloring: bool, scans: int = 8) -> float:
    """Seconds per scan of a process re-reading ``spec``'s file alone on CPU 0 (after
    two warm-up scans), its pages colored as the SRM policy decides (``coloring``).

    :raises ConfigError: if the simulation stops early.
    """
    cfg = from_topology(topo)
    mem = build_memory(topo, cfg, spec, 4 * KIB, coloring)
    engine = mem.engine
    tid = engine.add_thread(0)
    size = spec.file_bytes
    offset = 0
    passes = 0
    t0 = 0.0
    while passes < 2 + scans:
        stop, got = engine.run()
        if stop != "need" or got != tid:
            raise ConfigError(f"simulation stopped early ({stop})")
        if offset == 0 and passes == 2:
            t0 = engine.thread_time(tid)
        length = min(spec.read_bytes, size - offset)
        engine.push_access(tid, mem.tarball, offset, length, "read", CYCLES_PER_BYTE["grep"])
        offset += length
        if offset >= size:
            offset = 0
            passes += 1
    engine.run()
    return (engine.thread_time(tid) - t0) / (cfg.clock_ghz * 1e9) / scans


def rescan(topo: Topology, seeds: Sequence[int], progress: Progress | None = None) -> CaseResult:
    """§4.5: a small file scanned again and again; the product must not confine it."""
    product, paper_srm = [], []
    for seed in seeds:
        # one interval of re-scans: the file read many times (at ~1 GB/s, hundreds)
        # (the scanner is the only process: vm_pages spread keeps the other frames equal)
        spec = SrmSpec(tarball_mb=RESCAN_MB, seed=seed, vm_pages="spread",
                       scan_passes=math.ceil(1e9 / (RESCAN_MB * 1024 * KIB)))
        spread = scan_seconds(topo, spec, False)
        ours = scan_seconds(topo, spec, True)
        theirs = scan_seconds(topo, replace(spec, color_only_weak=False), True)
        product.append(100.0 * (ours - spread) / spread)
        paper_srm.append(100.0 * (theirs - spread) / spread)
        if progress is not None:
            progress(f"rescan seed {seed}")
    fig = "SRM §4.5 re-scan"
    findings = (
        Finding("rescan", fig, "re-scan slowdown, product's SRM (%)", "-", tuple(product)),
        Finding("rescan", fig, "re-scan slowdown, the paper's SRM-buffer (what-if) (%)",
                "12 (PowerEdge 1900)", tuple(paper_srm)),
    )
    curves = {
        "product's SRM": tuple((float(s), (v,)) for s, v in zip(seeds, product, strict=True)),
        "paper's SRM-buffer": tuple((float(s), (v,))
                                    for s, v in zip(seeds, paper_srm, strict=True)),
    }
    return CaseResult("rescan", findings, curves)


def corunners(
    topo: Topology, seeds: Sequence[int], progress: Progress | None = None
) -> CaseResult:
    """Figure 13: mergesort next to 1-3 greps on one LLC, without and with SRM."""
    cfg = from_topology(topo)
    llc = cfg.levels[-1]
    size = llc.sets * llc.ways * cfg.line_size * 3 // 8 // (4 * KIB) * (4 * KIB)
    off: dict[int, list[float]] = {n: [] for n in (1, 2, 3)}
    on: dict[int, list[float]] = {n: [] for n in (1, 2, 3)}
    for seed in seeds:
        spec = SrmSpec(tarball_mb=32, measure_lines=800_000, seed=seed)
        alone = run_sort(topo, cfg, spec, size, False, "alone")
        # alone under SRM: its pages as SRM's vm_color lays them (a solo run on the kernel
        # with SRM, as the paper's solo-runs), measured once the product colors
        alone_srm: SortRun | None = None
        for n in (1, 2, 3):
            many = replace(spec, readers=n)
            base = run_sort(topo, cfg, many, size, False, "shared")
            run, did = _colored(topo, cfg, many, size, base)
            solo = alone
            if did:
                alone_srm = alone_srm or run_sort(topo, cfg, spec, size, True, "alone")
                solo = alone_srm
            off[n].append(100.0 * (base.seconds - alone.seconds) / alone.seconds)
            on[n].append(100.0 * (run.seconds - solo.seconds) / solo.seconds)
            if progress is not None:
                progress(f"{n} grep seed {seed}")
    fig = "SRM Figure 13 (1-3 greps)"
    paper_off = {1: "32 (MM), 24 (LU)", 2: "-", 3: "84 (MM), 88 (LU)"}
    findings = tuple(
        f
        for n in (1, 2, 3)
        for f in (
            Finding("corunners", fig, f"mergesort slowdown with {n} grep, no SRM (%)",
                    paper_off[n], tuple(off[n])),
            Finding("corunners", fig, f"mergesort slowdown with {n} grep, SRM (%)",
                    "< 26 (MM, LU)", tuple(on[n])),
        )
    )
    curves = {
        "no coloring": tuple((float(n), tuple(off[n])) for n in (1, 2, 3)),
        "SRM": tuple((float(n), tuple(on[n])) for n in (1, 2, 3)),
    }
    return CaseResult("corunners", findings, curves)


def merge_seeds(parts: Sequence[CaseResult]) -> CaseResult:
    """One case's results of single seeds as one result over all of them, in order.

    :raises ValueError: on no part, or parts of different cases.
    """
    if not parts or len({p.name for p in parts}) != 1:
        raise ValueError("merge_seeds needs parts of one case")
    findings = merge_seed_findings([p.findings for p in parts])
    curves: dict[str, tuple[tuple[float, tuple[float, ...]], ...]] = {}
    for label, points in parts[0].curves.items():
        if parts[0].name in ("random", "rescan"):  # one point per seed
            curves[label] = tuple(pt for p in parts for pt in p.curves[label])
        else:
            curves[label] = tuple(
                (x, tuple(v for p in parts for v in p.curves[label][i][1]))
                for i, (x, _) in enumerate(points)
            )
    return CaseResult(parts[0].name, findings, curves)


#: the machine each case runs on by default (the paper's)
DEFAULT_MODEL = {
    "sweep-tl": "xeon-x5355",
    "random": "xeon-x5355",
    "rescan": "xeon-x5355",
    "corunners": "core-i7-860",
}


def run_case(
    name: str, topo: Topology, seeds: Sequence[int], progress: Progress | None = None
) -> CaseResult:
    """Run one case by name (:data:`CASES`)."""
    runners = {"sweep-tl": sweep_tl, "random": random_read, "rescan": rescan,
               "corunners": corunners}
    return runners[name](topo, seeds, progress)


def steps_per_seed(name: str) -> int:
    """Progress steps one seed of a case makes."""
    return {"sweep-tl": len(T_LS), "random": 1, "rescan": 1, "corunners": 3}[name]

