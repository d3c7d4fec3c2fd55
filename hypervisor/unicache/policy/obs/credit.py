"""OBS-C ("Policy: Addressing fairness"): CPU time credited from heavy to light co-runners.

A light vCPU sharing a unit with heavy ones gets ``t_credit = w_light / (w_largest -
w_smallest) * t_overlap * c_credit`` more CPU time, which the heavy ones give up together;
the daemon applies it as a cgroup ``cpu.weight`` (or a libvirt domain's ``cpu_shares``)
around :data:`BASE_CPU_WEIGHT`.

A weight the host did not measure is its guest's word (reported bytes, issue #12), so
:func:`credit_weights_by_vm` judges each VM's vCPUs by the weights of its own guest and
the host-measured ones only, as OBS-X and OBS-L do: a forged count never changes another
VM's ``cpu.weight``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from unicache.model import VcpuId

#: "Addressing fairness": c_credit = 2 % was the preferred trade-off
C_CREDIT = 0.02
#: cpu.weight of a vCPU without credit. cgroup v2 weights are relative among siblings
#: (the vCPU cgroups of one VM), so 1000 instead of the kernel's default 100 gives OBS-C's
#: credits of a fraction of a percent a resolution of 0.1 %.
BASE_CPU_WEIGHT = 1000
#: why a vCPU keeps the base weight when no co-runner in its view is heavy
NO_HEAVY = "OBS-C: no heavy co-runner, default weight"


def credit_weights(
    members: list[VcpuId],
    weights: Mapping[VcpuId, float],
    busy: Mapping[VcpuId, float],
    c_credit: float = C_CREDIT,
    heavy_floor: float = 1e-4,
    heavy_margin: float = 0.25,
) -> list[tuple[VcpuId, int, str]]:
    """The cpu.weight of each vCPU of one unit, with why.

    :param members: the unit's vCPUs.
    :param weights: their cache weights.
    :param busy: the fraction of the interval each ran.
    :param c_credit: the share of CPU time reserved for credit.
    :param heavy_floor: no credit while the heaviest co-runner weighs less (noise).
    :param heavy_margin: heavy above ``average * (1 + margin)``, light below
        ``average / (1 + margin)`` (OBS-L's classes).
    :returns: (vCPU, weight, reason), sorted.
    """
    running = [v for v in members if busy.get(v, 0.0) > 0.0]
    values = [weights.get(v, 0.0) for v in running]
    largest = max(values, default=0.0)
    smallest = min(values, default=0.0)
    spread = largest - smallest
    if len(running) < 2 or spread <= 0.0 or largest < heavy_floor:
        return [(v, BASE_CPU_WEIGHT, NO_HEAVY) for v in members]
    # heavy and light as OBS-L classes them; the heavy vCPUs give the credit together,
    # so noise between similar heavy vCPUs never changes who gives
    average = sum(values) / len(values)
    margin = 1.0 + heavy_margin
    heavy = [v for v in running if weights.get(v, 0.0) > average * margin]
    light = [v for v in running if weights.get(v, 0.0) * margin < average]
    if not heavy or not light:
        why = "OBS-C: no clearly heavier co-runner, default weight"
        return [(v, BASE_CPU_WEIGHT, why) for v in members]
    overlap_with = max(busy.get(v, 0.0) for v in heavy)
    out: list[tuple[VcpuId, int, str]] = []
    given = 0.0
    for vcpu in light:
        overlap = min(busy.get(vcpu, 0.0), overlap_with)
        # t_credit = w_light / (w_largest - w_smallest) * t_overlap * c_credit
        credit = min(weights.get(vcpu, 0.0) / spread, 1.0) * overlap * c_credit
        given += credit
        value = round(BASE_CPU_WEIGHT * (1.0 + credit))
        out.append((vcpu, value, f"OBS-C: credit {credit:.2%} of CPU time from heavy co-runners"))
    share = given / len(heavy)
    for vcpu in heavy:
        value = round(BASE_CPU_WEIGHT * (1.0 - share))
        out.append((vcpu, value, f"OBS-C: gives {share:.2%} of CPU time to light co-runners"))
    credited = {v for v, _, _ in out}
    out.extend((v, BASE_CPU_WEIGHT, "OBS-C: no credit") for v in members if v not in credited)
    return sorted(out)


def credit_weights_by_vm(
    members: Sequence[VcpuId],
    weights: Mapping[VcpuId, float],
    busy: Mapping[VcpuId, float],
    trusted: frozenset[VcpuId],
    c_credit: float = C_CREDIT,
    heavy_floor: float = 1e-4,
    heavy_margin: float = 0.25,
) -> list[tuple[VcpuId, int, str]]:
    """:func:`credit_weights` of one unit, each VM's vCPUs judged in that VM's view.

    A VM's view holds its own vCPUs and the co-runners whose weights the host measured
    (``trusted``); a co-runner known only by its guest's reported bytes is left out, so
    it can neither take credit from nor give credit to another VM's vCPUs. Where every
    weight is the host's, or the unit holds one VM, there is one view: :func:`credit_weights`.

    :param members: the unit's vCPUs.
    :param weights: their cache weights.
    :param busy: the fraction of the interval each ran.
    :param trusted: the vCPUs whose weights the host measured.
    :param c_credit: the share of CPU time reserved for credit.
    :param heavy_floor: no credit while the heaviest co-runner weighs less (noise).
    :param heavy_margin: heavy and light as OBS-L classes them.
    :returns: (vCPU, weight, reason), sorted; one per member.
    """
    viewers = sorted({v.vm for v in members})
    if len(viewers) < 2 or set(members) <= trusted:
        return credit_weights(list(members), weights, busy, c_credit, heavy_floor, heavy_margin)
    out: list[tuple[VcpuId, int, str]] = []
    # each view in the members' order, from one pass: the host-measured members' places
    # and each VM's own (a view costs what it holds, not every member)
    measured = [i for i, v in enumerate(members) if v in trusted]
    reported: dict[str, list[int]] = {}
    for i, v in enumerate(members):
        if v not in trusted:
            reported.setdefault(v.vm, []).append(i)
    for viewer in viewers:
        seen = [members[i] for i in sorted(measured + reported.get(viewer, []))]
        if len(seen) < 2:  # one vCPU has no co-runner in its view (credit_weights' answer)
            out += [(v, BASE_CPU_WEIGHT, NO_HEAVY) for v in seen if v.vm == viewer]
            continue
        judged = credit_weights(seen, weights, busy, c_credit, heavy_floor, heavy_margin)
        out += [(v, value, why) for v, value, why in judged if v.vm == viewer]
    # one vCPU per entry: sorted by the vCPU's own fields (VcpuId's order) in one key
    # each, not a Python comparison per pair
    return sorted(out, key=lambda e: (e[0].vm, e[0].index))
