"""The density experiment's plots (PNG, matplotlib's Agg backend).

* ``vms-per-host.png``: VMs per host of every mix under each policy (bars);
* ``p95-MIX.png``: per mix, the p95 of every latency tenant as N grows, under each policy,
  with its SLO target (one panel per tenant; probes of the search, seeds pooled);
* ``cdf.png``: the CDF over mixes of unicache's VMs per host over Linux's.
"""

from __future__ import annotations

import math
from pathlib import Path

from unicache_sim.density.experiment import DensityReport
from unicache_sim.density.report import ratios
from unicache_sim.density.search import cdf
from unicache_sim.density.tenants import SloKind

#: line and bar colors of the policies
_COLORS = {"linux": "#4c72b0", "unicache": "#dd8452"}


def plot_all(report: DensityReport, out: Path) -> list[Path]:
    """Draw every plot into ``out``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    written = [_vms(report, out / "vms-per-host.png")]
    for mix in report.request.mixes:
        path = _p95(report, mix.name, out / f"p95-{mix.name}.png")
        if path is not None:
            written.append(path)
    if set(report.request.policies) >= {"linux", "unicache"}:
        written.append(_cdf(report, out / "cdf.png"))
    return written


def _vms(report: DensityReport, path: Path) -> Path:
    import matplotlib.pyplot as plt

    mixes = [m.name for m in report.request.mixes]
    policies = report.request.policies
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(mixes) + 2), 3.6))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        values = []
        for mix in mixes:
            s = report.search(mix, policy)
            values.append(s.vms if s is not None else 0)
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(mixes))]
        bars = ax.bar(xs, values, width, label=policy, color=_COLORS.get(policy))
        ax.bar_label(bars, fontsize=7)
    ax.set_xticks(range(len(mixes)), mixes, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("VMs per host at the SLO")
    ax.set_title(f"{report.request.model}: VMs per host, every SLO met", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _p95(report: DensityReport, mix: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    cat = report.request.catalogue
    refs = {r.flavor: r for r in report.references}
    mix_def = next(m for m in report.request.mixes if m.name == mix)
    flavors = [f for f, _ in mix_def.weights if cat.get(f).slo is SloKind.LATENCY]
    if not flavors:
        return None
    fig, axes = plt.subplots(1, len(flavors), figsize=(3.4 * len(flavors), 3.2), squeeze=False)
    for ax, flavor in zip(axes[0], flavors, strict=True):
        for policy in report.request.policies:
            s = report.search(mix, policy)
            if s is None:
                continue
            points = sorted(
                (p.n, c.measured)
                for p in s.probes
                for c in p.checks
                if c.flavor == flavor and math.isfinite(c.measured)
            )
            if points:
                ax.plot(*zip(*points, strict=True), "o-", label=policy,
                        color=_COLORS.get(policy), markersize=3)
        ref = refs.get(flavor)
        if ref is not None and math.isfinite(ref.p95_us):
            target = cat.get(flavor).k * ref.p95_us
            ax.axhline(target, color="black", linestyle=":", linewidth=1, label="SLO")
        ax.set_title(f"{flavor}", fontsize=9)
        ax.set_xlabel("VMs on the host", fontsize=8)
        ax.set_ylabel("p95 latency (us)", fontsize=8)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle(f"{report.request.model}, mix {mix} ({mix_def.label})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cdf(report: DensityReport, path: Path) -> Path:
    import matplotlib.pyplot as plt

    curve = cdf(list(ratios(report).values()))
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    if curve:
        xs = [v for v, _ in curve]
        ys = [s for _, s in curve]
        ax.step([xs[0], *xs], [0.0, *ys], where="post", color=_COLORS["unicache"])
    ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("VMs per host, unicache / linux", fontsize=8)
    ax.set_ylabel("share of mixes", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{report.request.model}: density ratio over {len(curve)} mixes", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
