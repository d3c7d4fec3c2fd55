"""Plots of the MFC paper's figures as ``unicache-sim figures`` reproduces them.

* ``mfc-fig3-4.png``: speedup over Linux against the working set, one panel per program,
  uniform (Figure 3b) and Zipf (Figure 4b), medians with the seeds' range as a band;
* ``mfc-fig5.png``: read's DRAM bytes per file byte, Linux and unicache (Figure 5);
* ``mfc-fig6-7-9.png``: the parallel set-up's speedups (Figures 6-7) and with throttled
  DRAM (Figure 9), bars with the seeds' range, the paper's value as a marker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unicache_sim.experiments.mfc.read import PointResult
from unicache_sim.repro.figures import pyplot, save_figure
from unicache_sim.spread import Spread

Key = tuple[str, str, str, float, float]
WORKLOADS = ("read", "grep", "wc", "md5sum")


def _write(plt: Any, fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(plt, fig, path)
    return path


def plot_one_reader(speed: Mapping[Key, Spread], path: Path) -> Path:
    """Figures 3(b) and 4(b): one panel per program, uniform and Zipf lines."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(13, 3.4), sharey=True)
    for ax, w in zip(axes, WORKLOADS, strict=True):
        for figure, dist, style in (("Figure 3", "uniform", "o-"), ("Figure 4", "zipf", "s--")):
            mine = {k[3]: s for k, s in speed.items() if k[:3] == (figure, w, dist)}
            if not mine:
                continue
            xs = sorted(mine)
            ax.plot(xs, [mine[x].median for x in xs], style, label=dist)
            ax.fill_between(xs, [mine[x].low for x in xs], [mine[x].high for x in xs], alpha=0.2)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(w)
        ax.set_xlabel("working set (MiB)")
    axes[0].set_ylabel("unicache / Linux")
    axes[0].legend()
    fig.suptitle("MFC Figures 3(b)/4(b) on opteron-16, the product's path (median, seeds' range)")
    return _write(plt, fig, path)


def plot_dram(by_key: Mapping[Key, Sequence[PointResult]], path: Path) -> Path:
    """Figure 5: read's DRAM bytes per file byte, Linux and unicache, log scale."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for figure, dist in (("Figure 3", "uniform"), ("Figure 4", "zipf")):
        mine = {k[3]: v for k, v in by_key.items() if k[:3] == (figure, "read", dist)}
        xs = sorted(mine)
        for baseline, style in (("linux", "-"), ("unicache", "--")):
            ys = [
                max(Spread.of([r.get(baseline).dram_per_byte for r in mine[x]]).median, 1e-4)
                for x in xs
            ]
            ax.plot(xs, ys, style, marker="o", label=f"{baseline} {dist}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("working set (MiB)")
    ax.set_ylabel("DRAM bytes per file byte")
    ax.set_title("MFC Figure 5 on opteron-16 (median of seeds; floor 1e-4)")
    ax.legend(fontsize=8)
    return _write(plt, fig, path)


def plot_parallel(speed: Mapping[Key, Spread], paper: Mapping[Key, float], path: Path) -> Path:
    """Figures 6, 7 and 9: each parallel point's speedup, the paper's value beside it.

    :param speed: every point's speedup over its seeds (the one-reader points are skipped).
    :param paper: the paper's value of each parallel point.
    """
    plt = pyplot()
    labels: list[str] = []
    sims: list[Spread] = []
    papers: list[float] = []
    for key, spread in sorted(speed.items()):
        if key not in paper:
            continue
        figure, w, _dist, ws, bw = key
        labels.append(f"{figure[7:]}: {w} {ws:g}M" + (f" bw {bw:g}" if bw != 1 else ""))
        sims.append(spread)
        papers.append(paper[key])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(labels) + 2), 4))
    xs = range(len(labels))
    ax.bar(
        xs,
        [s.median for s in sims],
        yerr=[[s.median - s.low for s in sims], [s.high - s.median for s in sims]],
        label="unicache-sim (median, range)",
        color="tab:blue",
    )
    ax.scatter(xs, papers, marker="_", s=300, color="tab:red", label="paper (peak)", zorder=3)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(xs), labels, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("unicache / Linux")
    ax.set_title("MFC Figures 6, 7 and 9 (parallel set-up) on opteron-16")
    ax.legend(fontsize=8)
    return _write(plt, fig, path)
