"""Plots of ``unicache-sim dmc``: the DMC paper's Figures 3-5 as the simulator runs them,
and SCU's speedup on DMC hardware (a what-if) per machine model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unicache.errors import ConfigError

from unicache_sim.experiments.scu_on_dmc import DmcReport


def plot_dmc(report: DmcReport, directory: Path) -> list[Path]:
    """Write ``dmc-figures-3-5.png`` and, with SCU runs, ``dmc-scu.png`` into a directory.

    :returns: the files written.
    :raises ConfigError: if matplotlib is missing or the directory cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ConfigError("--plot needs matplotlib (tools/sim/requirements.txt)") from err
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create {directory}: {err}") from err
    written = [_plot_micro(plt, report, directory / "dmc-figures-3-5.png")]
    if report.scu:
        written.append(_plot_scu(plt, report, directory / "dmc-scu.png"))
    return written


def _plot_micro(plt: Any, report: DmcReport, path: Path) -> Path:
    """Figures 3-5 side by side: the scan, the ping-pong and the locked list."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    lines = [p.lines for p in report.scan]
    a.plot(lines, [p.lw for p in report.scan], marker="o", label="lw")
    a.plot(lines, [p.cmsg for p in report.scan], marker="s", label="cmsg")
    a.set(
        xlabel="cache lines per segment", ylabel="cycles per segment", title="Figure 3: memory scan"
    )
    a.legend()
    b.plot([k for k, _ in report.pingpong], [t for _, t in report.pingpong], marker="o")
    b.axhline(2202, linestyle=":", color="grey", label="paper, no cpush (2202)")
    b.axhline(831, linestyle="--", color="grey", label="paper, 6 lines (831)")
    b.set(
        xlabel="context lines pushed",
        ylabel="cycles per round trip",
        title="Figure 4: thread ping-pong",
    )
    b.legend()
    extra = [p.extra for p in report.lists]
    for name, key in (("lw", "lw"), ("cmsg", "cmsg")):
        med = [getattr(p, key).median for p in report.lists]
        low = [getattr(p, key).median - getattr(p, key).low for p in report.lists]
        high = [getattr(p, key).high - getattr(p, key).median for p in report.lists]
        c.errorbar(extra, med, yerr=[low, high], marker="o", capsize=3, label=name)
    c.set(
        xlabel="extra lines under the lock",
        ylabel="cycles per operation",
        title=f"Figure 5: locked list (median of {len(report.seeds)} seeds)",
    )
    c.legend()
    fig.suptitle("DMC microbenchmarks on unicache-sim (dmc-ppc: the paper's §6 platform)")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def _plot_scu(plt: Any, report: DmcReport, path: Path) -> Path:
    """SCU's speedup per model, a bar per DMC variant (a what-if)."""
    fig, ax = plt.subplots(figsize=(10, 4))
    models = list(dict.fromkeys(p.model for p in report.scu))
    variants = list(dict.fromkeys(_variant(p.migration, p.lookup) for p in report.scu))
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        pts = [
            next(
                p
                for p in report.scu
                if p.model == m and _variant(p.migration, p.lookup) == variant
            )
            for m in models
        ]
        xs = [j + i * width for j in range(len(models))]
        ax.bar(
            xs,
            [p.speedup.median for p in pts],
            width,
            label=variant,
            yerr=[
                [p.speedup.median - p.speedup.low for p in pts],
                [p.speedup.high - p.speedup.median for p in pts],
            ],
            capsize=3,
        )
    ax.axhline(1.0, color="grey", linestyle=":")
    ax.set_xticks(
        [j + 0.4 - width / 2 for j in range(len(models))],
        [f"{m}\n{next(p.ws_mb for p in report.scu if p.model == m):g} MiB" for m in models],
    )
    ax.set(
        ylabel="unicache / linux (live path)",
        title="SCU on DMC hardware — WHAT-IF, no such hardware exists",
    )
    ax.legend()
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def _variant(migration: str, lookup: bool) -> str:
    name = "today's migration" if migration == "none" else f"cpush {migration}"
    return name + (" + cllookup" if lookup else "")


def _save(fig: object, path: Path) -> None:
    try:
        fig.savefig(path, dpi=110)  # type: ignore[attr-defined]
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err}") from err
