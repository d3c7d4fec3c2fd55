"""Plots of the coloring and replica experiments, drawn like the papers' figures.

* SRM paper Figure 2: (a) mergesort's slowdown against its array size, without coloring
  (solid) and with coloring (dotted); (b) its LLC misses per million instructions.
* SRM paper §4 (``srm --case``): each case's curves, medians over seeds with their range
  (Figure 16 against ``T_l``, Figure 13 against the number of greps, §4.5 per seed).
* NCC paper §5 grep: local page-hit ratio (Figure 3) and mean grep run time (Table 1),
  without and with replicas, as bars.
* NCC paper §5 iozone: local page hits per test (Figure 4) and the speedup of backward and
  stride reads against the thread count (Table 5), beside the paper's.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError

from unicache_sim.experiments.ncc.iozone_summary import PhaseSummary
from unicache_sim.experiments.ncc.replicas import NccResult
from unicache_sim.experiments.srm.cases import CaseResult
from unicache_sim.experiments.srm.colors import SrmPoint


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend.

    :raises ConfigError: if matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ConfigError("--plot needs matplotlib (tools/sim/requirements.txt)") from err
    return plt


def save_figure(plt: Any, fig: Any, path: Path) -> None:
    """Lay out, write and close a figure.

    :raises ConfigError: if the file cannot be written.
    """
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as err:
        raise ConfigError(f"cannot write plot {path}") from err
    finally:
        plt.close(fig)


def plot_srm(points: list[tuple[SrmPoint, SrmPoint]], path: Path, title: str) -> None:
    """Write Figure 2's two panels as a PNG.

    :param points: (without, with coloring) per array size.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    plt = pyplot()
    sizes = [p[0].size_kb / 1024 for p in points]
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    lines = (("no coloring", "-o"), ("SRM (no colors where they would not pay)", ":s"))
    for i, (label, style) in enumerate(lines):
        ax_a.plot(sizes, [p[i].slowdown_pct for p in points], style, label=label)
        ax_b.plot(
            sizes, [p[i].get("shared").misses_per_m_instr for p in points], style, label=label
        )
    ax_a.set_xlabel("array size (MiB)")
    ax_a.set_ylabel("slowdown of mergesort (%)")
    ax_a.set_title("(a) slowdown (T2 - T1) / T1")
    ax_a.legend()
    ax_b.set_xlabel("array size (MiB)")
    ax_b.set_ylabel("LLC misses per million instructions")
    ax_b.set_title("(b) LLCM of mergesort, grep on the same LLC")
    ax_b.legend()
    fig.suptitle(title)
    save_figure(plt, fig, path)


def plot_srm_case(result: CaseResult, path: Path, title: str) -> None:
    """Write one §4 case's curves as a PNG: per label, the median over seeds with the range.

    :param result: the case.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    xlabel = {"sweep-tl": "T_l (pages)", "corunners": "greps on the LLC"}.get(result.name, "seed")
    for label, points in result.curves.items():
        xs = [x for x, _ in points]
        mids = [statistics.median(v) for _, v in points]
        err = [
            [m - min(v) for m, (_, v) in zip(mids, points, strict=True)],
            [max(v) - m for m, (_, v) in zip(mids, points, strict=True)],
        ]
        ax.errorbar(xs, mids, yerr=err, marker="o", capsize=3, label=label)
    if result.name == "sweep-tl":
        ax.set_xscale("log", base=2)
    ticks = [x for x, _ in next(iter(result.curves.values()))]
    ax.set_xticks(ticks, labels=[f"{x:g}" for x in ticks])
    ax.axhline(0.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel(xlabel)
    ylabel = {
        "sweep-tl": "mergesort's time reduction by SRM (%)",
        "random": "mergesort's time change with SRM (%)",
        "rescan": "time per scan over no coloring (%)",
        "corunners": "mergesort's slowdown over alone (%)",
    }
    ax.set_ylabel(ylabel.get(result.name, "%"))
    ax.set_title(result.findings[0].figure)
    ax.legend()
    fig.suptitle(title)
    save_figure(plt, fig, path)


def plot_ncc(result: NccResult, path: Path, title: str) -> None:
    """Write the grep experiment's local page-hit ratio and mean grep time as bars.

    :param result: both configurations.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    plt = pyplot()
    runs = (result.without, result.with_replicas)
    labels = ["first touch", "NCC replicas"]
    colors = ["tab:grey", "tab:blue"]
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(9, 4))
    bars = ax_a.bar(labels, [100 * r.local_ratio for r in runs], color=colors)
    ax_a.bar_label(bars, fmt="%.1f %%")
    ax_a.set_ylim(0, 105)
    ax_a.set_ylabel("local page hits (%)")
    ax_a.set_title("(a) local page-hit ratio")
    times = [1e3 * r.avg_grep_s for r in runs]
    bars = ax_b.bar(labels, times, color=colors)
    ax_b.bar_label(bars, fmt="%.1f ms")
    ax_b.set_ylim(0, 1.15 * max(times))
    ax_b.set_ylabel("mean grep run time (ms)")
    ax_b.set_title("(b) run time of one grep")
    fig.suptitle(title)
    save_figure(plt, fig, path)


def plot_ncc_iozone(
    rows: Sequence[PhaseSummary],
    paper: Mapping[int, tuple[float, float]],
    path: Path,
    title: str,
) -> None:
    """Write the iozone experiment: (a) local page hits per test at the most threads,
    without and with replicas (Figure 4); (b) backward and stride reads' speedup against
    the thread count, medians with their range, beside the paper's Table 5.

    :param rows: the summaries over seeds.
    :param paper: Table 5's (backward, stride) speedups in percent, by thread count.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    plt = pyplot()
    many = max(r.threads for r in rows)
    at = [r for r in rows if r.threads == many]
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    xs = range(len(at))
    ax_a.bar(
        [x - 0.2 for x in xs],
        [r.local_without.median for r in at],
        0.4,
        color="tab:grey",
        label="first touch",
    )
    ax_a.bar(
        [x + 0.2 for x in xs],
        [r.local_with.median for r in at],
        0.4,
        color="tab:blue",
        label="NCC replicas",
    )
    ax_a.set_xticks(list(xs), [r.phase for r in at], rotation=30, ha="right")
    ax_a.set_ylim(0, 105)
    ax_a.set_ylabel("local page hits (%)")
    ax_a.set_title(f"(a) local page hits, {many} threads")
    ax_a.legend()
    for phase, color, index in (
        ("backward read", "tab:orange", 0),
        ("stride read", "tab:green", 1),
    ):
        mine = [r for r in rows if r.phase == phase]
        threads = [r.threads for r in mine]
        mid = [r.speedup_pct.median for r in mine]
        err = [
            [m - r.speedup_pct.low for m, r in zip(mid, mine, strict=True)],
            [r.speedup_pct.high - m for m, r in zip(mid, mine, strict=True)],
        ]
        ax_b.errorbar(threads, mid, yerr=err, marker="o", color=color, label=f"{phase}")
        known = sorted(t for t in paper if t in threads)
        ax_b.plot(
            known, [paper[t][index] for t in known], "--", color=color, label=f"{phase}, paper"
        )
    ax_b.axhline(0, color="black", linewidth=0.5)
    ax_b.set_xlabel("iozone threads")
    ax_b.set_ylabel("speedup with replicas (%)")
    ax_b.set_title("(b) speedup (Table 5)")
    ax_b.legend(fontsize="small")
    fig.suptitle(title)
    save_figure(plt, fig, path)
