"""Speed benchmark of the native core, side by side with pycachesim on the same trace.

Two measurements on one read-microbenchmark line trace (256 KiB files, uniform choice):

* ``multicore``: the full 3-level 16-core model (e.g. ``opteron-16``), each file read on a
  random CPU — private L1/L2, shared L3 per chip, exclusive levels, the cross-chip
  directory;
* ``single_core``: one core's L1/L2/L3 geometry of the same model as a non-inclusive LRU
  hierarchy, run by this simulator and by pycachesim (its C backend, fed the whole
  address list in one call), so the ratio compares like with like.

Only the simulation loops are timed (trace generation and list building are not), in
CPU time of the calling thread (``time.thread_time``): the project machine has two cores
shared with other jobs, and wall time would count the time this process waited. Each of
the three runs is repeated on a fresh (cold) simulator, interleaved, and the median rate
is reported, with the smallest and largest of the multicore runs.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from unicache.topology.toml import load_model

from unicache_sim import _native
from unicache_sim.config import from_topology, single_core

FILE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One benchmark run.

    :param model: machine model.
    :param accesses: line accesses in the trace.
    :param multicore_rate: accesses per second, full multicore model.
    :param single_core_rate: accesses per second, one-core hierarchy, this simulator.
    :param pycachesim_rate: accesses per second, the same hierarchy in pycachesim (None if
        pycachesim is not installed).
    :param counts_equal: whether both simulators counted the same hits per level.
    :param repeats: runs of each measurement; the rates are their medians.
    :param multicore_min: slowest multicore run, accesses per second.
    :param multicore_max: fastest multicore run, accesses per second.
    """

    model: str
    accesses: int
    multicore_rate: float
    single_core_rate: float
    pycachesim_rate: float | None
    counts_equal: bool | None
    repeats: int = 1
    multicore_min: float = 0.0
    multicore_max: float = 0.0

    @property
    def ratio(self) -> float | None:
        """How many times faster than pycachesim on the same single-core trace."""
        if self.pycachesim_rate is None:
            return None
        return self.single_core_rate / self.pycachesim_rate


def _timed(run: Callable[[Any], object], arg: Any) -> float:
    """CPU seconds of the calling thread spent in ``run(arg)``."""
    t0 = time.thread_time()
    run(arg)
    return time.thread_time() - t0


def run_bench(
    model: str = "opteron-16", accesses: int = 8_000_000, ws_mb: int = 8, repeats: int = 3
) -> BenchResult:
    """Run the benchmark.

    :param model: machine model name.
    :param accesses: approximate number of line accesses.
    :param ws_mb: working set of the read microbenchmark trace, MiB.
    :param repeats: runs of each measurement (median reported).
    :returns: the figures.
    """
    cfg = from_topology(load_model(model))
    file_lines = FILE_BYTES // cfg.line_size
    reads = max(1, accesses // file_lines)
    n_files = max(1, ws_mb * 1024 * 1024 // FILE_BYTES)
    multi = _native.Trace.file_reads(n_files, file_lines, reads, False, 1, cfg.n_cpus)
    geometry = tuple((lv.sets, lv.ways) for lv in cfg.levels)
    one = _native.Trace.file_reads(n_files, file_lines, reads, False, 1, 1)
    n = len(one)
    cachesim: Any
    try:
        cachesim = importlib.import_module("cachesim")
    except ImportError:
        cachesim = None
    addrs = [line * cfg.line_size for line in one.lines()] if cachesim is not None else []

    multi_rates: list[float] = []
    single_rates: list[float] = []
    peer_rates: list[float] = []
    equal: bool | None = None
    for _ in range(max(1, repeats)):
        engine = cfg.engine()
        multi_rates.append(len(multi) / _timed(engine.run_trace, multi))
        ours = single_core(geometry, cfg.line_size).engine()
        single_rates.append(n / _timed(ours.run_trace, one))
        if cachesim is None:
            continue
        caches, sim = _pycachesim(cachesim, geometry, cfg.line_size)
        peer_rates.append(n / _timed(sim.load, addrs))
        served = ours.counters().served
        same = [c.HIT_count for c in caches] == served[: len(geometry)]
        equal = same if equal is None else equal and same
    return BenchResult(
        model,
        len(multi),
        statistics.median(multi_rates),
        statistics.median(single_rates),
        statistics.median(peer_rates) if peer_rates else None,
        equal,
        len(multi_rates),
        min(multi_rates),
        max(multi_rates),
    )


def _pycachesim(
    cachesim: Any, geometry: tuple[tuple[int, int], ...], line_size: int
) -> tuple[list[Any], Any]:
    """pycachesim's LRU hierarchy of the given (sets, ways) per level, L1 first."""
    mem = cachesim.MainMemory()
    below = None
    caches: list[Any] = []
    for i in reversed(range(len(geometry))):
        sets, ways = geometry[i]
        if below is None:
            cache = cachesim.Cache(f"L{i + 1}", sets, ways, line_size, "LRU")
            mem.load_to(cache)
            mem.store_from(cache)
        else:
            cache = cachesim.Cache(
                f"L{i + 1}", sets, ways, line_size, "LRU", store_to=below, load_from=below
            )
        caches.insert(0, cache)
        below = cache
    return caches, cachesim.CacheSimulator(caches[0], mem)
