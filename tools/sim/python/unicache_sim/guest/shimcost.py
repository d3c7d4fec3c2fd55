"""What the guest's shim costs a simulated read call, calibrated from ``unicache bench shim``.

The simulated guest pays what libunicache.so adds to each call, as the real one does: the
nanoseconds the benchmark measured on the project machine for sequential ``read()`` calls
through an 8,192-entry table, by what the table says of the file (no table, a file it does
not name, a placed chunk the thread stays on) and by the call's size, taken at the upper
end of their 95 % interval (never an estimate in the shim's favour). Between two measured
sizes the cost is interpolated on log2(size); below and above them it is held at the end
value (the shim's work does not grow with a call's length). Nanoseconds become cycles at
the measuring machine's clock, and those cycles are charged unchanged at the modelled
clock, as :data:`~unicache_sim.engine.calibration.CYCLES_PER_BYTE` are: the shim's work is a few
instructions and cache lines, not a wall-clock delay. A migration the shim makes is the
model's migration cost, charged apart (:class:`~unicache_sim.guest.simhost.GuestShim`).

The figures live in ``shimcost.toml`` beside this module, written by ``make bench``
(tools/bench/record.py) from the same run as docs/PERFORMANCE.md's shim block, which a test
holds them to.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources

from unicache.errors import ConfigError

#: the table states the benchmark measures, as the simulated shim sees them
TABLE_STATES = ("none", "unplaced", "placed")


@dataclass(frozen=True, slots=True)
class ShimCost:
    """Added nanoseconds per read call, by table state and size, and the clock they were
    measured at.

    :param source: where the figures come from (the run, its command, the machine).
    :param clock_ghz: the measuring machine's clock.
    :param sizes: the measured call sizes, bytes, ascending.
    :param ns: per table state (:data:`TABLE_STATES`), the added ns at each size.
    """

    source: str
    clock_ghz: float
    sizes: tuple[int, ...]
    ns: dict[str, tuple[float, ...]]

    def added_ns(self, state: str, size: int) -> float:
        """Added ns of one call of ``size`` bytes, never below 0.

        :param state: one of :data:`TABLE_STATES`.
        :param size: the call's bytes.
        """
        points = self.ns[state]
        if size <= self.sizes[0]:
            return max(0.0, points[0])
        for i in range(1, len(self.sizes)):
            if size <= self.sizes[i]:
                lo, hi = math.log2(self.sizes[i - 1]), math.log2(self.sizes[i])
                w = (math.log2(size) - lo) / (hi - lo)
                return max(0.0, points[i - 1] + w * (points[i] - points[i - 1]))
        return max(0.0, points[-1])

    def cycles(self, state: str, size: int) -> float:
        """The same in cycles, to charge at any modelled clock."""
        return self.added_ns(state, size) * self.clock_ghz


def parse(text: str, where: str = "shimcost.toml") -> ShimCost:
    """A :class:`ShimCost` from its TOML.

    :raises ConfigError: a missing or malformed field, named.
    """
    try:
        doc = tomllib.loads(text)
        sizes = tuple(int(s) for s in doc["sizes"])
        ns = {state: tuple(float(x) for x in doc[f"{state}_ns"]) for state in TABLE_STATES}
        cost = ShimCost(str(doc["source"]), float(doc["clock_ghz"]), sizes, ns)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from err
    if (not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] <= 0
            or any(len(v) != len(sizes) for v in ns.values()) or cost.clock_ghz <= 0):
        raise ConfigError(f"{where}: sizes must ascend and every state needs one figure "
                          "per size")
    return cost


def load() -> ShimCost:
    """The calibration the package carries (``shimcost.toml``)."""
    text = resources.files("unicache_sim.guest").joinpath("shimcost.toml").read_text()
    return parse(text)


#: the shipped calibration
SHIM_COST = load()
