"""``unicache-sim dmc``'s runs: the three microbenchmarks over their x-axes, and SCU on
DMC hardware (a what-if) on several machine models, several seeds each.

The SCU runs are the MFC experiment on the product's path (``--path live``) with the
what-if options of :class:`~unicache_sim.experiments.mfc.read.MfcSpec`
(``dmc_migration``, ``dmc_lookup``), so every figure is unicache's loop on a machine that
does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from unicache.topology.toml import load_model

from unicache_sim.experiments.dmc.micro import ScanPoint, linked_list, pingpong, scan
from unicache_sim.experiments.dmc.whatif import MigrationMode, dmc_migration_cycles
from unicache_sim.experiments.mfc.read import run_mfc
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.spread import Spread

#: Figure 3's segment sizes, Figure 4's pushed lines, Figure 5's extra lines
SCAN_LINES = (1, 2, 4, 8)
PUSHED_LINES = tuple(range(9))
EXTRA_LINES = (0, 1, 2, 4, 8)
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

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ListPoint:
    """Figure 5 at one number of extra lines, over the seeds.

    :param extra: extra lines modified under the lock.
    :param lw: cycles per operation, plain loads and stores.
    :param cmsg: cycles per operation, in a cmsg handler.
    :param faster: 1 - cmsg / lw, per seed.
    """

    extra: int
    lw: Spread
    cmsg: Spread
    faster: Spread


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


def run_micro(
    seeds: tuple[int, ...], progress: Progress
) -> tuple[tuple[ScanPoint, ...], tuple[tuple[int, float], ...], tuple[ListPoint, ...]]:
    """Figures 3-5. The scan and the ping-pong have nothing random (contiguous memory,
    one program order); the list draws its issuers and operations from each seed."""
    scans = []
    for n in SCAN_LINES:
        scans.append(scan(n))
        progress(f"Figure 3, {n} line(s)")
    trips = []
    for k in PUSHED_LINES:
        trips.append((k, pingpong(k)))
        progress(f"Figure 4, {k} pushed")
    lists = []
    for extra in EXTRA_LINES:
        lw = [linked_list(extra, False, s) for s in seeds]
        cm = [linked_list(extra, True, s) for s in seeds]
        lists.append(
            ListPoint(
                extra,
                Spread.of(lw),
                Spread.of(cm),
                Spread.of([1 - c / w for c, w in zip(cm, lw, strict=True)]),
            )
        )
        progress(f"Figure 5, {extra} extra")
    return tuple(scans), tuple(trips), tuple(lists)


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
