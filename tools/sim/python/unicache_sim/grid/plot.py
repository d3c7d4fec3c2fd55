"""Heat maps of a grid run: one PNG per model, one panel per path."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from unicache.errors import ConfigError

from unicache_sim.experiments.mfc.spec import FILE_BYTES
from unicache_sim.grid.report import PointKey, PointSummary, seed_range
from unicache_sim.grid.sweep import GridAxes, ModelAxes

#: the color scale spans at least 1/x..x around 1.0, so that noise stays pale
MIN_SPAN = 1.1
#: candidate color-bar ticks above 1.0 (each also as 1/x); at most three are shown
TICK_RATIOS = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0)


def plot_model(
    axes: GridAxes, model: ModelAxes, points: Sequence[PointSummary], path: Path
) -> None:
    """Write one model's heat map: rows workload x dist x threads, columns working sets.

    Color is the median speedup (unicache / linux) on a diverging scale centred on 1.0
    (red: slower than linux, blue: faster; x and 1/x equally deep); each cell shows its
    value, an empty cell a point not run.

    :param axes: the grid's axes (workloads, dists, paths, seeds).
    :param model: the model's axes (threads, working sets).
    :param points: point summaries (other models' are ignored).
    :param path: output PNG.
    :raises ConfigError: if matplotlib is missing or the file cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import Normalize
    except ImportError as err:
        raise ConfigError("grid heat maps need matplotlib (tools/sim/requirements.txt)") from err
    median = {p.key: p.median for p in points if p.key.model == model.model}
    rows = [(w, d, t) for w in axes.workloads for d in axes.dists for t in model.threads]
    cols = model.ws_mb
    grids = [
        [
            [median.get(PointKey(model.model, w, d, t, path_, ws), math.nan) for ws in cols]
            for (w, d, t) in rows
        ]
        for path_ in axes.paths
    ]
    values = [v for g in grids for row in g for v in row if v > 0]
    # a ratio: colored by log2, so that x and 1/x are equally deep (2x faster as blue as 2x
    # slower is red) and the color bar is even on both sides of 1.0
    half = math.log2(max([MIN_SPAN, *(max(v, 1.0 / v) for v in values)]))
    norm = Normalize(vmin=-half, vmax=half)
    n_panels = len(axes.paths)
    width = 1.8 + n_panels * (1.2 + 0.75 * len(cols))
    height = 1.6 + 0.32 * len(rows)
    fig, panels = plt.subplots(
        1, n_panels, figsize=(width, height), squeeze=False, layout="constrained"
    )
    image = None
    for n, (panel, path_, grid) in enumerate(zip(panels[0], axes.paths, grids, strict=True)):
        logs = [[math.log2(v) if v > 0 else math.nan for v in row] for row in grid]
        image = panel.imshow(logs, cmap="RdBu", norm=norm, aspect="auto")
        panel.set_xticks(range(len(cols)), labels=[f"{c:g}" for c in cols])
        labels = [f"{w} {d} {t}t" for (w, d, t) in rows] if n == 0 else []
        panel.set_yticks(range(len(rows)), labels=labels)
        panel.set_xlabel("working set (MiB)")
        panel.set_title(f"path {path_}")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    dark = v > 0 and abs(math.log2(v)) > 0.6 * half
                    color = "white" if dark else "black"
                    panel.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=color)
    if image is not None:
        bar = fig.colorbar(image, ax=panels[0].tolist(), label="unicache / linux (median)")
        # ticks in pairs x and 1/x, labelled as ratios
        ratios = [r for r in TICK_RATIOS if half / 5 <= math.log2(r) <= half][-3:]
        ticks = sorted({0.0, *(math.log2(r) for r in ratios), *(-math.log2(r) for r in ratios)})
        bar.set_ticks(ticks, labels=[f"{2**t:.2g}" for t in ticks])
    # files other than MFC §6.1's, or read in a program's buffers: say so under the title
    files = ""
    if axes.file_bytes != FILE_BYTES or axes.read_bytes:
        calls = f"{axes.read_bytes >> 10} KiB calls" if axes.read_bytes else "one call a chunk"
        files = f"\n{axes.file_bytes >> 10} KiB files read in {calls}"
    fig.suptitle(
        f"{model.model} ({model.cpus} CPUs, {model.llc_groups} LLC groups): median "
        f"unicache / linux over {len(axes.seeds)} seeds ({seed_range(axes.seeds)}){files}"
    )
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    except OSError as err:
        raise ConfigError(f"cannot write heat map {path}") from err
    finally:
        plt.close(fig)
