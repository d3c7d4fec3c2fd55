"""The findings of ``obs`` and ``srm --case`` as a command prints them: a table, or JSON
with each finding's median and range."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from unicache_sim.cli.output import emit_json, note_plots
from unicache_sim.experiments.findings import Finding


def findings_doc(findings: list[Finding]) -> list[dict[str, object]]:
    """Findings as JSON objects, with their median and range."""
    return [
        {**asdict(f), "median": f.spread.median, "low": f.spread.low, "high": f.spread.high}
        for f in findings
    ]


def print_findings(findings: list[Finding], title: str) -> None:
    """A table of findings: figure, quantity, the paper's value, median [min, max]."""
    table = Table(
        title=title,
        caption="median over seeds, \\[min, max]; ratios per seed against the baseline of "
        "that seed",
    )
    for col in ("figure", "quantity", "paper", "unicache-sim"):
        table.add_column(col)
    for f in findings:
        mid, low, high = f.spread.median, f.spread.low, f.spread.high
        table.add_row(f.figure, f.quantity, f.paper, f"{mid:.3g} [{low:.3g}, {high:.3g}]")
    Console().print(table)


def emit_findings(
    findings: list[Finding],
    head: Mapping[str, object],
    title: str,
    as_json: bool,
    plot: Path | None,
) -> None:
    """Print findings: JSON (``head`` and the findings) or a table, then where the plot went."""
    if as_json:
        emit_json({**head, "findings": findings_doc(findings)})
        return
    print_findings(findings, title)
    note_plots([plot])
