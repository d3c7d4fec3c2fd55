"""How the density experiment's points run: one point (a seed of an N of a mix under a
policy), the task that simulates it, and the runner that sends points to Dask and takes
what the cache already has.

A point's result depends on its parameters only (every draw is seeded by them), so it is
the same bit for bit on a local cluster or a remote one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cache
from typing import Any

from unicache.errors import UnicacheError
from unicache.topology import Topology
from unicache.topology.toml import load_model

from unicache_sim.dask_client import dask_client
from unicache_sim.density.point import (
    DensityTiming,
    PointOutcome,
    PointSpec,
    run_point,
)
from unicache_sim.density.tenants import Flavor


@dataclass(frozen=True, slots=True)
class DensityPoint:
    """One task: one seed of one N of one mix under one policy.

    :param stage: service, alone or search.
    :param model: the machine model.
    :param mix: the mix's name (``alone`` for the first two stages).
    :param n: VMs.
    :param policy: linux or unicache.
    :param seed: the seed.
    :param flavors: the VMs' flavor definitions, in arrival order.
    :param rates: (flavor, requests per second per vCPU) of the latency tenants.
    :param overcommit: vCPUs per CPU the host admits.
    :param timing: how long the point runs.
    """

    stage: str
    model: str
    mix: str
    n: int
    policy: str
    seed: int
    flavors: tuple[Flavor, ...]
    rates: tuple[tuple[str, float], ...]
    overcommit: float
    timing: DensityTiming

    @property
    def label(self) -> str:
        """Short human name of the point."""
        return f"{self.stage} {self.mix} N={self.n} {self.policy} s{self.seed}"

    def spec(self) -> PointSpec:
        """The simulator's spec of this point."""
        return PointSpec(self.flavors, self.policy, self.seed, self.rates, self.overcommit,
                         self.timing)


@dataclass(frozen=True, slots=True)
class PointResult:
    """What one task returns.

    :param point: the point.
    :param outcome: what it measured.
    """

    point: DensityPoint
    outcome: PointOutcome


def run_task(point: DensityPoint) -> PointResult:
    """Simulate one point (a Dask task)."""
    # A point makes millions of short-lived objects and no cycle that lives past it, so
    # the collector's passes during it find nothing (about 1.5 % of a point's CPU); one
    # pass after it frees what a cycle kept. Where the objects live changes, not a result.
    enabled = gc.isenabled()
    gc.disable()
    try:
        result = PointResult(point, run_point(_model(point.model), point.spec()))
    finally:
        if enabled:
            gc.enable()
    # the native engine may only be dropped on the thread that made it (see grid/sweep.py)
    gc.collect()
    return result


@cache
def _model(name: str) -> Topology:
    return load_model(name)


class Runner:
    """Runs points on Dask, taking what the cache has.

    :param workers: worker processes of a local cluster.
    :param scheduler: an existing scheduler's address (``None``: a local cluster).
    :param lookup: the cache: a point's result, if it has one.
    :param store: called with each new result (the cache's writer).
    :param progress: called with each result, and whether it came from the cache.
    """

    def __init__(
        self,
        workers: int,
        scheduler: str | None = None,
        lookup: Callable[[DensityPoint], PointResult | None] | None = None,
        store: Callable[[PointResult], None] | None = None,
        progress: Callable[[PointResult, bool], None] | None = None,
    ) -> None:
        self.workers = workers
        self.scheduler = scheduler
        self.lookup = lookup or (lambda _p: None)
        self.store = store or (lambda _r: None)
        self.progress = progress or (lambda _r, _c: None)
        self.cached = 0
        self.client: Any = None
        self._stack = ExitStack()
        self._as_completed: Any = None
        self._point_of: dict[str, tuple[DensityPoint, int]] = {}

    def __enter__(self) -> Runner:
        from distributed import as_completed

        self._stack = ExitStack()
        self.client = self._stack.enter_context(
            dask_client(self.workers, self.scheduler, "density")
        )
        self._as_completed = as_completed
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def run(self, batches: Iterable[Sequence[DensityPoint]],
            on_batch: Callable[[Sequence[PointResult]], Iterable[Sequence[DensityPoint]]]
            | None = None) -> None:
        """Run batches of points; when a batch is whole, ``on_batch`` gets its results
        (in the batch's order) and may return more batches to run."""
        ac = self._as_completed()
        pending: dict[int, tuple[Sequence[DensityPoint], dict[DensityPoint, PointResult]]] = {}
        ready: list[int] = []
        next_id = 0

        def submit(batch: Sequence[DensityPoint]) -> None:
            nonlocal next_id
            bid = next_id
            next_id += 1
            done: dict[DensityPoint, PointResult] = {}
            pending[bid] = (batch, done)
            for point in batch:
                hit = self.lookup(point)
                if hit is not None:
                    self.cached += 1
                    done[point] = hit
                    self.progress(hit, True)
                    continue
                future = self.client.submit(run_task, point, pure=False)
                self._point_of[future.key] = (point, bid)
                ac.add(future)
            if len(done) == len(batch):
                ready.append(bid)

        def finish(bid: int) -> None:
            batch, done = pending.pop(bid)
            if on_batch is not None:
                for more in on_batch([done[p] for p in batch]):
                    submit(more)

        for batch in batches:
            submit(batch)
        while ready or pending:
            while ready:
                finish(ready.pop(0))
            if not pending:
                break
            future = next(ac)
            point, bid = self._point_of.pop(future.key)
            try:
                result: PointResult = future.result()
            except UnicacheError as err:
                raise UnicacheError(f"density point {point.label}: {err}") from err
            except Exception as err:  # a bug: keep the worker's traceback, name the point
                err.add_note(f"density point: {point.label}")
                raise
            self.store(result)
            self.progress(result, False)
            batch, done = pending[bid]
            done[point] = result
            if len(done) == len(batch):
                ready.append(bid)


class SerialRunner(Runner):
    """Runs points one after another in this process, without Dask or a cache (a handful
    of points: the live run's prediction)."""

    def __init__(self) -> None:
        super().__init__(1)

    def __enter__(self) -> SerialRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, batches: Iterable[Sequence[DensityPoint]],
            on_batch: Callable[[Sequence[PointResult]], Iterable[Sequence[DensityPoint]]]
            | None = None) -> None:
        """As :meth:`Runner.run`, one point at a time."""
        queue = list(batches)
        while queue:
            results = [run_task(point) for point in queue.pop(0)]
            for result in results:
                self.progress(result, False)
            if on_batch is not None:
                queue.extend(on_batch(results))
