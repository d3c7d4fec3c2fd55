"""The cache load per unit as each VM sees it, for OBS-X's rebalance and first placement,
from one pass (and the vCPUs and CPU time per unit, kept as vCPUs are placed).

The observations paper's "Policy: Migrating across caches" moves an overweight vCPU from
the heaviest unit to the lightest by their cache loads. OBS weighs a vCPU by a
host-measured weight (which every VM's placement may count) or by its own guest's
reported bytes (which only that VM's placement counts, so a forged count never steers
another VM's pinning). So each VM sees its own loads: the host-measured weights of every
unit plus its own guest-reported ones. Summing every vCPU for every VM costs VMs x vCPUs
(2 million additions at 1,000 VMs); this computes every view from one pass and gives
each VM's view at the cost of its own vCPUs and the host-measured ones after them.

The views are the same floats as the simple sum in ``unit_of`` order (the simple form in
tests/policy/test_obs_views.py), bit for bit, so every comparison and tie decides as
before: a unit without the viewer's guest-reported vCPUs has the host-measured sum; a unit with them
continues the host-measured prefix sum from the viewer's first such vCPU in the same
order. Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from unicache.model import VcpuId
from unicache.topology import CacheUnit


class LoadViews:
    """Every VM's view of the units' cache loads, and the units' members.

    :param unit_ids: every unit.
    :param unit_of: vCPU -> its unit (its order is the order the loads add up in).
    :param weights: cache weights.
    :param trusted: vCPUs whose weights the host measured.
    """

    def __init__(
        self,
        unit_ids: list[int],
        unit_of: Mapping[VcpuId, int],
        weights: Mapping[VcpuId, float],
        trusted: frozenset[VcpuId],
    ) -> None:
        self._weights = weights
        self._trusted = trusted
        #: each unit's vCPUs, in ``unit_of`` order
        self.members: dict[int, list[VcpuId]] = {u: [] for u in unit_ids}
        # per unit, the host-measured sum before each member (the loads' own order)
        self._prefix: dict[int, list[float]] = {u: [0.0] for u in unit_ids}
        # per VM, its vCPUs in each unit (all of them), and where its guest-reported ones
        # first appear in each unit's members
        self._own: dict[str, dict[int, list[VcpuId]]] = {}
        self._own_at: dict[str, dict[int, list[int]]] = {}
        self._first_reported: dict[str, dict[int, int]] = {}
        # per unit, where its host-measured members are
        self._measured_at: dict[int, list[int]] = {u: [] for u in unit_ids}
        #: the loads counting every weight (the all-trusted view)
        self.everyone: dict[int, float] = dict.fromkeys(unit_ids, 0.0)
        #: the host-measured loads (what a VM without guest-reported weights sees)
        self.measured: dict[int, float] = dict.fromkeys(unit_ids, 0.0)
        for vcpu, unit in unit_of.items():
            self.add(vcpu, unit)

    def add(self, vcpu: VcpuId, unit: int) -> None:
        """Count one more vCPU, placed after every other in ``unit_of`` order (OBS-X's
        first placement adds each new vCPU as it places it)."""
        seq = self.members[unit]
        prefix = self._prefix[unit]
        weight = self._weights.get(vcpu, 0.0)
        self.everyone[unit] += weight
        if vcpu in self._trusted:
            prefix.append(prefix[-1] + weight)
            self._measured_at[unit].append(len(seq))
        else:
            prefix.append(prefix[-1])
            self._first_reported.setdefault(vcpu.vm, {}).setdefault(unit, len(seq))
        self._own.setdefault(vcpu.vm, {}).setdefault(unit, []).append(vcpu)
        self._own_at.setdefault(vcpu.vm, {}).setdefault(unit, []).append(len(seq))
        seq.append(vcpu)
        self.measured[unit] = prefix[-1]

    def loads(self, viewer: str | None) -> dict[int, float]:
        """The loads ``viewer``'s vCPUs see (``None``: every weight)."""
        if viewer is None:
            return dict(self.everyone)
        out = dict(self.measured)
        for unit, first in self._first_reported.get(viewer, {}).items():
            # from the viewer's first guest-reported vCPU on: its own vCPUs and the
            # host-measured ones, in their places
            measured = self._measured_at[unit]
            if not measured:
                # no host-measured weight in the unit (software counters): the prefix
                # before the first, then the viewer's own, in their order (all after it)
                total = self._prefix[unit][first]
                for vcpu in self._own[viewer][unit]:
                    total += self._weights.get(vcpu, 0.0)
                out[unit] = total
                continue
            later = measured[bisect.bisect_left(measured, first) :]
            places = sorted({*later, *self._own_at[viewer][unit]})
            members = self.members[unit]
            total = self._prefix[unit][first]
            for place in places:
                if place >= first:
                    total += self._weights.get(members[place], 0.0)
            out[unit] = total
        return out

    def own(self, viewer: str, unit: int) -> list[VcpuId]:
        """``viewer``'s vCPUs in ``unit``, in ``unit_of`` order."""
        return self._own.get(viewer, {}).get(unit, [])

    def viewers(self) -> list[str]:
        """The VMs with vCPUs in some unit."""
        return list(self._own)


class UnitTally:
    """Per unit, the vCPUs ``unit_of`` places there and the CPU time they ran, kept as
    vCPUs are added at its end (summed in ``unit_of`` order, as OBS-X's ``_demand`` sums
    it: the same floats)."""

    def __init__(
        self,
        units: tuple[CacheUnit, ...],
        unit_of: Mapping[VcpuId, int] | None = None,
        busy: Mapping[VcpuId, float] | None = None,
    ) -> None:
        self.count: dict[int, int] = {u.id: 0 for u in units}
        self.ran: dict[int, float] = {u.id: 0.0 for u in units}
        for vcpu, unit in (unit_of or {}).items():
            self.add(vcpu, unit, busy)

    def add(self, vcpu: VcpuId, unit: int, busy: Mapping[VcpuId, float] | None) -> None:
        self.count[unit] += 1
        self.ran[unit] += (busy or {}).get(vcpu, 0.0)
