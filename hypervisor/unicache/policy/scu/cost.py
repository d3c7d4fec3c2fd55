"""SCU's cost model: what a read costs on-chip, off-chip and after a migration (MFC §4.5).

MFC §4.5 compares "the time to load the file from off-chip memory" with "the time to
migrate and load the file from on-chip cache" (migration = moving run queues plus the
thread's 4 KiB working set). unicache makes that comparison explicit, takes every figure
from the topology (a machine model or sysfs plus documented defaults), and asks for a
``margin`` on top, so that estimation errors never turn into a slower VM:

* a read migrates only if its saving exceeds ``margin`` times the migration
  (:meth:`CostModel.min_read_size`);
* where one chunk (§4.7: half an L2) saves less than that — today's hosts read 256 KiB
  from L3 in a few microseconds — consecutive chunks of a file are kept together in one
  unit and the thread migrates once per *extent* of them (:meth:`CostModel.extent_chunks`);
* a VM whose reads would gain nothing from unification (its hot data fits one unit, its
  vCPUs sit in one unit, or migrations eat the saving) is left alone
  (:meth:`CostModel.predict_gain`), and the decision log says why.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: §4.5: MFC "conservatively estimates this working set to be 4 Kbytes"
WORKING_SET_BYTES = 4096
#: a migration must save this many times its cost (never slower: a 2x error still pays)
MIGRATION_MARGIN = 2.0
#: an extent never holds more chunks than this (a unit must still take several extents)
MAX_EXTENT_CHUNKS = 16
#: an extent saves this many times a migration's ``margin``-weighted cost. The prediction
#: (:meth:`CostModel.predict_gain`) charges the margin on every migration, so an extent
#: that saves just the margin would be predicted to gain nothing even when every read of
#: it turns on-chip (the Rome scan of docs/simulator.md did exactly that: -7 to -19 %
#: every round); at 2 the prediction keeps at least half of what an extent saves.
EXTENT_PAYBACK = 2.0
#: a VM whose predicted gain is below this fraction of its read time is left alone
MIN_PREDICTED_GAIN = 0.02
#: a VM SCU already places keeps its table while its predicted gain stays at or above
#: this (hysteresis: an estimate near MIN_PREDICTED_GAIN must not flip the VM's table,
#: and the migrations that follow it, every round)
KEEP_PREDICTED_GAIN = 0.0


@dataclass(frozen=True, slots=True)
class GainEstimate:
    """What unification is predicted to do for one VM's reads over one round.

    :param fraction: predicted saving as a fraction of the VM's busy time without
        unicache, reads and the work between them (negative: unicache would make it
        slower).
    :param reason: one line for the decision log.
    """

    fraction: float
    reason: str

    @property
    def pays(self) -> bool:
        """Whether the VM gains enough to be worth changing anything."""
        return self.fraction >= MIN_PREDICTED_GAIN

    def keeps(self, placed: bool) -> bool:
        """Whether a VM is placed this round: it pays, or it was placed and still gains."""
        return self.fraction >= needed_gain(placed)


def needed_gain(placed: bool) -> float:
    """The predicted gain a VM needs to be placed (less if it is placed already)."""
    return KEEP_PREDICTED_GAIN if placed else MIN_PREDICTED_GAIN


@dataclass(frozen=True, slots=True)
class CostModel:
    """Read and migration costs of one machine, in cycles.

    :param onchip_bytes_per_cycle: one core reading from its unit's outer cache level.
    :param offchip_bytes_per_cycle: one core reading from DRAM.
    :param migration_cycles: moving a thread to another CPU (MFC §4.5's run-queue move).
    :param margin: a migration must save this many times its cost.
    :param clock_hz: the core clock (None: unknown), to turn busy time into cycles.
    """

    onchip_bytes_per_cycle: float
    offchip_bytes_per_cycle: float
    migration_cycles: float
    margin: float = MIGRATION_MARGIN
    clock_hz: float | None = None

    def read_cycles(self, size: int, onchip: bool) -> float:
        """Cycles to read ``size`` bytes from on-chip caches or from DRAM."""
        return size / (self.onchip_bytes_per_cycle if onchip else self.offchip_bytes_per_cycle)

    def saving(self, size: int) -> float:
        """Cycles saved when ``size`` bytes come from on-chip instead of DRAM."""
        return self.read_cycles(size, False) - self.read_cycles(size, True)

    def migration_cost(self) -> float:
        """§4.5: the run-queue move plus refilling the thread's working set."""
        return self.migration_cycles + WORKING_SET_BYTES / self.offchip_bytes_per_cycle

    def migration_pays(self, size: int) -> bool:
        """Whether one migration for a read of ``size`` bytes saves ``margin`` times its cost."""
        return self.saving(size) >= self.margin * self.migration_cost()

    def min_read_size(self) -> int:
        """§4.5 with the margin: the smallest read for which migrating pays.

        ``S/bw_off - S/bw_on >= margin * (migration + WS/bw_off)``; effectively infinite
        when on-chip is not faster.
        """
        per_byte = 1.0 / self.offchip_bytes_per_cycle - 1.0 / self.onchip_bytes_per_cycle
        if per_byte <= 0:
            return 2**62
        return int(self.margin * self.migration_cost() / per_byte) + 1

    def extent_chunks(self, chunk_size: int) -> int:
        """Chunks of a file kept together in one unit so that one migration pays for them
        ``EXTENT_PAYBACK`` times over (1 where one chunk does: the paper's machines)."""
        needed = EXTENT_PAYBACK * self.margin * self.migration_cost()
        for k in range(1, MAX_EXTENT_CHUNKS + 1):
            if self.saving(k * chunk_size) >= needed:
                return k
        return MAX_EXTENT_CHUNKS

    def predict_gain(
        self,
        chunk_reads: Sequence[tuple[int, int]],
        unit_bytes: int,
        spanned_bytes: int,
        units: int,
        readers: int = 1,
        cores_per_unit: int = 1,
        busy_cycles: float = 0.0,
    ) -> GainEstimate:
        """Predict what unification gains one VM from what it read in one round.

        The hottest chunks fill the caches first (LFU, MFC §4.3). Without unicache each
        unit caches the hottest ``unit_bytes`` of what its threads read; with it the
        units the VM spans hold the hottest ``spanned_bytes`` together, and a read of a
        chunk cached elsewhere costs a migration ``(units - 1) / units`` of the time.

        :param chunk_reads: (size in bytes, reads) per chunk the VM read.
        :param unit_bytes: capacity of one of the VM's units.
        :param spanned_bytes: capacity of all units the VM's vCPUs are pinned in.
        :param units: how many units that is.
        :param readers: the VM's readers running at once (its vCPUs' busy time this round).
        :param cores_per_unit: cores of one of those units.
        :param busy_cycles: the cycles its vCPUs ran this round (0: unknown). What they
            ran beyond the predicted reads is work between reads (md5sum's hashing):
            migrations do not speed it up, but readers that wait for one another's unit
            wait through it too.
        """
        total = sum(size * reads for size, reads in chunk_reads)
        if total <= 0:
            return GainEstimate(0.0, "no reads to place")
        if units <= 1:
            return GainEstimate(0.0, "its vCPUs sit in one unit: nothing to unify")
        if sum(size for size, _ in chunk_reads) <= min(unit_bytes, spanned_bytes):
            # all of it fits one unit: what follows would find no gain (a fleet's usual
            # VM, spared the sort)
            return GainEstimate(0.0, f"its hot data fits one unit ({unit_bytes >> 20} MiB)")
        hot = sorted(chunk_reads, key=lambda c: (-c[1], c[0]))
        linux = _hot_bytes(hot, unit_bytes)
        gained = _hot_bytes(hot, spanned_bytes) - linux
        if gained <= 0:
            return GainEstimate(0.0, f"its hot data fits one unit ({unit_bytes >> 20} MiB)")
        base = sum(self.read_cycles(s, False) * r for s, r in chunk_reads) - self.saving(1) * linux
        work = max(busy_cycles - base, 0.0)
        moved = sum(r for _, r in hot[: _hot_count(hot, spanned_bytes)]) * (units - 1) / units
        # readers follow their data: a unit runs at most its cores at once, the rest wait
        running = running_fraction(readers, units, cores_per_unit)
        unified = (
            base + work - self.saving(1) * gained + self.margin * moved * self.migration_cost()
        ) / running
        fraction = (base + work - unified) / (base + work) if base > 0 else 0.0
        waits = f"; readers run {running:.0%} of the time" if running < 1 else ""
        return GainEstimate(
            fraction,
            f"predicted {fraction:+.2%} of read time: {gained >> 20} MiB of reads more "
            f"on-chip, {moved:.0f} migrations at {self.migration_cost():.0f} cycles{waits}",
        )


#: readers beyond this are counted as this many (bounded work per prediction)
MAX_READERS = 1024


def running_fraction(readers: int, units: int, cores_per_unit: int) -> float:
    """The expected fraction of readers running when each goes to the unit of its data.

    Readers land in units independently and evenly (``X ~ Binomial(readers, 1/units)`` in
    each), and a unit runs at most ``cores_per_unit`` of them at once (MFC §4.4: "a core
    holding a popular file may be a CPU bottleneck if many threads migrate to it").
    1 when the readers fit one unit's cores.
    """
    readers = min(max(readers, 1), MAX_READERS)
    if readers <= cores_per_unit or units <= 1:
        return 1.0
    p = 1.0 / units
    running = sum(
        min(k, cores_per_unit) * math.comb(readers, k) * p**k * (1 - p) ** (readers - k)
        for k in range(readers + 1)
    )
    return min(1.0, units * running / readers)


def _hot_count(hot: Sequence[tuple[int, int]], capacity: int) -> int:
    used = 0
    for i, (size, _) in enumerate(hot):
        if used + size > capacity:
            return i
        used += size
    return len(hot)


def _hot_bytes(hot: Sequence[tuple[int, int]], capacity: int) -> int:
    # bytes read from the hottest chunks that fit ``capacity``
    return sum(size * reads for size, reads in hot[: _hot_count(hot, capacity)])
