"""SRM's step-aside: whether coloring a VM's streams saves its co-runners more than it costs.

SRM-buffer (§3) confines a streaming file's page cache to a few LLC colors so that the
stream stops evicting its co-runners' lines (§2: mergesort next to grep). The confinement
has a price the paper's §2 figures show only where it is worth paying: the co-runners'
lines that share the stream's colors are evicted by it on every pass. With ``f`` the
fraction of the LLC the colors take, and over the co-runners in one interval ``M`` LLC
misses and ``R`` LLC references (the stream's own lines taken out),

* coloring saves at most the misses the stream causes outside its colors, ``(1 - f) M``;
* it costs the hits that now sit in the stream's colors, ``f (R - M)``.

It colors only when ``(1 - f) M >= COLOR_MARGIN * f (R - M)`` (never slower: the margin
SCU's migrations must clear too, :mod:`unicache.policy.scu.cost`). Once coloring, and
``COLOR_SETTLE_ROUNDS`` rounds later, the watch compares the co-runners' misses per
instruction with those measured before: no fewer, and the VM's streams lose their colors
for ``COLOR_BACKOFF_ROUNDS`` rounds. A host without LLC
counters (most clouds, this project's CI machine) cannot predict the gain, so it does not
color. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unicache.model import CounterSample, VcpuId

#: coloring must save this many times the misses it adds (SCU's margin, policy/scu/cost.py)
COLOR_MARGIN = 2.0
#: rounds a VM's streams stay uncolored after the watch found no gain
COLOR_BACKOFF_ROUNDS = 30
#: misses per instruction with colors must be this much below those without
COLOR_TOLERANCE = 0.02
#: rounds the watch waits after coloring starts: the colors reach the guest one round
#: later, and only page cache allocated after that lands in them
COLOR_SETTLE_ROUNDS = 2

#: refusal kind in the decision log
COLOR_STEP_ASIDE = "SRM_NO_GAIN"


@dataclass(frozen=True, slots=True)
class CoRunnerCounters:
    """The co-runners' LLC counters over one interval, the stream's own lines taken out.

    :param references: LLC references.
    :param misses: LLC misses.
    :param instructions: instructions retired (0: unknown; rates are then per interval).
    """

    references: int
    misses: int
    instructions: int = 0

    @property
    def miss_rate(self) -> float:
        """Misses per instruction (per interval when instructions are unknown)."""
        return self.misses / self.instructions if self.instructions else float(self.misses)


def corunner_counters(
    samples: Iterable[CounterSample], vcpus: Iterable[VcpuId], stream_lines: Mapping[VcpuId, int]
) -> CoRunnerCounters | None:
    """Sum the LLC counters of ``vcpus`` without the stream's own lines.

    A streaming read misses on every line it brings in: ``stream_lines`` per vCPU (the
    bytes the guest reported it read of streaming files, in lines) come off both its
    references and its misses, so what is left is what the co-runners see.

    :returns: the sums, or None when a vCPU's sample lacks LLC counters (or none has one).
    """
    wanted = set(vcpus)
    refs = misses = instructions = 0
    seen = False
    for sample in samples:
        if sample.vcpu not in wanted:
            continue
        if sample.llc_references is None or sample.llc_misses is None:
            return None
        own = max(stream_lines.get(sample.vcpu, 0), 0)
        refs += max(sample.llc_references - own, 0)
        misses += max(sample.llc_misses - own, 0)
        instructions += max(sample.instructions or 0, 0)
        seen = True
    return CoRunnerCounters(refs, misses, instructions) if seen else None


@dataclass(frozen=True, slots=True)
class ColorGain:
    """A prediction or a watch verdict.

    :param pays: whether to color.
    :param reason: one line for the decision log.
    """

    pays: bool
    reason: str


def predict_coloring(
    counters: CoRunnerCounters, fraction: float, margin: float = COLOR_MARGIN
) -> ColorGain:
    """Whether confining the streams to ``fraction`` of the LLC saves the co-runners misses."""
    hits = max(counters.references - counters.misses, 0)
    saved = (1.0 - fraction) * counters.misses
    cost = fraction * hits
    pays = saved > 0 and saved >= margin * cost
    return ColorGain(
        pays,
        f"predicted {saved:.0f} co-runner LLC misses saved against {cost:.0f} hits lost in the "
        f"streams' {fraction:.1%} of the LLC ({'pays' if pays else 'needs'} "
        f"{margin:g}x)",
    )


@dataclass(frozen=True, slots=True)
class GateState:
    """The step-aside's memory for one VM.

    :param coloring: whether its streams were colored last round.
    :param off_rate: the co-runners' miss rate in the last uncolored round with a stream.
    :param aside_until: the round before which a watch verdict keeps it uncolored.
    :param since: the round its streams were first colored (while coloring).
    """

    coloring: bool = False
    off_rate: float = 0.0
    aside_until: int = 0
    since: int = 0


def gate_round(
    state: GateState, counters: CoRunnerCounters | None, fraction: float, round_no: int
) -> tuple[GateState, ColorGain]:
    """One round of the step-aside for a VM that streams this round.

    :param state: the VM's gate after the previous round.
    :param counters: its co-runners' counters this round (None: no LLC counters).
    :param fraction: the share of the LLC its colored nodes' colors take.
    :param round_no: this round's number.
    :returns: the new state and whether its streams are colored this round.
    """
    if counters is None:
        return GateState(), ColorGain(
            False, "no LLC counters on this host: coloring's gain cannot be predicted"
        )
    if round_no < state.aside_until:
        return state, ColorGain(
            False, f"colors saved no misses when tried; next try in round {state.aside_until}"
        )
    if state.coloring and round_no - state.since < COLOR_SETTLE_ROUNDS:
        return state, ColorGain(
            True,
            "colors settling: the watch judges them from round "
            f"{state.since + COLOR_SETTLE_ROUNDS}",
        )
    if state.coloring:
        on = counters.miss_rate
        if on < state.off_rate * (1.0 - COLOR_TOLERANCE):
            return state, ColorGain(
                True, f"co-runner misses {on:.3g} colored against {state.off_rate:.3g} before"
            )
        until = round_no + COLOR_BACKOFF_ROUNDS
        return GateState(False, state.off_rate, until), ColorGain(
            False,
            f"co-runner misses {on:.3g} colored, not below {state.off_rate:.3g} before: "
            f"uncolored until round {until}",
        )
    gain = predict_coloring(counters, fraction)
    return GateState(gain.pays, counters.miss_rate, 0, round_no), gain
