"""SCU on DMC hardware (a what-if) on several machine models, several seeds each, and
what ``unicache-sim dmc`` reports (with the DMC microbenchmarks of :mod:`.dmc.runs`).

The SCU runs are the MFC experiment on the product's path (``--path live``) with the
what-if options of :class:`~unicache_sim.experiments.mfc.spec.MfcSpec`
(``dmc_migration``, ``dmc_lookup``), so every figure is unicache's loop on a machine that
does not exist. This module composes the two experiments: the MFC experiment runs on the
DMC what-if's hardware (:mod:`.dmc.whatif`), the DMC experiment knows nothing of MFC.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.topology.toml import load_model

from unicache_sim.experiments.dmc.micro import ScanPoint
from unicache_sim.experiments.dmc.runs import (
    EXTRA_LINES,
    PUSHED_LINES,
    SCAN_LINES,
    ListPoint,
    Progress,
)
from unicache_sim.experiments.dmc.whatif import MigrationMode, dmc_migration_cycles
from unicache_sim.experiments.mfc.read import run_mfc
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.spread import Spread

#: the SCU what-ifs: (migration mode, cllookup)
VARIANTS: tuple[tuple[MigrationMode, bool], ...] = (
    ("none", False),
    ("push", False),
    ("handoff", False),
    ("handoff", True),
)
#: machine model -> working set (MiB) of its default SCU run: the Opteron's MFC Figure 3
#: point where SCU gains (the modern models, e.g. ``epyc-2s:16``, take minutes a run)
DEFAULT_SCU_POINTS: dict[str, float] = {"opteron-16": 8.0}


@dataclass(frozen=True, slots=True)
class ScuPoint:
    """SCU on one model, in one what-if, over the seeds.

    :param model: the machine model.
    :param ws_mb: the working set.
    :param migration: the migration mode.
    :param lookup: whether the shim used cllookup.
    :param migration_cycles: one migration within an LLC group in this mode.
    :param migration_cycles_remote: the same across groups.
    :param speedup: unicache over linux.
    :param of_oracle: unicache over the oracle.
    :param migrations: unicache's migrations per file read.
    """

    model: str
    ws_mb: float
    migration: str
    lookup: bool
    migration_cycles: float
    migration_cycles_remote: float
    speedup: Spread
    of_oracle: Spread
    migrations: Spread


@dataclass(frozen=True, slots=True)
class DmcReport:
    """Everything ``unicache-sim dmc`` measured."""

    scan: tuple[ScanPoint, ...]
    pingpong: tuple[tuple[int, float], ...]
    lists: tuple[ListPoint, ...]
    scu: tuple[ScuPoint, ...]
    seeds: tuple[int, ...]


def run_scu(
    points: dict[str, float], seeds: tuple[int, ...], progress: Progress
) -> tuple[ScuPoint, ...]:
    """SCU's MFC read experiment (live path) per model, what-if and seed."""
    out = []
    for model, ws in points.items():
        topo = load_model(model)
        for mode, lookup in VARIANTS:
            speedups, of_oracle, migrations = [], [], []
            for seed in seeds:
                spec = MfcSpec(dmc_migration=mode, dmc_lookup=lookup, seed=seed)
                point = run_mfc(topo, spec, [ws])[0]
                speedups.append(point.speedup)
                of_oracle.append(point.of_oracle)
                migrations.append(point.get("unicache").migrations)
                progress(f"SCU {model} {mode}{'+lookup' if lookup else ''} seed {seed}")
            out.append(
                ScuPoint(
                    model,
                    ws,
                    mode,
                    lookup,
                    dmc_migration_cycles(topo, mode, remote=False),
                    dmc_migration_cycles(topo, mode, remote=True),
                    Spread.of(speedups),
                    Spread.of(of_oracle),
                    Spread.of(migrations),
                )
            )
    return tuple(out)


def steps(points: dict[str, float], seeds: int) -> int:
    """Progress steps of a whole run."""
    micro = len(SCAN_LINES) + len(PUSHED_LINES) + len(EXTRA_LINES)
    return micro + len(points) * len(VARIANTS) * seeds
