"""How a command's results leave it: the progress bar over its long work, the note of the
plots it wrote, and its ``--json`` document on stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from unicache_sim.cli.common import stderr


class Steps:
    """A running progress bar as the simulation sees it: call it with the label of each
    step done."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task

    def __call__(self, label: str) -> None:
        self.progress.update(self.task, advance=1, description=label)

    def add(self, steps: int) -> None:
        """Lengthen the bar by ``steps`` (work found on the way, the grid's confirmations)."""
        total = self.progress.tasks[self.task].total or 0
        self.progress.update(self.task, total=total + steps)

    def stop(self) -> None:
        """Take the bar off the screen now (before a message on an interruption)."""
        self.progress.stop()


def counted_columns() -> tuple[ProgressColumn, ...]:
    """The bar with done / total and the time spent and left, for work of minutes (fresh
    columns each call: a column belongs to one bar)."""
    return (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())


@contextmanager
def progress_steps(
    total: int,
    description: str = "simulating",
    *,
    columns: Sequence[ProgressColumn] = (),
    completed: int = 0,
    transient: bool = True,
) -> Iterator[Steps]:
    """A progress bar on stderr of ``total`` steps, ``completed`` of them already done;
    yields its :class:`Steps`. ``columns``: rich's default ones when empty."""
    with Progress(*columns, console=stderr, transient=transient) as progress:
        yield Steps(progress, progress.add_task(description, total=total, completed=completed))


def emit_json(doc: object) -> None:
    """Print a command's ``--json`` document on stdout (indented, one trailing newline)."""
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def note_plots(paths: Iterable[Path | None]) -> None:
    """Tell where the plots went (a ``None``: no plot was asked for)."""
    for path in paths:
        if path is not None:
            Console().print(f"plot written to {path}")
