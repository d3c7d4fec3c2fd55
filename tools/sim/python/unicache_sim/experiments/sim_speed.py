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

A third measurement shows several simulations in one process across cores: four
independent multicore runs (a quarter of the trace each, with its own seed, on a fresh
engine) on a pool of 1, 2, ... Python threads. ``Engine.run_trace`` releases the GIL, so
the threads simulate at once; the rate is all jobs' accesses over the batch's wall time
(the only clock that shows parallelism, so it also counts whatever else the machine
runs), and every job's served counts must equal those of the one-thread batch.
"""

from __future__ import annotations

import importlib
import os
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from unicache.topology.toml import load_model

from unicache_sim import _native
from unicache_sim.engine.config import SimConfig, from_topology, single_core

FILE_BYTES = 256 * 1024
#: independent simulations of the parallel measurement (trace seeds 1..PARALLEL_JOBS)
PARALLEL_JOBS = 4


@dataclass(frozen=True, slots=True)
class ParallelRate:
    """Independent multicore simulations on a pool of Python threads, in one process.

    :param threads: threads of the pool.
    :param jobs: simulations run (one trace seed and a fresh engine each).
    :param rate: line accesses per second of wall time, all jobs together (median).
    :param cores_busy: CPU seconds of this process per second of wall time during the
        batch (median): how many cores it kept busy, up to ``threads`` when the GIL is
        released and the machine's other work leaves the cores free.
    """

    threads: int
    jobs: int
    rate: float
    cores_busy: float


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
    parallel: tuple[ParallelRate, ...] = ()
    parallel_counts_equal: bool | None = None

    @property
    def ratio(self) -> float | None:
        """How many times faster than pycachesim on the same single-core trace."""
        if self.pycachesim_rate is None:
            return None
        return self.single_core_rate / self.pycachesim_rate

    @property
    def scaling(self) -> float | None:
        """Rate of the largest thread pool over the one-thread pool's."""
        if len(self.parallel) < 2:
            return None
        return self.parallel[-1].rate / self.parallel[0].rate


def _timed(run: Callable[[Any], object], arg: Any) -> float:
    """CPU seconds of the calling thread spent in ``run(arg)``."""
    t0 = time.thread_time()
    run(arg)
    return time.thread_time() - t0


def host_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_bench(
    model: str = "opteron-16",
    accesses: int = 8_000_000,
    ws_mb: int = 8,
    repeats: int = 3,
    threads: Sequence[int] | None = None,
) -> BenchResult:
    """Run the benchmark.

    :param model: machine model name.
    :param accesses: approximate number of line accesses.
    :param ws_mb: working set of the read microbenchmark trace, MiB.
    :param repeats: runs of each measurement (median reported).
    :param threads: thread pools of the parallel measurement (default: 1 and this
        machine's CPUs); empty: no parallel measurement.
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
    pools = sorted(set((1, host_cpus()) if threads is None else threads))
    parallel, same_counts = _parallel(cfg, n_files, file_lines, reads, pools, repeats)
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
        parallel,
        same_counts,
    )


def _parallel(
    cfg: SimConfig,
    n_files: int,
    file_lines: int,
    reads: int,
    pools: Sequence[int],
    repeats: int,
) -> tuple[tuple[ParallelRate, ...], bool | None]:
    """The parallel measurement: :data:`PARALLEL_JOBS` multicore simulations of a share
    of ``reads`` each on each pool, pools interleaved, ``repeats`` times; returns the
    median rates and whether every pool's jobs counted what the first pool's did."""
    if not pools:
        return (), None
    share = max(1, reads // PARALLEL_JOBS)
    traces = [
        _native.Trace.file_reads(n_files, file_lines, share, False, seed, cfg.n_cpus)
        for seed in range(1, PARALLEL_JOBS + 1)
    ]
    total = sum(len(t) for t in traces)

    def job(trace: _native.Trace) -> list[int]:
        engine = cfg.engine()
        engine.run_trace(trace)
        return engine.counters().served

    rates: dict[int, list[float]] = {n: [] for n in pools}
    busy: dict[int, list[float]] = {n: [] for n in pools}
    first: list[list[int]] | None = None
    same = True
    for _ in range(max(1, repeats)):
        for n in pools:
            with ThreadPoolExecutor(max_workers=n) as pool:
                t0, c0 = time.perf_counter(), time.process_time()
                served = list(pool.map(job, traces))
                wall = time.perf_counter() - t0
                busy[n].append((time.process_time() - c0) / wall)
                rates[n].append(total / wall)
            first = served if first is None else first
            same = same and served == first
    runs = tuple(
        ParallelRate(n, len(traces), statistics.median(rates[n]), statistics.median(busy[n]))
        for n in pools
    )
    return runs, same


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
