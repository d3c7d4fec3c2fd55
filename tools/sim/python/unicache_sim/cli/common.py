"""What the ``unicache-sim`` commands share: the error console, the one-line user error,
seed lists, and the table and JSON of findings (``obs``, ``srm --case``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text
from unicache.errors import UnicacheError

from unicache_sim.experiments.findings import Finding

#: progress bars and errors go to stderr, results to stdout
stderr = Console(stderr=True)


def user_error(error: Exception) -> NoReturn:
    """A user error (a bad option, an unreadable file, an unreachable scheduler): one line
    on stderr, exit 2; the message is printed as text, never read as markup."""
    stderr.print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True)
    raise typer.Exit(2)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``5`` (seeds 1-5), ``1-5`` or ``1,3,7``.

    :raises UnicacheError: on anything else, or fewer than one seed.
    """
    try:
        if text.isdigit():
            seeds = tuple(range(1, int(text) + 1))
        elif "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            seeds = tuple(range(lo, hi + 1))
        else:
            seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise UnicacheError(f"--seeds wants N, A-B or a list, not {text!r}") from err
    if not seeds:
        raise UnicacheError("--seeds names no seed")
    return seeds


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


@contextmanager
def progress_steps(total: int) -> Iterator[Callable[[str], None]]:
    """A transient progress bar on stderr of ``total`` steps; yields the step callback,
    which advances it and shows the label of the step just done."""
    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("simulating", total=total)

        def step(label: str) -> None:
            progress.update(task, advance=1, description=label)

        yield step


def emit_findings(
    findings: list[Finding],
    head: Mapping[str, object],
    title: str,
    as_json: bool,
    plot: Path | None,
) -> None:
    """Print findings: JSON (``head`` and the findings) or a table, then where the plot went."""
    if as_json:
        sys.stdout.write(json.dumps({**head, "findings": findings_doc(findings)}, indent=2) + "\n")
        return
    print_findings(findings, title)
    if plot is not None:
        Console().print(f"plot written to {plot}")
