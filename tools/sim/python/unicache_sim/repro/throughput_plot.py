"""Figure 3-style plot of the MFC experiment: absolute throughput and improvement."""

from __future__ import annotations

from pathlib import Path

from unicache.errors import ConfigError

from unicache_sim.experiments.mfc.read import PointResult
from unicache_sim.experiments.mfc.spec import BASELINES


def plot_mfc(points: list[PointResult], path: Path, title: str) -> None:
    """Write a two-panel PNG: (a) MB/s per baseline, (b) unicache / linux.

    :param points: results per working set.
    :param path: output file.
    :param title: figure title.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ConfigError("--plot needs matplotlib (tools/sim/requirements.txt)") from err
    sizes = [p.ws_mb for p in points]
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    for b, marker in zip(BASELINES, ("o", "s", "^"), strict=True):
        ax_a.plot(sizes, [p.get(b).mb_per_s for p in points], marker=marker, label=b)
    ax_a.set_xscale("log", base=2)
    ax_a.set_xticks(sizes, labels=[f"{s:g}" for s in sizes])
    ax_a.set_xlabel("working set (MiB)")
    ax_a.set_ylabel("throughput (MB/s)")
    ax_a.set_title("(a) absolute performance")
    ax_a.legend()
    ax_b.plot(sizes, [p.speedup for p in points], marker="s", color="tab:orange")
    ax_b.axhline(1.0, color="grey", linewidth=0.8)
    ax_b.set_xscale("log", base=2)
    ax_b.set_xticks(sizes, labels=[f"{s:g}" for s in sizes])
    ax_b.set_xlabel("working set (MiB)")
    ax_b.set_ylabel("unicache / linux")
    ax_b.set_title("(b) performance improvement")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as err:
        raise ConfigError(f"cannot write plot {path}") from err
    finally:
        plt.close(fig)
