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
model's migration cost, charged apart (:class:`~unicache_sim.guest.shim.GuestShim`).

A file opened and read whole (:meth:`ShimCost.open_cycles`, charged once per open by
:meth:`~unicache_sim.guest.shim.GuestShim.open_file`) adds the shim's per-file work: the
benchmark's files cells measure the added ns of one whole file under the shim (open, the
program's fstat, one read of the whole file, the EOF read, close) at ``file_sizes``, for a
file the shim counts (``file_counted_ns``: its run of counts opened and sent) and one it
skips (``file_skipped_ns``: every call passed straight through;
:mod:`~unicache_sim.guest.opensample` says which). A counted file's figure includes its one
read call, which the simulated call is charged anyway, so the open is charged the figure
less what one call of the file's size costs on an unplaced table (never below 0); a
skipped file is charged its figure and its calls nothing more. Between and beyond the
file sizes the figures are interpolated and held as the calls' are. A cost built without
file figures (a test's free shim) charges opens nothing.

The figures live in ``shimcost.toml`` beside this module, written by ``make bench``
(unicache.bench.record) from the same run as docs/PERFORMANCE.md's shim block, which a test
holds them to.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from unicache.errors import ConfigError

_T = TypeVar("_T")

#: the table states the benchmark measures, as the simulated shim sees them
TABLE_STATES = ("none", "unplaced", "placed")


@dataclass(frozen=True, slots=True)
class ShimCost:
    """Added nanoseconds per read call, by table state and size, and per file read whole,
    and the clock they were measured at.

    :param source: where the figures come from (the run, its command, the machine).
    :param clock_ghz: the measuring machine's clock.
    :param sizes: the measured call sizes, bytes, ascending.
    :param ns: per table state (:data:`TABLE_STATES`), the added ns at each size.
    :param file_sizes: the measured whole files' sizes, bytes, ascending (empty: opens
        cost nothing).
    :param file_counted_ns: the added ns of one whole file the shim counts, per file size.
    :param file_skipped_ns: the same of one file it skips.
    """

    source: str
    clock_ghz: float
    sizes: tuple[int, ...]
    ns: dict[str, tuple[float, ...]]
    file_sizes: tuple[int, ...] = ()
    file_counted_ns: tuple[float, ...] = ()
    file_skipped_ns: tuple[float, ...] = ()

    def added_ns(self, state: str, size: int) -> float:
        """Added ns of one call of ``size`` bytes, never below 0.

        :param state: one of :data:`TABLE_STATES`.
        :param size: the call's bytes.
        """
        return _log2_interpolated(self.sizes, self.ns[state], size)

    def cycles(self, state: str, size: int) -> float:
        """The same in cycles, to charge at any modelled clock."""
        return self.added_ns(state, size) * self.clock_ghz

    def open_cycles(self, counted: bool, file_bytes: int) -> float:
        """What opening a file of ``file_bytes`` and reading it whole adds, in cycles, beyond
        what its read calls are charged (module docstring).

        :param counted: the shim counts the file (else it skips it: its calls then cost
            nothing more).
        :param file_bytes: the file's size.
        """
        if not self.file_sizes:
            return 0.0
        if not counted:
            return _log2_interpolated(self.file_sizes, self.file_skipped_ns,
                                      file_bytes) * self.clock_ghz
        whole = _log2_interpolated(self.file_sizes, self.file_counted_ns, file_bytes)
        # the file's one read call is charged by read_chunk already
        return max(0.0, whole - self.added_ns("unplaced", file_bytes)) * self.clock_ghz


def _log2_interpolated(sizes: tuple[int, ...], points: tuple[float, ...], size: int) -> float:
    """The figure at ``size``: interpolated on log2(size) between two measured sizes, held at
    the end values beyond them, never below 0."""
    if size <= sizes[0]:
        return max(0.0, points[0])
    for i in range(1, len(sizes)):
        if size <= sizes[i]:
            lo, hi = math.log2(sizes[i - 1]), math.log2(sizes[i])
            w = (math.log2(size) - lo) / (hi - lo)
            return max(0.0, points[i - 1] + w * (points[i] - points[i - 1]))
    return max(0.0, points[-1])


def parse(text: str, where: str = "shimcost.toml") -> ShimCost:
    """A :class:`ShimCost` from its TOML.

    :raises ConfigError: a missing or malformed field, named.
    """
    try:
        doc = tomllib.loads(text)
        sizes = _sizes(doc, "sizes")
        ns = {state: _figures(doc, f"{state}_ns", len(sizes)) for state in TABLE_STATES}
        file_sizes = _sizes(doc, "file_sizes")
        cost = ShimCost(
            str(_value(doc, "source")),
            _convert(doc, "clock_ghz", float),
            sizes,
            ns,
            file_sizes,
            _figures(doc, "file_counted_ns", len(file_sizes)),
            _figures(doc, "file_skipped_ns", len(file_sizes)),
        )
    except (tomllib.TOMLDecodeError, _FieldError) as err:
        raise ConfigError(f"{where}: {err}") from None
    if cost.clock_ghz <= 0:
        raise ConfigError(f"{where}: clock_ghz must be above 0, not {cost.clock_ghz}")
    return cost


class _FieldError(Exception):
    """A field of the calibration is missing or malformed (the message names it)."""


def _value(doc: dict[str, Any], name: str) -> Any:
    if name not in doc:
        raise _FieldError(f"{name} is missing")
    return doc[name]


def _convert(doc: dict[str, Any], name: str, kind: Callable[[Any], _T]) -> _T:
    try:
        return kind(_value(doc, name))
    except (TypeError, ValueError) as err:
        raise _FieldError(f"{name}: {err}") from None


def _sizes(doc: dict[str, Any], name: str) -> tuple[int, ...]:
    """A list of sizes in bytes: above 0, ascending."""
    sizes = _convert(doc, name, lambda v: tuple(int(s) for s in v))
    if not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] <= 0:
        raise _FieldError(f"{name} must be sizes above 0, ascending, not {doc[name]!r}")
    return sizes


def _figures(doc: dict[str, Any], name: str, count: int) -> tuple[float, ...]:
    """A list of ns figures, one per size."""
    figures = _convert(doc, name, lambda v: tuple(float(x) for x in v))
    if len(figures) != count:
        raise _FieldError(f"{name} needs one figure per size ({count}), not {len(figures)}")
    return figures


def load() -> ShimCost:
    """The calibration the package carries (``shimcost.toml``)."""
    text = resources.files("unicache_sim.guest").joinpath("shimcost.toml").read_text()
    return parse(text)


#: the shipped calibration
SHIM_COST = load()
