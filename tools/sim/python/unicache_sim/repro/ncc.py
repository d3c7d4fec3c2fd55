"""The NCC paper's iozone results (Tables 3-5, Figure 4) for ``unicache-sim figures`` and
``unicache-sim ncc --case iozone``: one task per seed and thread count, medians over seeds.

The experiment is :mod:`unicache_sim.experiments.ncc.iozone` (docs/simulator.md, "NCC
iozone"); every row names the command that prints its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.topology.toml import load_model

from unicache_sim.experiments.ncc.iozone import IozoneResult, IozoneSpec, run_iozone
from unicache_sim.experiments.ncc.iozone_summary import PhaseSummary, summarize
from unicache_sim.repro.figures import plot_ncc_iozone
from unicache_sim.repro.run import ReproReport
from unicache_sim.repro.table import ReproRow, Verdict

NCC_MODEL = "opteron-242-2node"
THREADS = (2, 4, 6, 8, 10)
COMMAND = f"unicache-sim ncc --case iozone --model {NCC_MODEL}"
#: §5 Table 5 (percent), by thread count: backward read and stride read
TABLE5 = {2: (3.5, 14.3), 4: (6.7, 12.7), 6: (3.2, 4.7), 8: (11.9, 8.7), 10: (0.7, 2.2)}
#: §5 Table 3, 10 threads (MB/s): write, read, stride read
TABLE3_10 = (235.0, 2191.0, 1953.0)


@dataclass(frozen=True, slots=True)
class NccIozoneTask:
    """One seed of one thread count (without and with replicas)."""

    seed: int
    threads: int

    @property
    def label(self) -> str:
        return f"NCC iozone {self.threads}t s{self.seed}"

    @property
    def cost(self) -> float:
        return 6.0 * self.threads

    def run(self) -> IozoneResult:
        return run_iozone(load_model(NCC_MODEL), IozoneSpec(threads=self.threads, seed=self.seed))


@dataclass
class NccIozoneExperiment:
    """NCC Tables 3-5 and Figure 4."""

    quick: bool = False
    name: str = "ncc-iozone"
    covers: tuple[tuple[str, str], ...] = (
        ("NCC", "Table 3"),
        ("NCC", "Table 4"),
        ("NCC", "Table 5"),
        ("NCC", "Figure 4"),
    )

    def tasks(self, seeds: tuple[int, ...]) -> Sequence[NccIozoneTask]:
        threads = (2, 10) if self.quick else THREADS
        return [NccIozoneTask(s, t) for s in seeds for t in threads]

    def report(self, results: Mapping[Any, object], figures: Path) -> ReproReport:
        by_threads: dict[int, list[IozoneResult]] = {}
        for task, result in sorted(results.items(), key=lambda i: str(i[0].label)):
            if isinstance(task, NccIozoneTask) and isinstance(result, IozoneResult):
                by_threads.setdefault(task.threads, []).append(result)
        rows = summarize(by_threads)
        paths: list[Path] = []
        if rows:
            figures.mkdir(parents=True, exist_ok=True)
            paths.append(figures / "sim-ncc-iozone.png")
            plot_ncc_iozone(rows, TABLE5, paths[-1], f"{NCC_MODEL}: iozone, NCC off / on")
        return ReproReport(tuple(iozone_rows(rows)), tuple(paths))


def _at(rows: Sequence[PhaseSummary], threads: int, phase: str) -> PhaseSummary:
    return next(r for r in rows if r.threads == threads and r.phase == phase)


def iozone_rows(rows: Sequence[PhaseSummary]) -> list[ReproRow]:
    """The table's rows for Tables 3-5 and Figure 4."""
    if not rows:
        return []
    few, many = min(r.threads for r in rows), max(r.threads for r in rows)
    pct = "{:+.1f}"
    base = [_at(rows, many, p).mb_s_without for p in ("write", "read", "stride read")]
    ncc = [_at(rows, many, p).mb_s_with for p in ("write", "read", "stride read")]
    close = all(abs(s.median / p - 1) <= 0.25 for s, p in zip(base, TABLE3_10, strict=True))
    speed = {
        t: (_at(rows, t, "backward read").speedup_pct, _at(rows, t, "stride read").speedup_pct)
        for t in (few, many)
    }
    best = max(r.speedup_pct.median for r in rows if r.phase not in ("write", "re-write"))
    reads = [r for r in rows if r.threads == many and r.phase not in ("write", "re-write")]
    higher = [r.phase for r in reads if r.local_with.median > r.local_without.median + 0.5]
    return [
        ReproRow(
            "NCC",
            "Table 3",
            f"iozone MB/s, untouched kernel (no replicas), {many} threads: write, read, stride",
            COMMAND + " --json",
            " / ".join(f"{v:.0f}" for v in TABLE3_10),
            " / ".join(s.text("{:.0f}") for s in base),
            Verdict.REPRODUCED if close else Verdict.SHAPE,
            f"{few} threads is the calibration point (compute per byte set from Table 3), "
            "not a result; the simulated throughput stays flat as threads grow (no "
            "allocator, journal or prefetcher modelled) where the paper's write falls 28 % "
            "and its stride read rises 27 % from 2 to 10 threads",
        ),
        ReproRow(
            "NCC",
            "Table 4",
            f"iozone MB/s with NCC, {many} threads: write, read, stride",
            COMMAND + " --json",
            "235 / 2195 / 1996",
            " / ".join(s.text("{:.0f}") for s in ncc),
            Verdict.SHAPE,
            "write and read unchanged as in the paper; stride read not higher: NCC steps "
            "aside (Table 5)",
        ),
        ReproRow(
            "NCC",
            "Table 5",
            f"speedup with NCC, backward / stride read, {few} and {many} threads",
            COMMAND,
            f"{TABLE5[few][0]:+.1f}% / {TABLE5[few][1]:+.1f}% ({few}), "
            f"{TABLE5[many][0]:+.1f}% / {TABLE5[many][1]:+.1f}% ({many}); up to +14.3%",
            f"{speed[few][0].text(pct, '%')} / {speed[few][1].text(pct, '%')} ({few}), "
            f"{speed[many][0].text(pct, '%')} / {speed[many][1].text(pct, '%')} ({many}); "
            f"best read median {best:+.1f}%",
            Verdict.NOT_REPRODUCED if best < 1.0 else Verdict.SHAPE,
            "the product decides once per 1 s round (a 2-thread run's reads last 0.6 s), "
            "fills whole 512 KiB chunks that iozone reads once per test, and keeps 10 % of a "
            "node (a sixth of the remote files at 10 threads): its replicas would be evicted "
            "before a later read, so NCC predicts no gain and steps aside (NCC_NO_GAIN), "
            "never slower; the paper's rule (--always-place) runs stride read 13-20 % slower "
            "(docs/simulator.md)",
        ),
        ReproRow(
            "NCC",
            "Figure 4",
            f"iozone's local page hits with NCC, {many} threads",
            COMMAND,
            "higher for every access type",
            ", ".join(
                f"{r.phase} {r.local_without.median:.0f}->{r.local_with.median:.0f}%" for r in reads
            ),
            Verdict.SHAPE if higher else Verdict.NOT_REPRODUCED,
            f"higher for {', '.join(higher) or 'none'}: the 10 % budget holds a sixth of the "
            "remote files, so NCC steps aside rather than make replicas MQ evicts unread "
            "(with --always-place, stride read 40->52 %, slower); writes cannot gain (a write "
            "goes to the primary and drops replicas)",
        ),
    ]
