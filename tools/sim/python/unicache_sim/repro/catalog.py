"""What ``unicache-sim figures`` runs, and the papers' figures it does not attempt (with why).

:func:`experiments` lists the experiment objects (:mod:`unicache_sim.repro.run`); every
figure or table of the five papers that evaluates a mechanism and that no experiment covers
is a row of :func:`not_attempted`, so docs/reproduction.md names all of them.
"""

from __future__ import annotations

from unicache.errors import ConfigError

from unicache_sim.repro.colors import ColorsReplicasExperiment
from unicache_sim.repro.dmc import DmcExperiment
from unicache_sim.repro.mfc import MfcExperiment
from unicache_sim.repro.ncc import NccIozoneExperiment
from unicache_sim.repro.obs import ObsExperiment
from unicache_sim.repro.run import ReproExperiment
from unicache_sim.repro.srm_cases import SrmCasesExperiment
from unicache_sim.repro.table import ReproRow, Verdict

#: every figure and table of the five papers that evaluates a mechanism (the papers'
#: diagrams, pseudo-code and data-structure figures left out); the table has a row for each
PAPER_FIGURES: dict[str, tuple[str, ...]] = {
    "MFC": tuple(f"Figure {n}" for n in range(3, 13)),
    "OBS": ("Figure 2", "Figure 3", "Figure 4", "Figure 5", "Figure 6", "Figure 8"),
    "SRM": ("Figure 2", *(f"Figure {n}" for n in range(8, 17))),
    "NCC": ("Figure 3", "Figure 4", *(f"Table {n}" for n in range(1, 7))),
    "DMC": ("Figure 3", "Figure 4", "Figure 5"),
}


def experiments(quick: bool, only: tuple[str, ...] | None = None) -> list[ReproExperiment]:
    """The experiments to run, all or those named in ``only``.

    :raises ConfigError: on a name that is not an experiment.
    """
    every: list[ReproExperiment] = [
        MfcExperiment(quick),
        ObsExperiment(quick),
        ColorsReplicasExperiment(quick),
        NccIozoneExperiment(quick),
        SrmCasesExperiment(quick),
        DmcExperiment(quick),
    ]
    if only is None:
        return every
    names = {e.name: e for e in every}
    for name in only:
        if name not in names:
            raise ConfigError(f"--only: no experiment {name!r} (known: {', '.join(names)})")
    return [names[n] for n in dict.fromkeys(only)]


def _row(paper: str, figure: str, what: str, paper_value: str, why: str) -> ReproRow:
    return ReproRow(paper, figure, what, "", paper_value, "-", Verdict.NOT_ATTEMPTED, why)


def not_attempted() -> list[ReproRow]:
    """The figures and tables no experiment covers (MFC's own are in :mod:`.mfc`)."""
    return [
        _row(
            "OBS",
            "Figure 8",
            "OBS-F frequency policies",
            "energy and time per policy",
            "unicache has no frequency policy (OBS-F is not part of the design)",
        ),
        _row(
            "SRM",
            "Figures 8-9",
            "hash-join and TPC-H queries beside scans",
            "slowdowns cut by SRM",
            "no database workload in the simulator",
        ),
        _row(
            "SRM",
            "Figures 10-12",
            "FFT, MM, LU, mergesort beside grep or tar, two and four cores on an LLC",
            "slowdowns 64% -> 28% on average, LLC misses cut 34-85%",
            "FFT, MM, LU and tar are not modelled; Figure 13's set (mergesort beside 1-3 "
            "greps, unicache-sim srm --case corunners) stands for them",
        ),
        _row(
            "SRM",
            "Figure 14",
            "access-pattern changes: diff loads what grep reads, and the reverse",
            "smaller time cuts than the same reader's",
            "needs a tree of small files read in two orders; the simulator's readers scan "
            "one file",
        ),
        _row(
            "SRM",
            "Figure 15",
            "PostMark page-cache hit ratio against memory size",
            "SRM's buffer keeps the hit ratio",
            "the simulator has no page-cache reclaim",
        ),
        _row(
            "NCC",
            "Table 2",
            "tar, gcc, cscope alone and together",
            "-0.5% alone, +6.7% together",
            "no build or indexing workload in the simulator",
        ),
        _row(
            "NCC",
            "Table 6",
            "Apache sendfile of a 40 MB file",
            "+7.4% bandwidth",
            "no network path in the simulator",
        ),
    ]
