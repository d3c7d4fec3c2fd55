"""How ``unicache-sim figures`` runs the papers' experiments: every seed of every
experiment as one Dask task, then each experiment's report (rows and plots) over its results.

An experiment is a small object (:class:`ReproExperiment`) that lists its tasks (frozen,
picklable dataclasses with a ``run()``: one seed of one point each) and turns their results
into rows of the paper-versus-unicache table and PNG figures. All tasks of all experiments
go to one cluster at once, longest first, so two cores stay busy to the end.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from unicache.errors import UnicacheError

from unicache_sim.dask_client import dask_client
from unicache_sim.repro.table import ReproRow


class ReproTask(Protocol):
    """One seed of one point of an experiment (a frozen dataclass: hashable, picklable)."""

    @property
    def label(self) -> str:
        """Short human name (progress and errors)."""
        ...

    @property
    def cost(self) -> float:
        """Relative run time, to start the longest first (any unit, same in an experiment)."""
        ...

    def run(self) -> object:
        """Simulate it and return its result (picklable)."""
        ...


@dataclass(frozen=True, slots=True)
class ReproReport:
    """What an experiment gives the table and the figures directory."""

    rows: tuple[ReproRow, ...]
    figures: tuple[Path, ...] = ()


class ReproExperiment(Protocol):
    """One paper's experiments (or a part of them)."""

    name: str
    #: (paper, figure) pairs its report has rows for
    covers: tuple[tuple[str, str], ...]

    def tasks(self, seeds: tuple[int, ...]) -> Sequence[ReproTask]:
        """Every task, one per seed of each point."""
        ...

    def report(self, results: Mapping[Any, object], figures: Path) -> ReproReport:
        """Rows and plots from ``results`` (task -> its result), plots written under
        ``figures``."""
        ...


def run_task(task: ReproTask) -> object:
    """A Dask task: run it, and drop any native engine on this thread (PyO3 engines may
    only be dropped on the thread that made them)."""
    result = task.run()
    gc.collect()
    return result


def run_tasks(
    tasks: Sequence[ReproTask],
    workers: int,
    scheduler: str | None = None,
    progress: Callable[[ReproTask], None] | None = None,
) -> dict[ReproTask, object]:
    """Run every task on a Dask cluster, longest first.

    :raises UnicacheError: if a task fails in the simulator (naming it).
    """
    from distributed import as_completed

    order = sorted(tasks, key=lambda t: -t.cost)
    done: dict[ReproTask, object] = {}
    with dask_client(workers, scheduler, "figures") as client:
        futures = client.map(run_task, order, pure=False)
        task_of = {f.key: t for f, t in zip(futures, order, strict=True)}
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            task = task_of[future.key]
            try:
                done[task] = future.result()
            except UnicacheError as err:
                raise UnicacheError(f"figures task {task.label}: {err}") from err
            except Exception as err:  # a bug: keep the worker's traceback, name the task
                err.add_note(f"figures task: {task.label}")
                raise
            if progress is not None:
                progress(task)
    return done
