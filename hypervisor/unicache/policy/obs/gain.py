"""OBS's step-aside: vCPUs are pinned only where pinning keeps cache-heavy vCPUs apart.

OBS-X's gain is the observations paper's ("Policy: Migrating across caches"): tasks that
weigh on the cache are spread over the caches, so no two of them share one. That gain
needs two heavy vCPUs. With at most one cache-heavy vCPU on the host there is nothing to
keep apart, and a pin can only confine: the host's scheduler moves a lone busy thread
between LLC groups now and then, and a reader whose data exceeds one group's LLC then
finds part of it in the caches of the groups it ran in before (``unicache-sim mfc --model
xeon-spr-2s --dist zipf --threads 1 --ws-mb 840``: pinned to one socket it ran 3 % slower
than floating, docs/PERFORMANCE.md). So OBS leaves the vCPUs of such a VM on the CPUs they
had, released if it had pinned them, and says why in the decision log.

Only VMs SCU does not place float: those it leaves alone and those whose guests report
no reads (no agent); a VM SCU unifies needs a vCPU pinned in every unit it sends reads
to. Nor does a VM whose busy vCPUs OBS keeps in one unit because they share data
(:mod:`unicache.policy.obs.cluster`). A VM OBS has not pinned floats from its first round; one
it pinned floats after :data:`FLOAT_ROUNDS` rounds in a row with at most one heavy vCPU in
its view; any VM is pinned again in the first round with two (so a second heavy vCPU is
kept apart at once, and a count flickering between one and two does not pin and release
every round). A VM's view counts the host-measured weights
and its own guest's: one guest's word never changes whether another VM is pinned.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unicache.model import VcpuId

#: the decision-log kind of a VM OBS leaves unpinned
OBS_STEP_ASIDE = "OBS_NO_GAIN"
#: rounds in a row with at most one heavy vCPU before a VM's vCPUs float
FLOAT_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class PinningGain:
    """This round's verdict of OBS's step-aside.

    :param quiet: per VM, rounds in a row SCU did not place it, OBS did not cluster it
        and it saw at most one heavy vCPU (the state kept for the next round).
    :param floating: VMs whose vCPUs OBS does not pin this round.
    :param reasons: per floating VM, one line for the decision log.
    """

    quiet: Mapping[str, int]
    floating: frozenset[str]
    reasons: Mapping[str, str]


def pinning_gain(
    vcpus_of: Mapping[str, Iterable[VcpuId]],
    weights: Mapping[VcpuId, float],
    trusted: frozenset[VcpuId],
    unplaced: frozenset[str],
    clustered: frozenset[str],
    quiet_before: Mapping[str, int],
    heavy_floor: float,
    pinned: frozenset[str] = frozenset(),
) -> PinningGain:
    """Which VMs' pins would keep nothing apart.

    :param vcpus_of: every live VM's vCPUs.
    :param weights: cache weights of this round.
    :param trusted: vCPUs whose weight the host measured.
    :param unplaced: VMs SCU does not place (left alone, or no reads to place).
    :param clustered: VMs whose busy vCPUs OBS keeps in one unit.
    :param quiet_before: the previous round's :attr:`PinningGain.quiet`.
    :param heavy_floor: the weight (misses per cycle) from which a vCPU is cache-heavy
        (``ObsOptions.heavy_weight_floor``).
    :param pinned: VMs OBS holds pinned now (the others float as soon as they may).
    """
    # the cache-heavy vCPUs a VM sees: the host-measured ones, and its own guest's (kept
    # apart, so each VM's count costs its own vCPUs, not every vCPU of the host)
    heavy = sorted(v for v, w in weights.items() if w >= heavy_floor)
    measured = [v for v in heavy if v in trusted]
    reported: dict[str, list[VcpuId]] = {}
    for v in heavy:
        if v not in trusted:
            reported.setdefault(v.vm, []).append(v)
    quiet: dict[str, int] = {}
    floating: set[str] = set()
    reasons: dict[str, str] = {}
    for vm in sorted(vcpus_of):
        own = reported.get(vm, [])
        # what the VM sees, in order: the first two are all that is asked of it
        seen = sorted(measured[:2] + own[:2])
        if vm not in unplaced or vm in clustered or len(measured) + len(own) > 1:
            continue
        quiet[vm] = quiet_before.get(vm, 0) + 1
        if vm in pinned and quiet[vm] < FLOAT_ROUNDS:
            continue
        floating.add(vm)
        lone = f"one cache-heavy vCPU ({seen[0]})" if seen else "no cache-heavy vCPU"
        rounds = "1 round" if quiet[vm] == 1 else f"{quiet[vm]} rounds"
        reasons[vm] = (
            f"OBS leaves {vm}'s vCPUs on their own CPUs: {lone} on the host for {rounds}, "
            "nothing for a pin to keep apart (a pin would only confine it to one LLC group)"
        )
    return PinningGain(quiet, frozenset(floating), reasons)
