"""docs/reproduction.md's table: every evaluating figure of the five papers has a row, the
verdicts follow their stated rule, and the markdown keeps one row per line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from unicache_sim.repro.catalog import PAPER_FIGURES, experiments, not_attempted
from unicache_sim.repro.mfc import NOT_ATTEMPTED
from unicache_sim.repro.table import ReproRow, Verdict, gain_verdict, markdown, points_verdict
from unicache_sim.spread import Spread

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
PAPER_OF = {
    "scu-mfc-unifying-multicore-caches.md": "MFC",
    "os-observations-multicore.md": "OBS",
    "srm-buffer-llc-thrashing.md": "SRM",
    "dual-layered-file-cache-ccnuma.md": "NCC",
    "dmc-data-movement-control-powerpc.md": "DMC",
}
#: figures that evaluate no mechanism: diagrams, pseudo-code, data structures
NOT_EVALUATIONS = {
    ("MFC", "Figure 1"),
    ("MFC", "Figure 2"),
    ("OBS", "Figure 1"),
    ("OBS", "Figure 7"),
    ("SRM", "Figure 1"),
    ("SRM", "Figure 3"),
    ("SRM", "Figure 4"),
    ("SRM", "Figure 5"),
    ("SRM", "Figure 6"),
    ("SRM", "Figure 7"),
    ("DMC", "Figure 1"),
    ("DMC", "Figure 2"),
    ("NCC", "Figure 1"),
    ("NCC", "Figure 2"),
}


#: the captions of the seed papers (``_captions`` of each), for a clone without them
CAPTIONS = {
    "MFC": {f"Figure {n}" for n in range(1, 13)},
    "OBS": {f"Figure {n}" for n in range(1, 9)},
    "SRM": {f"Figure {n}" for n in range(1, 17)},
    "NCC": {"Figure 3", "Figure 4"} | {f"Table {n}" for n in range(1, 7)},
    "DMC": {f"Figure {n}" for n in range(1, 6)},
}


def _captions(text: str) -> set[str]:
    """Every "Figure N" / "Table N" that starts a caption line of a seed paper."""
    found = re.findall(r"^\**\s*(Figure|Table) (\d+)(?:[.:]?[\s*])", text, flags=re.MULTILINE)
    return {f"{kind} {n}" for kind, n in found}


def _covered(figure: str, rows: list[ReproRow], paper: str) -> bool:
    kind, n = figure.split()
    for row in rows:
        if row.paper != paper:
            continue
        # "Figure 3", "Figure 2(a)", "Figures 10-13", "Figures 14, 16", "Tables 3-5"
        m = re.match(r"(Figure|Table)s? (.*)", row.figure)
        if not m or m.group(1) != kind:
            continue
        for part in re.split(r",\s*", m.group(2)):
            lo, _, hi = re.sub(r"\(.*\)", "", part).partition("-")
            if lo.strip().isdigit() and int(lo) <= int(n) <= int(hi or lo):
                return True
    return False


def _all_rows() -> list[ReproRow]:
    """The rows figures writes: the not-attempted ones, and those of each experiment's
    report (named by what it covers; its values need its results)."""
    rows = list(not_attempted()) + list(NOT_ATTEMPTED)
    for exp in experiments(quick=False):
        rows += [ReproRow(p, f, "", "", "", "", Verdict.SHAPE) for p, f in exp.covers]
    return rows


def test_every_evaluating_figure_and_table_of_the_papers_has_a_row() -> None:
    rows = _all_rows()
    missing = [
        f"{paper} {figure}"
        for paper, figures in PAPER_FIGURES.items()
        for figure in figures
        if not _covered(figure, rows, paper)
    ]
    assert not missing, missing


def test_the_list_of_evaluating_figures_is_the_papers_captions() -> None:
    # the seed papers sit beside the checkout in the project's workspace; a clone elsewhere
    # checks the list against the captions copied here from them
    for name, paper in PAPER_OF.items():
        path = SEEDS / name
        captions = _captions(path.read_text()) if path.is_file() else CAPTIONS[paper]
        evaluating = {c for c in captions if (paper, c) not in NOT_EVALUATIONS}
        assert evaluating == set(PAPER_FIGURES[paper]), paper


def test_a_gain_within_a_quarter_of_the_papers_is_reproduced() -> None:
    assert gain_verdict(1.71, 1.60)[0] is Verdict.REPRODUCED
    assert gain_verdict(1.71, 1.40)[0] is Verdict.SHAPE
    assert gain_verdict(1.07, 1.06)[0] is Verdict.REPRODUCED
    assert gain_verdict(190.0, 1000.0)[0] is Verdict.SHAPE
    assert gain_verdict(3.81, 1.00)[0] is Verdict.NOT_REPRODUCED
    assert gain_verdict(1.07, 0.99)[0] is Verdict.NOT_REPRODUCED


def test_a_percentage_within_ten_points_is_reproduced_and_no_effect_is_not_a_shape() -> None:
    assert points_verdict(78.0, 70.0)[0] is Verdict.REPRODUCED
    assert points_verdict(22.0, 74.0)[0] is Verdict.SHAPE
    assert points_verdict(0.0, -41.0)[0] is Verdict.NOT_REPRODUCED
    assert points_verdict(30.0, -5.0)[0] is Verdict.NOT_REPRODUCED


def test_a_spread_shows_its_median_range_and_seeds() -> None:
    spread = Spread.of([1.2, 1.0, 1.5])
    assert spread.median == 1.2
    assert spread.text(unit="x") == "1.20x (1.00-1.50x, 3 seeds)"
    assert Spread.of([2.0]).text() == "2.00 (1 seed)"


def test_markdown_keeps_one_row_per_line_and_escapes_pipes() -> None:
    rows = [
        ReproRow(
            "MFC",
            "Figure 3",
            "a | b",
            "unicache-sim mfc",
            "1.71x",
            "1.6x\nmore",
            Verdict.REPRODUCED,
        ),
        ReproRow("DMC", "Figure 3", "scan", "", "-17%", "-", Verdict.NOT_ATTEMPTED, "no model"),
    ]
    text = markdown(rows, "# T")
    table_lines = [ln for ln in text.splitlines() if ln.startswith("| Figure 3")]
    assert len(table_lines) == 2
    assert "a \\| b" in table_lines[0] and "1.6x more" in table_lines[0]
    assert "not attempted: no model" in table_lines[1]
    assert "Rows: 1 reproduced, 1 not attempted (2 in all)." in text


def test_only_names_a_known_experiment_in_one_line() -> None:
    from unicache.errors import ConfigError

    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        experiments(True, ("nope",))
