"""OBS-X's periodic rebalance as one VM sees the loads: one overweight vCPU from the
heaviest unit to the lightest it may go to.

The observations paper's "Policy: Migrating across caches": "Periodically, the policy
migrates an overweight task from the heaviest cache to the lightest." A vCPU moves only
into a unit with room (``UnitRoom.with_room``, :mod:`~.room`) on its home nodes
(:mod:`~.home`), and only where the move lowers the heaviest load.
:meth:`~.room.UnitRoom.rebalance` asks every view (:mod:`~.views`) and takes the best move. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from unicache.model import VcpuId
from unicache.policy.obs.home import at_home
from unicache.policy.obs.views import LoadViews
from unicache.topology import CacheUnit


def rebalance_view(
    imbalance_margin: float,
    views: LoadViews,
    viewer: str | None,
    weights: Mapping[VcpuId, float],
    kept: frozenset[VcpuId],
    room: tuple[CacheUnit, ...],
    demand: Mapping[int, float] | None,
    busy: Mapping[VcpuId, float] | None = None,
    share: float = 0.0,
    homes: Mapping[VcpuId, frozenset[int]] | None = None,
) -> tuple[float, VcpuId, int, int, str] | None:
    """The best move of one overweight vCPU as ``viewer`` sees the loads: from the
    heaviest unit to the lightest unit with room on the vCPU's home nodes, only where it
    lowers the heaviest load past ``imbalance_margin`` and (on an oversubscribed host)
    the unit has the CPU time for it (``share``: the host's busy CPUs per CPU, with the
    margin). Returns (how far the vCPU's weight is from half the gap, the vCPU, from, to,
    why), or None."""
    loads = views.loads(viewer)  # every unit's (the views are of the host's units)
    # the heaviest: the highest load, then the lowest unit id (deterministic ties); found
    # in C, as this runs once per VM
    values = list(loads.values())
    top = max(values)
    if values.count(top) == 1:
        heavy = list(loads)[values.index(top)]
    else:
        heavy = min(unit for unit, load in loads.items() if load == top)
    if not room or top <= 0.0:  # no load: nothing to level
        return None
    average = loads[heavy] / len(views.members[heavy])
    # a clustered vCPU stays with the vCPUs it shares data with; a view moves only
    # vCPUs its loads may move (its own VM's, or every one in the all-trusted view)
    movable = views.members[heavy] if viewer is None else views.own(viewer, heavy)
    overweight = [v for v in movable if weights.get(v, 0.0) > average and v not in kept]
    # each vCPU to the lightest unit with room on its home nodes (policy.obs.home;
    # every unit for one without a home)
    useful: list[tuple[float, VcpuId, int, float]] = []
    # the lightest unit with room per home (a VM's vCPUs mostly share one): sort keys
    # load, then unit id
    lightest: dict[frozenset[int] | None, CacheUnit | None] = {}
    for v in overweight:
        home = (homes or {}).get(v)
        if home not in lightest:
            # (unit ids are unique: the tuples never compare their units)
            fits = [(loads[u.id], u.id, u) for u in room if at_home(u, home)]
            lightest[home] = min(fits)[2] if fits else None
        dst = lightest[home]
        if dst is None:
            continue
        light, weight = dst.id, weights.get(v, 0.0)
        gap = loads[heavy] - loads[light]
        if heavy == light or gap <= imbalance_margin * loads[heavy]:
            continue
        # only moves that lower the heaviest load: light + w < heavy
        if loads[light] + weight >= loads[heavy]:
            continue
        # ... and, on an oversubscribed host with CPU time idle, that the lightest unit
        # has the CPU time for it (_with_room; share: the host's busy CPUs per CPU, with
        # the margin)
        cpus = len(dst.cpus)
        if demand is not None and (demand[light] + (busy or {}).get(v, 0.0) > share * cpus + 1e-9):
            continue
        # sort keys: distance of w from half the gap (best leveller), then vCPU id
        useful.append((abs(gap / 2 - weight), v, light, gap))
    if not useful:
        return None
    _, vcpu, light, gap = min(useful, key=lambda c: (c[0], c[1]))
    why = (
        f"OBS-X: rebalance moved overweight vCPU (weight {weights.get(vcpu, 0.0):.3g} > "
        f"unit average {average:.3g}) from heaviest unit {heavy} "
        f"(load {loads[heavy]:.3g}) to lightest unit {light} (load {loads[light]:.3g})"
    )
    return abs(gap / 2 - weights.get(vcpu, 0.0)), vcpu, heavy, light, why
