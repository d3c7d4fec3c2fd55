"""The NCC iozone experiment over seeds: each test's throughput, speedup and local page
hits at each thread count, median and range (what ``unicache-sim ncc --case iozone``
prints, ``make figures`` cites and plots)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unicache_sim.experiments.ncc.iozone import PHASES, IozoneResult
from unicache_sim.spread import Spread


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """One test at one thread count over seeds (what the CLI prints and the rows cite)."""

    threads: int
    phase: str
    mb_s_without: Spread
    mb_s_with: Spread
    speedup_pct: Spread
    local_without: Spread
    local_with: Spread


def summarize(by_threads: Mapping[int, Sequence[IozoneResult]]) -> list[PhaseSummary]:
    """Medians and ranges over seeds of every test at every thread count."""
    out = []
    for threads, runs in sorted(by_threads.items()):
        for phase in PHASES:
            out.append(
                PhaseSummary(
                    threads,
                    phase,
                    Spread.of([r.without.phase(phase).mb_s for r in runs]),
                    Spread.of([r.with_replicas.phase(phase).mb_s for r in runs]),
                    Spread.of([r.speedup_pct(phase) for r in runs]),
                    Spread.of([100 * r.without.phase(phase).local_ratio for r in runs]),
                    Spread.of([100 * r.with_replicas.phase(phase).local_ratio for r in runs]),
                )
            )
    return out
