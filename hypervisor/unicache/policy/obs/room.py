"""Where OBS-X may put a vCPU ("Policy: Migrating across caches"): the units with room (a
CPU to spare while the host has a CPU for every vCPU, CPU time to spare on an
oversubscribed host, any on a saturated one: the paper's always-running tasks), whether a
new vCPU may stay where it runs, and the periodic rebalance's one move.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from unicache.model import VcpuId
from unicache.policy.obs.local import saturated
from unicache.policy.obs.rebalance import rebalance_view
from unicache.policy.obs.views import LoadViews, UnitTally
from unicache.topology import CacheUnit


class UnitRoom:
    """The room of a host's cache units, for OBS-X's steps.

    :param units: the cache units vCPUs are placed in.
    :param imbalance_margin: the share of a unit's CPU time above the host's that still
        counts as room (``ObsOptions.imbalance_margin``).
    """

    def __init__(self, units: tuple[CacheUnit, ...], imbalance_margin: float) -> None:
        self.units = units
        self.imbalance_margin = imbalance_margin

    def with_room(
        self,
        unit_of: Mapping[VcpuId, int],
        busy: Mapping[VcpuId, float] | None = None,
        need: float = 0.0,
        tally: UnitTally | None = None,
    ) -> tuple[CacheUnit, ...]:
        """The units a vCPU may move into: while the host has a CPU for every vCPU, only
        units with a CPU to spare (two vCPUs sharing a CPU while another idles would cost
        more than any cache gain). On an oversubscribed host whose vCPUs leave CPU time
        idle (``busy``: each vCPU's share of the last interval), the units whose CPU time
        stays within the host's share with ``need`` more (the host's busy CPUs per CPU,
        plus ``imbalance_margin``): vCPUs confined to a unit cannot use another unit's
        idle CPUs, so cache load must not stack their demand in one unit while others
        idle (the least loaded unit when none has room). A saturated host (the paper's
        always-running tasks): every unit, OBS-L pairs heavy and light vCPUs on the
        shared CPUs. Empty when every CPU has its vCPU."""
        if len(unit_of) > sum(len(u.cpus) for u in self.units):
            demand = self.demand(unit_of, busy, tally)
            if demand is None or need <= 0.0:  # an idle vCPU adds no CPU time anywhere
                return self.units
            share = min(1.0, self.share(demand) + self.imbalance_margin)
            roomy = tuple(
                u for u in self.units if demand[u.id] + need <= share * len(u.cpus) + 1e-9
            )
            # sort keys: busy CPUs per CPU, unit id
            return roomy or (min(self.units, key=lambda u: (demand[u.id] / len(u.cpus), u.id)),)
        if tally is not None:
            return tuple(u for u in self.units if tally.count[u.id] < len(u.cpus))
        return tuple(u for u in self.units if count_in(unit_of, u.id) < len(u.cpus))

    def demand(
        self,
        unit_of: Mapping[VcpuId, int],
        busy: Mapping[VcpuId, float] | None,
        tally: UnitTally | None = None,
    ) -> dict[int, float] | None:
        """CPUs' worth of time the vCPUs of each unit ran in the last interval; ``None``
        when not known or when they kept every CPU of the host busy (saturated)."""
        if busy is None:
            return None
        if tally is not None:
            demand = dict(tally.ran)
        else:
            demand = {u.id: 0.0 for u in self.units}
            for vcpu, unit in unit_of.items():
                demand[unit] += busy.get(vcpu, 0.0)
        if saturated(sum(demand.values()), sum(len(u.cpus) for u in self.units)):
            return None
        return demand

    def share(self, demand: Mapping[int, float]) -> float:
        """The host's busy CPUs per CPU."""
        return sum(demand.values()) / sum(len(u.cpus) for u in self.units)

    def may_stay(
        self,
        unit: CacheUnit,
        unit_of: Mapping[VcpuId, int],
        loads: Mapping[int, float],
        weight: float,
        fair_load: float,
        fair_count: int,
        busy: Mapping[VcpuId, float] | None = None,
        need: float = 0.0,
        tally: UnitTally | None = None,
    ) -> bool:
        """Whether a new vCPU may stay in the unit it runs in: the unit has a CPU to spare
        (or the host is oversubscribed), stays within its fair share of vCPUs, and is the
        lightest unit it could go to or stays within its fair share of cache load (with
        ``imbalance_margin``)."""
        room = self.with_room(unit_of, busy, need, tally)
        count = tally.count[unit.id] if tally is not None else count_in(unit_of, unit.id)
        if unit not in room or count >= fair_count:
            return False
        if loads[unit.id] <= min(loads[u.id] for u in room):
            return True
        return loads[unit.id] + weight <= fair_load * (1.0 + self.imbalance_margin)

    def rebalance(
        self,
        unit_of: dict[VcpuId, int],
        weights: Mapping[VcpuId, float],
        trusted: frozenset[VcpuId],
        kept: frozenset[VcpuId] = frozenset(),
        busy: Mapping[VcpuId, float] | None = None,
        homes: Mapping[VcpuId, frozenset[int]] | None = None,
    ) -> tuple[VcpuId, int, int, str] | None:
        """The best move of one overweight vCPU, each VM's vCPUs judged by the loads as
        that VM sees them (:mod:`.obsviews`); one view for all where every weight is the
        host's own measurement. A vCPU moves only within its home nodes (``homes``,
        :mod:`.obshome`)."""
        views = LoadViews([u.id for u in self.units], unit_of, weights, trusted)
        viewers: list[str | None] = [None]
        if not set(unit_of) <= trusted:
            viewers = [*sorted(views.viewers())]
        # what does not depend on the viewer: the units with room, and their CPU time
        room = self.with_room(unit_of, busy)
        demand = self.demand(unit_of, busy)
        if len(unit_of) <= sum(len(u.cpus) for u in self.units):
            demand = None  # a CPU for every vCPU: no CPU-time test (_with_room)
        # the host's busy share per CPU with the margin: once, not once per view
        share = 0.0
        if demand is not None:
            share = min(1.0, self.share(demand) + self.imbalance_margin)
        best: tuple[float, VcpuId, int, int, str] | None = None
        for viewer in viewers:
            move = rebalance_view(
                self.imbalance_margin,
                views,
                viewer,
                weights,
                kept,
                room,
                demand,
                busy,
                share,
                homes or {},
            )
            if move is not None and (best is None or move[:2] < best[:2]):
                best = move
        return None if best is None else best[1:]


def count_in(unit_of: Mapping[VcpuId, int], unit: int) -> int:
    """The vCPUs in ``unit``."""
    return sum(1 for u in unit_of.values() if u == unit)
