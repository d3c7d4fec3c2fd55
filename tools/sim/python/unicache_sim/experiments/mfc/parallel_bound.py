"""Upper bounds on what unification can reach with many readers: MFC §6.3's parallel set-up.

Software cache unification serves a read from the cache of the chunk's unit, so the
reader must run there. With more readers than one unit's CPUs, readers of the same unit
wait for one another, and every move costs the CPU it leaves the migration (the
simulator's rule, ``Engine``: "the migration ran on the old CPU"). This module bounds the
throughput any placement of the product's kind can reach, optimistically:

* every read is served at the speed of the unit's cache: the core's own private stack
  for a unit of one core (``--unify l2``); for an LLC unit, the reader's own private
  stack for its share of the unit's chunks (one core's in the unit's), the LLC for the
  rest (a sibling's private cache or the LLC itself: the same crossbar);
* chunks are spread evenly over the units (uniform popularity, the set-up's), so the
  unit of the next read is uniform;
* a move costs ``migration_cycles`` inside an LLC group and ``migration_cycles_remote``
  across groups (MFC §4.5 on ``opteron-16``), nothing else;
* a unit's CPUs serve their queue first come, first served, no CPU idles while a reader
  waits for it, and nothing else runs.

Two figures come out: the *CPU bound* (every CPU busy with reads and moves, no wait),
and the *queue bound*, the same closed network simulated with its waits (readers of one
unit queue for its CPUs while other units idle). Each reads ``file_bytes`` per read; the
ratio to Linux uses the ``linux`` baseline of ``unicache_sim.experiments.mfc.read`` at the
same point. docs/simulator.md ("The parallel set-up") shows both for ``opteron-16``.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass

from unicache.errors import ConfigError
from unicache.topology import Topology, Unify

from unicache_sim.experiments.mfc.spec import FILE_BYTES


@dataclass(frozen=True, slots=True)
class ParallelBound:
    """What unification can reach with ``readers`` readers, at best.

    :param readers: reader threads.
    :param unify: the unification level.
    :param units: cache units.
    :param cpus_per_unit: CPUs that can serve one unit's reads.
    :param read_cycles: CPU cycles of one read at the unit's cache speed (mean).
    :param move_cycles: CPU cycles of the moves per read (mean over the next unit).
    :param cpu_bound_gb_s: every CPU busy with reads and moves, no wait (GB/s).
    :param queue_bound_gb_s: the same with the waits of a closed network (GB/s).
    """

    readers: int
    unify: str
    units: int
    cpus_per_unit: int
    read_cycles: float
    move_cycles: float
    cpu_bound_gb_s: float
    queue_bound_gb_s: float


def parallel_bound(
    topo: Topology,
    unify: Unify,
    readers: int,
    file_bytes: int = FILE_BYTES,
    reads: int = 200_000,
    seed: int = 1,
) -> ParallelBound:
    """Bound the throughput of ``readers`` readers of chunks spread over ``unify`` units.

    :raises ConfigError: if the model lacks a clock, migration costs or cache bandwidths.
    """
    if topo.clock_ghz is None or topo.migration_cycles is None:
        raise ConfigError(f"model {topo.name} has no clock or migration cost")
    far = topo.migration_cycles_remote or topo.migration_cycles
    units = topo.units(unify)
    cpus_per_unit = min(len(u.cpus) for u in units)
    own = _read_cycles(topo, topo.private_levels()[-1].bandwidth_bytes_per_cycle, file_bytes)
    if unify is Unify.L2:
        read = own
    else:
        shared = _read_cycles(topo, topo.llc.bandwidth_bytes_per_cycle, file_bytes)
        read = own / cpus_per_unit + shared * (1 - 1 / cpus_per_unit)
    group_of = {u.id: u.llc_group for u in units}
    # mean move per read: the next unit is uniform; a move inside the LLC group is near
    same_group = {u.id: sum(1 for v in units if v.llc_group == u.llc_group) for u in units}
    move = sum(
        ((same_group[u.id] - 1) * topo.migration_cycles + (len(units) - same_group[u.id]) * far)
        / len(units)
        for u in units
    ) / len(units)
    hz = topo.clock_ghz * 1e9
    cpus = len(units) * cpus_per_unit
    cpu_bound = cpus * file_bytes / ((read + move) / hz) / 1e9
    queue_bound = _closed_network(
        readers, [u.id for u in units], group_of, cpus_per_unit, read,
        topo.migration_cycles, far, reads, seed,
    ) * file_bytes * hz / 1e9
    return ParallelBound(
        readers, unify.value, len(units), cpus_per_unit, read, move, cpu_bound, queue_bound
    )


def _read_cycles(topo: Topology, bandwidth: float | None, file_bytes: int) -> float:
    if not bandwidth:
        raise ConfigError(f"model {topo.name} has a cache level without a bandwidth")
    return file_bytes / bandwidth


def _closed_network(
    readers: int,
    unit_ids: list[int],
    group_of: dict[int, int],
    servers: int,
    read: float,
    near: float,
    far: float,
    reads: int,
    seed: int,
) -> float:
    """Reads per cycle of the closed network: each unit a FCFS queue of ``servers`` CPUs."""
    rng = random.Random(seed)
    queue: dict[int, deque[int]] = {u: deque() for u in unit_ids}
    idle = {u: servers for u in unit_ids}
    # time, order (FCFS among equal times), kind, the unit whose CPU is held, reader, and
    # where a moving reader goes
    events: list[tuple[float, int, str, int, int, int]] = []
    order = 0

    def push(time: float, kind: str, unit: int, reader: int, dst: int = -1) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (time, order, kind, unit, reader, dst))

    def serve(time: float, unit: int) -> None:
        while idle[unit] and queue[unit]:
            idle[unit] -= 1
            push(time + read, "read", unit, queue[unit].popleft())

    for reader in range(readers):
        queue[unit_ids[reader % len(unit_ids)]].append(reader)
    for unit in unit_ids:
        serve(0.0, unit)
    done, now = 0, 0.0
    while done < reads:
        now, _, kind, unit, reader, dst = heapq.heappop(events)
        if kind == "read":
            done += 1
            dst = rng.choice(unit_ids)
            if dst == unit:
                idle[unit] += 1
                queue[unit].append(reader)
                serve(now, unit)
            else:  # the move holds the CPU it leaves
                cost = near if group_of[dst] == group_of[unit] else far
                push(now + cost, "moved", unit, reader, dst)
        else:
            idle[unit] += 1
            serve(now, unit)
            queue[dst].append(reader)
            serve(now, dst)
    return done / now
