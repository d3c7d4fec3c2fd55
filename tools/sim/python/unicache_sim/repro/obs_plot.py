"""Plots of the observations paper's experiments (``unicache-sim obs --plot``): one panel
per scenario, medians over seeds with their range as error bars."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from unicache_sim.experiments.obs.scenarios import (
    CREDITS,
    ScenarioResult,
    geomean,
    kind_rate,
    kind_speedup,
    task_speedups,
)
from unicache_sim.experiments.obs.tasks import SPEC_MIX
from unicache_sim.repro.figures import pyplot, save_figure


def _bar(ax: Any, x: float, values: list[float], **kw: Any) -> None:
    mid = statistics.median(values)
    err = [[mid - min(values)], [max(values) - mid]]
    ax.bar([x], [mid], yerr=err, capsize=3, **kw)


def _pairs(ax: Any, res: ScenarioResult) -> None:
    for i, label in enumerate(("worst", "linux", "obs")):
        rates = [kind_rate(r, "cachebuster") / 1e9 for r in res.runs[label]]
        _bar(ax, i, rates, color=("tab:red", "tab:grey", "tab:blue")[i])
    ax.set_xticks(range(3), ["worst\n[cb,sl][cb,sl]", "Linux", "OBS"])
    ax.set_ylabel("cachebusters' throughput (GB/s)")
    ax.set_title("(a) cb/sl pairs on one LLC")


def _migration(ax: Any, res: ScenarioResult) -> None:
    for label, color in (("linux", "tab:grey"), ("obs", "tab:blue")):
        trace = [g[0] for g in res.runs[label][0].heavy_per_group]
        ax.step(range(len(trace)), trace, where="post", label=label, color=color)
    ax.axhline(2, color="black", linewidth=0.6, linestyle=":")
    ax.set_ylim(-0.2, 4.2)
    ax.set_xlabel(f"round (seed {res.runs['obs'][0].seed})")
    ax.set_ylabel("cachebusters in LLC group 0")
    ax.set_title("(b) Figure 3: cachebusters per LLC group")
    ax.legend()


def _credit(ax: Any, res: ScenarioResult) -> None:
    base = res.runs["linux"]
    for name, pick, marker in (("least task", min, "v"), ("geomean", geomean, "o")):
        meds, lows, highs = [], [], []
        for c in CREDITS:
            per_seed = [pick(list(task_speedups(o, b).values()))
                        for o, b in zip(res.runs[f"obs c={c:g}"], base, strict=True)]
            meds.append(statistics.median(per_seed))
            lows.append(meds[-1] - min(per_seed))
            highs.append(max(per_seed) - meds[-1])
        ax.errorbar([100 * c for c in CREDITS], meds, yerr=[lows, highs], marker=marker,
                    capsize=3, label=name)
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("c_credit (%)")
    ax.set_ylabel("speedup over Linux")
    ax.set_title("(c) Figure 5: OBS-C's credit")
    ax.legend()


def _spec(ax: Any, res: ScenarioResult) -> None:
    width = 0.38
    for j, cores in enumerate((2, 4)):
        obs, lin = res.runs[f"obs {cores} cores"], res.runs[f"linux {cores} cores"]
        for i, kind in enumerate(SPEC_MIX):
            ups = [kind_speedup(o, b, kind) for o, b in zip(obs, lin, strict=True)]
            _bar(ax, i + (j - 0.5) * width, ups, width=width,
                 color=("tab:cyan", "tab:blue")[j], label=f"{cores} cores" if i == 0 else None)
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xticks(range(len(SPEC_MIX)), list(SPEC_MIX))
    ax.set_ylabel("speedup over Linux")
    ax.set_title("(d) Figures 2 and 4: SPEC stand-ins")
    ax.legend()


def plot_obs(results: list[ScenarioResult], path: Path, title: str) -> None:
    """Write one panel per scenario as a PNG.

    :param results: the scenarios run.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    plt = pyplot()
    draw = {"pairs": _pairs, "migration": _migration, "credit": _credit, "spec": _spec}
    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 4.2), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        draw[res.name](ax, res)
    fig.suptitle(title)
    save_figure(plt, fig, path)
