"""OBS's two step-asides together: which VMs float this round, the actions that take
(a release or a widened CPU set), and the decision log's ``OBS_NO_GAIN`` lines.

Both bound OBS-X's pins ("Policy: Migrating across caches") by the gain they predict:

* :mod:`unicache.policy.obs.gain`: a VM whose pins would keep no two cache-heavy vCPUs
  apart keeps its own CPUs (released, back to the journaled affinity, if OBS pinned it);
* :mod:`unicache.policy.obs.queue`: a VM whose pins would make it wait for its unit's
  CPUs longer than its cache could save floats over its NUMA node (its CPU set widened
  to the node's CPUs).

Both apply only to VMs SCU does not place (a VM SCU unifies needs a vCPU pinned in every
unit it sends reads to) and OBS does not cluster (their gain is the data they share). A
VM the first rule floats keeps the CPUs it had, which are one unit where ``unicache
place`` pinned it: the second rule widens them when that unit's wait outweighs its
cache time. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unicache.model import Action, PinVcpu, Refusal, ReleaseVcpu, VcpuId
from unicache.policy.obs.gain import OBS_STEP_ASIDE, pinning_gain
from unicache.policy.obs.queue import MissCost, confinement
from unicache.topology import CacheUnit


@dataclass(frozen=True, slots=True)
class StepAside:
    """This round's step-asides.

    :param floating: vCPUs OBS-L does not pin this round.
    :param actions: the releases and widened CPU sets.
    :param refusals: one ``OBS_NO_GAIN`` per floating VM.
    :param quiet: :attr:`~unicache.policy.obs.gain.PinningGain.quiet`, for the next round.
    :param crowded: :attr:`~unicache.policy.obs.queue.Confinement.crowded`, the same.
    :param crowded_rounds: :attr:`~unicache.policy.obs.queue.Confinement.rounds`, the same.
    """

    floating: frozenset[VcpuId]
    actions: tuple[Action, ...]
    refusals: tuple[Refusal, ...]
    quiet: Mapping[str, int]
    crowded: frozenset[str]
    crowded_rounds: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class AsideInputs:
    """What the step-asides read of the round.

    :param vcpus_of: every live VM's vCPUs.
    :param unit_of: every vCPU's unit (OBS-X's placement this round).
    :param current: every vCPU's CPU set now.
    :param weights: cache weights.
    :param busy: busy shares of the last interval.
    :param trusted: vCPUs whose weights the host measured.
    :param unplaced: VMs SCU does not place.
    :param clustered: VMs OBS clusters.
    """

    vcpus_of: Mapping[str, Sequence[VcpuId]]
    unit_of: Mapping[VcpuId, int]
    current: Mapping[VcpuId, frozenset[int]]
    weights: Mapping[VcpuId, float]
    busy: Mapping[VcpuId, float]
    trusted: frozenset[VcpuId]
    unplaced: frozenset[str]
    clustered: frozenset[str]


def step_aside(
    units: Sequence[CacheUnit],
    round_: AsideInputs,
    quiet: Mapping[str, int],
    crowded: frozenset[str],
    crowded_rounds: Mapping[str, int],
    pinned: frozenset[VcpuId],
    heavy_floor: float,
    miss_cost: MissCost,
    wait_margin: float,
) -> StepAside:
    """Both step-asides over one round (the previous round's ``quiet``, ``crowded``,
    ``crowded_rounds`` and ``pinned``; the options' floor, miss cost and margin)."""
    pinned_vms = frozenset(v.vm for v in pinned)
    gain = pinning_gain(
        round_.vcpus_of,
        round_.weights,
        round_.trusted,
        round_.unplaced,
        round_.clustered,
        quiet,
        heavy_floor,
        pinned_vms,
    )
    # a VM the first rule floats keeps its own CPUs, which may be one unit (``unicache
    # place`` pins there): the second rule weighs that unit's wait too
    candidates = {
        vm: vcpus
        for vm, vcpus in round_.vcpus_of.items()
        if vm in round_.unplaced and vm not in round_.clustered
    }
    # what a pin could save: only the second rule's candidates are weighed
    weights = round_.weights
    stall = {
        v: miss_cost.stall_share(weights[v], v in round_.trusted)
        for vcpus in candidates.values()
        for v in vcpus
        if v in weights
    }
    crowd = confinement(
        units,
        round_.unit_of,
        round_.busy,
        stall,
        candidates,
        crowded,
        crowded_rounds,
        pinned_vms,
        wait_margin,
    )
    vms = gain.floating | crowd.crowded
    floating = frozenset(v for vm in vms for v in round_.vcpus_of[vm])
    actions: list[Action] = [
        ReleaseVcpu(vcpu, gain.reasons[vcpu.vm])
        for vcpu in sorted(pinned & floating)
        if vcpu.vm in gain.floating - crowd.crowded
    ]
    for vcpu, cpus in sorted(crowd.node_cpus.items()):
        if not cpus <= round_.current.get(vcpu, frozenset()):
            reason = crowd.reasons[vcpu.vm]
            actions.append(PinVcpu(vcpu, cpus, round_.unit_of[vcpu], reason))
    reasons = {**gain.reasons, **crowd.reasons}  # a crowded VM: the wait is why
    refusals = tuple(Refusal(OBS_STEP_ASIDE, why) for _vm, why in sorted(reasons.items()))
    return StepAside(floating, tuple(actions), refusals, gain.quiet, crowd.crowded, crowd.rounds)
