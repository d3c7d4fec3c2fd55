"""OBS-L ("Policy: Reducing cache interference"): which CPUs of a unit each vCPU runs on.

In a unit with more vCPUs than CPUs, the heavy vCPUs (clearly above the unit's average
cache weight) share the first CPUs, so that what co-runs on the other CPUs is light;
otherwise every vCPU may use the whole unit. The paper's tasks always run, so more tasks
than CPUs means they take turns; vCPUs idle between requests do not: while a unit's vCPUs
together keep fewer CPUs busy than it has, each runnable vCPU finds an idle CPU of the
unit, and pinning it to one CPU would only make it wait behind that CPU's other vCPUs
while another CPU idles (``unicache density`` measured it: latency tenants at 86x their
SLO on an overcommitted host). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from unicache.cpulist import format_list
from unicache.model import VcpuId
from unicache.topology import CacheUnit

#: CPUs' worth of slack under which vCPUs that always run still count as keeping every CPU
#: busy: their task clocks sum to a hair under the CPUs (the scheduler's own time, where a
#: slice ends against the interval), and without the slack OBS-L paired and unpaired them
#: on alternate rounds (``unicache-sim obs --scenario pairs``: 1.9999 of 2 CPUs, then 2.0)
SATURATION_SLACK = 0.02


def saturated(demand: float, cpus: int) -> bool:
    """Whether vCPUs that keep ``demand`` CPUs busy saturate ``cpus`` CPUs (within
    :data:`SATURATION_SLACK` per CPU)."""
    return demand >= cpus * (1.0 - SATURATION_SLACK)


def local_sets(
    unit: CacheUnit,
    members: list[VcpuId],
    weights: Mapping[VcpuId, float],
    trusted: frozenset[VcpuId],
    heavy_floor: float = 1e-4,
    heavy_margin: float = 0.25,
    busy: Mapping[VcpuId, float] | None = None,
) -> list[tuple[VcpuId, frozenset[int], str]]:
    """The CPU set of each vCPU OBS-X placed in ``unit``, with why.

    :param unit: the unit.
    :param members: the vCPUs placed in it.
    :param weights: their cache weights.
    :param trusted: the vCPUs whose weights the host measured.
    :param heavy_floor: below this heaviest weight nothing is paired (noise).
    :param heavy_margin: heavy means above ``average * (1 + margin)``.
    :param busy: the share of the last interval each vCPU ran (``None``: not known, every
        vCPU counts as always runnable, as the paper's tasks).
    :returns: (vCPU, CPUs, reason) per member.
    """
    cpus = sorted(unit.cpus)
    heaviest = max((weights.get(v, 0.0) for v in members), default=0.0)
    if len(members) <= len(cpus) or len(cpus) < 2 or heaviest < heavy_floor:
        why = f"OBS-X: vCPU kept in unit {unit.id} (cpus {format_list(unit.cpus)})"
        return [(v, unit.cpus, why) for v in members]
    demand = sum(busy.get(v, 0.0) for v in members) if busy is not None else math.inf
    if not saturated(demand, len(cpus)):
        why = (
            f"OBS-X: vCPU kept in unit {unit.id} (cpus {format_list(unit.cpus)}); OBS-L "
            f"shares no cpu: its {len(members)} vCPUs keep {demand:.3g} of {len(cpus)} cpus "
            "busy, so a runnable vCPU finds an idle one"
        )
        return [(v, unit.cpus, why) for v in members]
    if len({v.vm for v in members}) > 1 and not set(members) <= trusted:
        # pairing by weight would let one guest's word decide another VM's CPUs
        why = (
            f"OBS-X: vCPU kept in unit {unit.id} (cpus {format_list(unit.cpus)}); OBS-L "
            "pairs the vCPUs of several VMs only by weights the host measured"
        )
        return [(v, unit.cpus, why) for v in members]
    # OBS-L: heavy vCPUs (clearly above the unit's average weight) share the first CPUs,
    # so what co-runs on the other CPUs is light. Within each class the order is the
    # vCPU id, not the weight, and "clearly" is heavy_margin: noise between similar
    # vCPUs never moves them (hysteresis).
    average = sum(weights.get(v, 0.0) for v in members) / len(members)
    cut = average * (1.0 + heavy_margin)
    heavy = [v for v in members if weights.get(v, 0.0) > cut]
    light = [v for v in members if weights.get(v, 0.0) <= cut]
    per_cpu = -(-len(members) // len(cpus))
    out = []
    for slot, vcpu in enumerate(heavy + light):
        cpu = cpus[slot // per_cpu]
        kind = "heavy" if vcpu in heavy else "light"
        out.append(
            (
                vcpu,
                frozenset({cpu}),
                f"OBS-L: {kind} vCPU (weight {weights.get(vcpu, 0.0):.3g}, unit average "
                f"{average:.3g}) on cpu {cpu}: heavy vCPUs share cpus so co-runners are light",
            )
        )
    return out
