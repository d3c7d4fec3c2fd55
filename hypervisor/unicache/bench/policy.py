"""``unicache bench policy``: time and memory of the policy round at fleet scale.

The round is the product's (:class:`unicache.policy.round.UnicachePolicy`: OBS, SRM-buffer,
NCC, then SCU), driven by the product's loop (:func:`unicache.loop.run_rounds_sync`, as
replay and the simulator drive it) over a synthetic host whose observations are
:mod:`unicache.bench.policy_load`'s (its docstring defines the load). Per point (VMs x
chunks):

* ``p50_ms`` / ``p99_ms`` / ``max_ms``: wall time of the policy's decision per timed round
  (from the host's observation handed over to the decision handed back: the host's own
  work is not timed), and the same in CPU time of the thread (``cpu_p50_ms``...), which
  other jobs on a shared machine disturb less;
* ``state_bytes``: the round state's size after the timed rounds (every object reachable
  from it, counted once, ``sys.getsizeof``), and ``bytes_per_chunk`` = that / the chunks
  SCU's table tracks;
* ``peak_rss_mib``: the process's peak resident memory (``ru_maxrss``) after the point;
* ``gc_p50_ms`` / ``gc_max_ms`` / ``gc_full_ms``: the daemon's collector pacing
  (:mod:`unicache.gcpace`) between rounds, as the daemon runs it after each round: what
  it costs is said here and kept out of the rounds' times, as the daemon keeps it out of
  its rounds (without it, CPython's own full collections land in rounds: 300-400 ms at
  1 M chunks).

The table is seeded, warm-up rounds run untimed (OBS places every vCPU, SRM and NCC
start), then ``rounds`` timed rounds, which include SCU's agings (every
``update_period`` rounds). ``unicache bench policy`` (:mod:`unicache.cli.bench`) runs it.
"""

from __future__ import annotations

import gc
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from unicache.bench import policy_load as load
from unicache.errors import ConfigError
from unicache.gcpace import GcPacer, GcPass
from unicache.host.ports import ActResult
from unicache.loop import run_rounds_sync
from unicache.model import Action, Observation, PinVcpu
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import UnitView
from unicache.policy.scu.options import scu_options_for
from unicache.policy.scu.policy import ScuState
from unicache.topology import Unify
from unicache.topology.toml import load_model

#: untimed rounds before the timed ones (OBS places the vCPUs, SRM and NCC start)
WARMUP_ROUNDS = 3
#: the JSON document's schema version
SCHEMA = 1
#: the seeded chunks' use count is below ``1 << SEED_USE_BITS`` (one int object of the
#: size a 64-bit count takes), which bounds the rounds before an aging would empty it
SEED_USE_BITS = 62


@dataclass(frozen=True, slots=True)
class PointResult:
    """One size measured.

    :param vms: VMs.
    :param chunks: chunks asked for.
    :param tracked_chunks: chunks SCU's table tracked after the timed rounds.
    :param records_per_round: chunk records in one round's reports.
    :param rounds: timed rounds.
    :param p50_ms: median wall time per round.
    :param p99_ms: 99th percentile wall time per round.
    :param max_ms: the slowest round.
    :param cpu_p50_ms: median thread CPU time per round.
    :param cpu_p99_ms: 99th percentile thread CPU time per round.
    :param state_bytes: the round state's size.
    :param bytes_per_chunk: ``state_bytes / tracked_chunks``.
    :param peak_rss_mib: the process's peak RSS after the point.
    :param gc_p50_ms: median wall time of the collector's pass between two timed rounds
        (:mod:`unicache.gcpace`, off the rounds' clock, as in the daemon).
    :param gc_max_ms: the longest of those passes.
    :param gc_full_ms: the full pass over every object (the first, after the table is
        seeded; the daemon runs one every ``gcpace.FULL_EVERY_S`` between rounds).
    :param round_ms: every timed round's wall time.
    """

    vms: int
    chunks: int
    tracked_chunks: int
    records_per_round: int
    rounds: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_p50_ms: float
    cpu_p99_ms: float
    state_bytes: int
    bytes_per_chunk: float
    peak_rss_mib: float
    gc_p50_ms: float = 0.0
    gc_max_ms: float = 0.0
    gc_full_ms: float = 0.0
    round_ms: tuple[float, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class PolicyBenchResult:
    """A ``bench policy`` run.

    :param model: the machine model the policy ran for.
    :param units: its cache units.
    :param load: the load's parameters (``policy_load.LoadSpec`` without the sizes).
    :param points: every size measured.
    """

    model: str
    units: int
    load: dict[str, Any]
    points: tuple[PointResult, ...]

    def as_json(self) -> dict[str, Any]:
        """The JSON document (``schema`` names its version)."""
        return {
            "schema": SCHEMA,
            "bench": "policy",
            "model": self.model,
            "units": self.units,
            "load": self.load,
            "points": [
                {k: getattr(p, k) for k in PointResult.__dataclass_fields__} for p in self.points
            ],
        }


class _FleetHost:
    """The synthetic fleet as a host of the loop: observes the next round, applies the
    round's pins to the fleet, and stamps the time between the two (the decision).

    Between rounds it runs the daemon's collector pacing (:mod:`unicache.gcpace`), as the
    daemon does after each round: what it costs is measured apart (``gc_*``)."""

    name = "synthetic-fleet"

    def __init__(self, observations: Iterator[Observation], fleet: Any) -> None:
        self.observations = observations
        self.fleet = fleet
        self.collector = GcPacer()
        self.passes: list[GcPass] = []
        self.handed = (0.0, 0.0)
        self.last = (0.0, 0.0)

    def observe(self) -> Observation | None:
        obs = next(self.observations, None)
        self.passes.append(self.collector.settle())
        self.handed = (time.perf_counter(), time.thread_time())
        return obs

    def act(self, actions: Sequence[Action]) -> ActResult:
        wall, cpu = time.perf_counter(), time.thread_time()
        self.last = (wall - self.handed[0], cpu - self.handed[1])
        self.fleet.apply(a for a in actions if isinstance(a, PinVcpu))
        return ActResult(applied=tuple(actions))


def run_point(
    spec: Any,
    rounds: int,
    model: str = "epyc-2s",
    tick: Callable[[str], None] | None = None,
) -> PointResult:
    """Measure one size.

    :param spec: a ``policy_load.LoadSpec``.
    :param rounds: timed rounds.
    :param model: the machine model.
    :param tick: called after each round with what it was ("warm-up", "timed").
    """
    topo = load_model(model)
    base = scu_options_for(topo, Unify.LLC)
    # the table must be allowed to hold every chunk the load tracks
    options = replace(base, max_chunks=max(base.max_chunks, spec.chunks))
    policy = UnicachePolicy(topo, Unify.LLC, scu_options=options)
    fleet = load.SyntheticFleet(spec, frozenset(c.cpu for c in topo.cpus), options.chunk_size)
    # no seeded chunk ages out before the timed rounds end (policy_load's docstring)
    agings = (WARMUP_ROUNDS + rounds) // options.update_period + 1
    if agings + 1 > SEED_USE_BITS:
        most = (SEED_USE_BITS - 1) * options.update_period - 1 - WARMUP_ROUNDS
        raise ConfigError(f"--rounds must be at most {most}: the seeded chunks would age out")
    table = MfcTable(options.params, [UnitView(u.id, u.capacity_bytes) for u in policy.units])
    fleet.seed_table(table, 1 << (agings + 1))
    replicas = fleet.seed_replicas(policy.ncc_params, options.chunk_size)
    state = RoundState(scu=ScuState(table=table), replicas=replicas)
    observations = (fleet.observation(t) for t in range(1, WARMUP_ROUNDS + rounds + 1))
    host = _FleetHost(observations, fleet)
    walls: list[float] = []
    cpus: list[float] = []
    try:
        for done, result in enumerate(run_rounds_sync(host, policy, state), start=1):
            state = result.state
            if done > WARMUP_ROUNDS:
                walls.append(host.last[0] * 1e3)
                cpus.append(host.last[1] * 1e3)
            if tick is not None:
                tick("warm-up" if done <= WARMUP_ROUNDS else "timed")
    finally:
        host.collector.release()
    # the passes before the timed rounds (the first is full) and between them
    full = [p.seconds * 1e3 for p in host.passes if p.full]
    between = [p.seconds * 1e3 for p in host.passes[WARMUP_ROUNDS + 1 :]]
    tracked = len(state.scu.table.chunks) if state.scu.table is not None else 0
    size = deep_size(state)
    return PointResult(
        vms=spec.vms,
        chunks=spec.chunks,
        tracked_chunks=tracked,
        records_per_round=spec.records_per_round,
        rounds=len(walls),
        p50_ms=round(statistics.median(walls), 3),
        p99_ms=round(_percentile(walls, 0.99), 3),
        max_ms=round(max(walls), 3),
        cpu_p50_ms=round(statistics.median(cpus), 3),
        cpu_p99_ms=round(_percentile(cpus, 0.99), 3),
        state_bytes=size,
        bytes_per_chunk=round(size / max(tracked, 1), 1),
        peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        gc_p50_ms=round(statistics.median(between), 3) if between else 0.0,
        gc_max_ms=round(max(between), 3) if between else 0.0,
        gc_full_ms=round(max(full), 3) if full else 0.0,
        round_ms=tuple(round(w, 3) for w in walls),
    )


def run_policy_bench(
    vms: Sequence[int],
    chunks: Sequence[int],
    rounds: int = 100,
    changed_fraction: float = 0.005,
    zipf_s: float = 1.0,
    vcpus: int = 2,
    seed: int = 1,
    model: str = "epyc-2s",
    tick: Callable[[str], None] | None = None,
) -> PolicyBenchResult:
    """Every (VMs, chunks) point, smallest first.

    :raises ConfigError: on a size or option out of range (one line).
    """
    if not vms or not chunks or min(vms) < 1 or min(chunks) < 1:
        raise ConfigError("--vms and --chunks must be >= 1")
    if rounds < 1:
        raise ConfigError("--rounds must be >= 1")
    if not 0.0 < changed_fraction <= 1.0:
        raise ConfigError("--changed-fraction must be in (0, 1]")
    if zipf_s < 0 or vcpus < 1:
        raise ConfigError("--zipf-s must be >= 0 and --vcpus >= 1")
    try:
        topo = load_model(model)
    except Exception as err:  # an unknown model: one line
        raise ConfigError(f"unknown --model {model!r}: {err}") from err
    points = []
    for n_vms in sorted(set(vms)):
        for n_chunks in sorted(set(chunks)):
            spec = load.LoadSpec(n_vms, n_chunks, vcpus, changed_fraction, zipf_s, seed)
            points.append(run_point(spec, rounds, model, tick))
    params = {
        "vcpus_per_vm": vcpus,
        "changed_fraction": changed_fraction,
        "zipf_s": zipf_s,
        "seed": seed,
        "warmup_rounds": WARMUP_ROUNDS,
        "file_chunks": load.FILE_CHUNKS,
        "numa_every": load.NUMA_EVERY,
        "color_every": load.COLOR_EVERY,
        "python": sys.version.split()[0],
    }
    units = len(topo.units(Unify.LLC))
    return PolicyBenchResult(model, units, params, tuple(points))


def deep_size(root: object) -> int:
    """Bytes of every object reachable from ``root`` (each counted once; classes, modules
    and functions are not state and are not followed)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    skip = (type, ModuleType, Callable)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):  # type: ignore[arg-type]
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif isinstance(obj, str | bytes | int | float | bool | bytearray | memoryview):
            continue
        else:
            stack.extend(gc.get_referents(obj))
    return total


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile, nearest rank (over 40 rounds, p99 is the slowest round)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-int(q * len(ordered) * 1000) // 1000) - 1))]


def plot(result: PolicyBenchResult, path: Path) -> None:
    """Round time (p50, p99) against chunks and against VMs, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_chunks, by_vms) = plt.subplots(1, 2, figsize=(11, 4.2))
    vms = sorted({p.vms for p in result.points})
    chunks = sorted({p.chunks for p in result.points})
    for n in vms:
        pts = sorted((p for p in result.points if p.vms == n), key=lambda p: p.chunks)
        by_chunks.plot([p.chunks for p in pts], [p.p99_ms for p in pts], "o-", label=f"{n} VMs p99")
        by_chunks.plot(
            [p.chunks for p in pts], [p.p50_ms for p in pts], "x--", label=f"{n} VMs p50"
        )
    for m in chunks:
        pts = sorted((p for p in result.points if p.chunks == m), key=lambda p: p.vms)
        by_vms.plot([p.vms for p in pts], [p.p99_ms for p in pts], "o-", label=f"{m:,} chunks p99")
        by_vms.plot([p.vms for p in pts], [p.p50_ms for p in pts], "x--", label=f"{m:,} chunks p50")
    for ax, xlabel in ((by_chunks, "tracked chunks"), (by_vms, "VMs")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("policy round, ms")
        ax.axhline(100, color="red", lw=0.8, ls=":")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fraction = result.load["changed_fraction"]
    fig.suptitle(
        f"unicache policy round on {result.model} ({result.units} units), "
        f"changed fraction {fraction:g}, Zipf s={result.load['zipf_s']:g}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
