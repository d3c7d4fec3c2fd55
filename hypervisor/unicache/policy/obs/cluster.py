"""Sharing-aware OBS-X: the vCPUs of a VM that read the same data stay in the fewest units.

The observations paper places vCPUs by cache weight alone ("Policy: Migrating across
caches"); the work it cites as its closest relative, Tam, Azimi and Stumm's thread
clustering (EuroSys'07, the paper's reference 1), groups threads that share data and
runs each group on one cache. unicache does the same for a VM that SCU leaves alone:

* spread over units, vCPUs that read the same chunks each fill their own unit's cache
  with a copy and fetch lines from one another's caches across the interconnect (the
  grid's `opteron-16` Zipf points lost 8 % that way, docs/PERFORMANCE.md);
* kept in one unit, they share one copy in one cache, as under a Linux that has not
  moved them apart; more busy vCPUs than a unit has CPUs fill the fewest units that
  hold them, in one NUMA node while it has room.

A VM SCU unifies needs a vCPU in every unit (its reads go to where their chunk is
cached), so clustering is only for VMs SCU leaves alone, and SCU predicts its gain over
the units OBS-X would spread the VM to (``ScuPolicy._step_aside``), never over the units
a cluster sits in.

What shares: the guest's report gives, per chunk, the bytes each vCPU read. The VM's
*shared fraction* is the share of its bytes read from chunks that two or more of its
vCPUs read in the interval. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from unicache.cpulist import format_list
from unicache.model import GuestReport, VcpuId
from unicache.topology import CacheUnit

#: a VM SCU leaves alone is clustered when at least this share of its reads is shared
SHARED_FRACTION_ENTER = 0.5
#: a clustered VM stays clustered while its shared fraction is at least this (hysteresis)
SHARED_FRACTION_STAY = 0.25
#: a vCPU busy for less than this share of the interval is idle: clustering moves only
#: the busy ones, and may swap an idle one out of the cluster's unit to make room
BUSY_FLOOR = 0.05


@dataclass(frozen=True, slots=True)
class ClusterMove:
    """One vCPU moved by clustering.

    :param vcpu: the vCPU.
    :param dst: the unit it goes to.
    :param reason: one line for the decision log.
    """

    vcpu: VcpuId
    dst: int
    reason: str


def shared_fractions(reports: Iterable[GuestReport]) -> dict[str, float]:
    """Per VM that read, the share of its bytes read from chunks several vCPUs read."""
    shared: dict[str, int] = {}
    total: dict[str, int] = {}
    for report in reports:
        for access in report.chunks:
            # vcpu_bytes is guest input: count each vCPU once, bytes never negative
            # (a record of one vCPU's reads needs no set to say so)
            vcpu_bytes = access.vcpu_bytes
            nbytes = max(access.bytes_read, 0)
            total[report.vm] = total.get(report.vm, 0) + nbytes
            if len(vcpu_bytes) >= 2 and len({v for v, n in vcpu_bytes if n > 0}) >= 2:
                shared[report.vm] = shared.get(report.vm, 0) + nbytes
    return {vm: shared.get(vm, 0) / n for vm, n in total.items() if n > 0}


def cluster_moves(
    members: Sequence[VcpuId],
    unit_of: Mapping[VcpuId, int],
    busy: Mapping[VcpuId, float],
    units: Sequence[CacheUnit],
    shared: float,
    vcpus_in: Mapping[int, int] | None = None,
) -> list[ClusterMove]:
    """Gather a VM's busy vCPUs into the fewest units whose CPUs hold them.

    The first unit of the cluster is the one holding most of the VM's busy vCPUs (then
    the most busy time, then the lowest id). While the cluster's units have fewer CPUs
    than the VM has busy vCPUs, the next unit joins: one in the first unit's NUMA node
    before any other (a line fetched from a cache in another node crosses the
    interconnect), then the one holding most of the VM's busy vCPUs, then the lowest id.
    A busy vCPU outside the cluster moves into a unit of it that has a CPU without a
    vCPU, or swaps places with an idle vCPU of the same VM there (never another VM's: one
    VM's reports steer only its own vCPUs). Busy vCPUs that do not fit stay.

    Thirty-two readers of the same files on ``epyc-2s`` (eight cores to a CCX) fill four
    CCXs of one socket, as Linux runs them; spread over sixteen CCXs of both sockets, each
    CCX cached its own copy and fetched the rest from the other socket's (0.95x of Linux,
    ``unicache-sim mfc --model epyc-2s --threads 32 --ws-mb 64``).

    :param members: the VM's vCPUs (all placed in ``unit_of``).
    :param unit_of: vCPU -> unit, for every vCPU on the host.
    :param busy: vCPU -> busy share of the interval.
    :param units: the host's units.
    :param shared: the VM's shared fraction (for the log).
    :param vcpus_in: unit -> the vCPUs ``unit_of`` has in it, where the caller keeps the
        count (``None``: counted here, a pass over ``unit_of``).
    :returns: the moves, in order (a swap is two moves).
    """
    where = {v: unit_of[v] for v in members if v in unit_of}
    active = sorted(
        (v for v in where if busy.get(v, 0.0) >= BUSY_FLOOR),
        key=lambda v: (-busy.get(v, 0.0), v),
    )
    if len(active) < 2:
        return []
    home = _cluster_units(active, where, busy, units)
    home_ids = {u.id for u in home}
    outside = [v for v in active if where[v] not in home_ids]
    if not outside:
        return []  # clustered already: the steady state costs no scan of the host
    if vcpus_in is None:
        vcpus_in = Counter(unit_of.values())
    room = {u.id: len(u.cpus) - vcpus_in.get(u.id, 0) for u in home}
    # the VM's idle vCPUs in the cluster's units, the idlest first, to swap out
    idle = sorted(
        (v for v in where if where[v] in home_ids and busy.get(v, 0.0) < BUSY_FLOOR),
        key=lambda v: (busy.get(v, 0.0), v),
    )
    names = ", ".join(f"{u.id} (cpus {format_list(u.cpus)})" for u in home)
    why = (
        f"OBS-X: {shared:.0%} of {active[0].vm}'s reads are of chunks several of its vCPUs "
        f"read and SCU leaves it alone: its {len(active)} busy vCPUs share "
        f"{'unit' if len(home) == 1 else 'units'} {names} and as few copies of their data "
        f"as their CPUs allow (thread clustering)"
    )
    moves: list[ClusterMove] = []
    for vcpu in outside:
        dst = next((u.id for u in home if room[u.id] > 0), None)
        if dst is not None:
            room[dst] -= 1
        elif idle:
            out = idle.pop(0)
            dst = where[out]
            moves.append(
                ClusterMove(
                    out,
                    where[vcpu],
                    f"OBS-X: idle vCPU makes room in unit {dst} "
                    f"for a busy vCPU of its VM (thread clustering)",
                )
            )
        else:
            break  # the cluster's CPUs all run busy vCPUs of the VM
        moves.append(ClusterMove(vcpu, dst, why))
    return moves


def _cluster_units(
    active: Sequence[VcpuId],
    where: Mapping[VcpuId, int],
    busy: Mapping[VcpuId, float],
    units: Sequence[CacheUnit],
) -> list[CacheUnit]:
    """The fewest units whose CPUs hold the busy vCPUs, the first unit's node first."""
    count: Counter[int] = Counter(where[v] for v in active)
    load: dict[int, float] = {}
    for v in active:
        load[where[v]] = load.get(where[v], 0.0) + busy.get(v, 0.0)
    # sort keys: busy vCPUs there, their busy time, unit id (lowest first)
    first = max(units, key=lambda u: (count[u.id], load.get(u.id, 0.0), -u.id))
    # sort keys: the first unit's node first, then busy vCPUs there, then unit id
    rest = sorted(
        (u for u in units if u.id != first.id),
        key=lambda u: (u.node != first.node, -count[u.id], u.id),
    )
    home = [first]
    for unit in rest:
        if sum(len(u.cpus) for u in home) >= len(active):
            break
        home.append(unit)
    return home
