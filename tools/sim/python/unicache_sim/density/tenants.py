"""The tenants of the density experiment: the flavor catalogue, SLOs and mixes.

Pure: text in, frozen values out (reading a file is :func:`load_catalogue`'s only I/O).
The shipped catalogue is ``tenants.toml`` beside this module; docs/density.md describes
every key. Everything is checked on load, and every
problem found is reported, one line each (:class:`CatalogueError`), so that a user fixes
a file in one go.

A *mix* is a set of flavors with integer weights (:class:`Mix`; reading, drawing and
laying out mixes is :mod:`unicache_sim.density.mixes`).
"""

from __future__ import annotations

import enum
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from unicache.errors import ConfigError

#: the shipped catalogue
DEFAULT_CATALOGUE = Path(__file__).with_name("tenants.toml")
#: the SLO factor of a latency tenant that names none (issue #16: "k per flavor, default 2")
DEFAULT_K = 2.0
#: bounds of a flavor's size
MAX_VCPUS = 64
MAX_MEMORY_MIB = 1 << 22


class Kind(enum.StrEnum):
    """What a flavor's vCPUs run."""

    #: requests that read files (web, analytics, key-value)
    FILES = "files"
    #: a mergesort over two buffers per vCPU (a build job)
    MERGESORT = "mergesort"
    #: a stream over a large buffer (a cache buster)
    STREAM = "stream"
    #: nothing
    IDLE = "idle"


class SloKind(enum.StrEnum):
    """How a flavor's service is judged."""

    #: p95 request latency at most k times alone
    LATENCY = "latency"
    #: throughput at least a floor times alone
    THROUGHPUT = "throughput"
    #: no SLO
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Workload:
    """What one VM of a flavor runs (the catalogue's ``[flavor.NAME.workload]``).

    :param kind: files, mergesort, stream or idle.
    :param files: files of a ``files`` workload.
    :param file_bytes: bytes of each file.
    :param popularity: ``zipf`` (P(n) ~ 1/n) or ``uniform``.
    :param access: ``whole`` (read the file whole) or ``random`` (one read at a random
        aligned offset).
    :param read_bytes: bytes per read call (``whole``: the program's buffer, 0 = one call
        per chunk; ``random``: the read).
    :param cycles_per_request: compute per request.
    :param cycles_per_byte: compute per byte read.
    :param size_bytes: mergesort: the run each vCPU sorts; stream: the VM's buffer.
    """

    kind: Kind
    files: int = 0
    file_bytes: int = 0
    popularity: str = "uniform"
    access: str = "whole"
    read_bytes: int = 0
    cycles_per_request: float = 0.0
    cycles_per_byte: float = 0.0
    size_bytes: int = 0

    @property
    def data_bytes(self) -> int:
        """Bytes of files a ``files`` workload reads from."""
        return self.files * self.file_bytes


@dataclass(frozen=True, slots=True)
class Flavor:
    """One kind of VM of the catalogue.

    :param name: its name (the VMs are NAME-1, NAME-2, ...).
    :param description: one line.
    :param vcpus: vCPUs.
    :param memory_mib: memory.
    :param profile: unicache's placement profile (compact, spread, auto).
    :param slo: latency, throughput or none.
    :param k: latency SLO: p95 at most ``k`` x alone.
    :param utilization: latency tenants: each vCPU's busy share alone (the request rate).
    :param floor: throughput SLO: at least ``floor`` x alone.
    :param workload: what it runs.
    """

    name: str
    description: str
    vcpus: int
    memory_mib: int
    profile: str
    slo: SloKind
    k: float
    utilization: float
    floor: float
    workload: Workload

    @property
    def latency_critical(self) -> bool:
        """Whether its SLO is a p95 latency."""
        return self.slo is SloKind.LATENCY

    @property
    def reads_files(self) -> bool:
        """Whether its requests read files (the file-heavy tenants)."""
        return self.workload.kind is Kind.FILES


@dataclass(frozen=True, slots=True)
class Catalogue:
    """The flavors, by name.

    :param flavors: every flavor, in name order.
    :param source: where it was read from.
    """

    flavors: tuple[Flavor, ...]
    source: str

    def get(self, name: str) -> Flavor:
        """The flavor of that name.

        :raises ConfigError: naming the known flavors.
        """
        for flavor in self.flavors:
            if flavor.name == name:
                return flavor
        known = ", ".join(f.name for f in self.flavors)
        raise ConfigError(f"{self.source}: no flavor {name!r} (known: {known})")

    @property
    def names(self) -> tuple[str, ...]:
        """Flavor names, sorted."""
        return tuple(f.name for f in self.flavors)


@dataclass(frozen=True, slots=True)
class Mix:
    """Flavors and their integer weights.

    :param name: the mix's name.
    :param weights: (flavor, weight > 0), in flavor-name order.
    """

    name: str
    weights: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        """``web:3 kv:1``."""
        return " ".join(f"{f}:{w}" for f, w in self.weights)


class CatalogueError(ConfigError):
    """A catalogue or mix file with problems, one line each.

    :param problems: every problem found, one line each.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        #: the problems, one line each
        self.problems = tuple(problems)


E = TypeVar("E", bound=enum.StrEnum)

# Section: the catalogue ------------------------------------------------------------------

_FLAVOR_KEYS = frozenset(
    {
        "description",
        "vcpus",
        "memory_mib",
        "profile",
        "slo",
        "k",
        "utilization",
        "floor",
        "workload",
    }
)
_PROFILES = ("compact", "spread", "auto")
#: workload keys per kind: required, then optional
_WORKLOAD_KEYS: dict[Kind, tuple[frozenset[str], frozenset[str]]] = {
    Kind.FILES: (
        frozenset({"files", "file_kib", "popularity", "access"}),
        frozenset({"read_kib", "cycles_per_request", "cycles_per_byte"}),
    ),
    Kind.MERGESORT: (frozenset({"size_mib"}), frozenset()),
    Kind.STREAM: (frozenset({"size_mib"}), frozenset()),
    Kind.IDLE: (frozenset(), frozenset()),
}


class Problems:
    """Collects problems, one line each, all prefixed by the file."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.lines: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.lines.append(f"{self.origin}: {where}: {what}")

    def raise_any(self) -> None:
        if self.lines:
            raise CatalogueError(self.lines)


def parse_catalogue(text: str, origin: str) -> Catalogue:
    """Parse and check a catalogue (the module docstring; tenants.toml).

    :param text: the TOML text.
    :param origin: its name, for messages.
    :raises CatalogueError: listing every problem, one line each.
    """
    problems = Problems(origin)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CatalogueError([f"{origin}: not valid TOML ({err})"]) from None
    extra = sorted(set(data) - {"flavor"})
    for key in extra:
        problems.add(f"table {key!r}", "unknown (a catalogue has only [flavor.NAME] tables)")
    raw = data.get("flavor", {})
    if not isinstance(raw, Mapping) or not raw:
        problems.add("[flavor]", "no flavors (expected [flavor.NAME] tables)")
        problems.raise_any()
    flavors = []
    for name in sorted(raw):
        flavor = _flavor(name, raw[name], problems)
        if flavor is not None:
            flavors.append(flavor)
    problems.raise_any()
    return Catalogue(tuple(flavors), origin)


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Read a catalogue file (default: the shipped one).

    :raises ConfigError: if it cannot be read; :class:`CatalogueError` if it is wrong.
    """
    path = path or DEFAULT_CATALOGUE
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read catalogue {path}") from err
    return parse_catalogue(text, str(path))


def _flavor(name: str, raw: Any, problems: Problems) -> Flavor | None:
    where = f"flavor {name!r}"
    if not isinstance(raw, Mapping):
        problems.add(where, "must be a table ([flavor.NAME])")
        return None
    before = len(problems.lines)
    for key in sorted(set(raw) - _FLAVOR_KEYS):
        problems.add(where, f"unknown key {key!r} (known: {', '.join(sorted(_FLAVOR_KEYS))})")
    description = raw.get("description", "")
    if not isinstance(description, str):
        problems.add(where, "'description' must be a string")
    vcpus = _whole(raw, "vcpus", None, 1, MAX_VCPUS, where, problems)
    memory = _whole(raw, "memory_mib", None, 0, MAX_MEMORY_MIB, where, problems)
    profile = raw.get("profile", "auto")
    if profile not in _PROFILES:
        problems.add(where, f"'profile' must be one of {', '.join(_PROFILES)}, not {profile!r}")
    slo = _choice(raw, "slo", None, SloKind, where, problems)
    k = _number(raw, "k", DEFAULT_K, 1.0, 100.0, where, problems)
    utilization = _number(raw, "utilization", 0.0, 0.0, 0.95, where, problems)
    floor = _number(raw, "floor", 0.0, 0.0, 1.0, where, problems)
    workload = _workload(raw.get("workload"), f"{where} workload", problems)
    if slo is SloKind.LATENCY:
        if "utilization" not in raw or not utilization > 0:
            problems.add(where, "a latency tenant needs 'utilization' within 0..0.95, above 0")
        if workload is not None and workload.kind is not Kind.FILES:
            problems.add(where, "a latency tenant needs a 'files' workload (its requests)")
    elif slo is not None:
        for key in ("k", "utilization"):
            if key in raw:
                problems.add(where, f"{key!r} is for latency tenants (slo = \"latency\")")
    if slo is SloKind.THROUGHPUT:
        if "floor" not in raw or not floor > 0:
            problems.add(where, "a throughput tenant needs 'floor' within 0..1, above 0")
        if workload is not None and workload.kind not in (Kind.MERGESORT, Kind.STREAM):
            problems.add(where, "a throughput tenant needs a 'mergesort' or 'stream' workload")
    elif slo is not None and "floor" in raw:
        problems.add(where, "'floor' is for throughput tenants (slo = \"throughput\")")
    if slo is SloKind.NONE and workload is not None and workload.kind is not Kind.IDLE:
        problems.add(where, "a tenant with slo = \"none\" must be idle (its work is judged)")
    if len(problems.lines) > before or slo is None or workload is None:
        return None
    assert vcpus is not None and memory is not None
    return Flavor(
        name,
        str(description),
        vcpus,
        memory,
        str(profile),
        slo,
        k,
        utilization,
        floor,
        workload,
    )


def _workload(raw: Any, where: str, problems: Problems) -> Workload | None:
    if not isinstance(raw, Mapping):
        problems.add(where, "missing (a [flavor.NAME.workload] table with a 'kind')")
        return None
    kind = _choice(raw, "kind", None, Kind, where, problems)
    if kind is None:
        return None
    required, optional = _WORKLOAD_KEYS[kind]
    for key in sorted(set(raw) - required - optional - {"kind"}):
        problems.add(where, f"unknown key {key!r} for kind {kind!s}")
    for key in sorted(required - set(raw)):
        problems.add(where, f"{key!r} is required for kind {kind!s}")
    before = len(problems.lines)
    if kind is Kind.FILES:
        files = _whole(raw, "files", 1, 1, 1 << 20, where, problems) or 1
        file_kib = _whole(raw, "file_kib", 4, 4, 1 << 22, where, problems) or 4
        popularity = raw.get("popularity", "uniform")
        if popularity not in ("zipf", "uniform"):
            problems.add(where, f"'popularity' must be zipf or uniform, not {popularity!r}")
        access = raw.get("access", "whole")
        if access not in ("whole", "random"):
            problems.add(where, f"'access' must be whole or random, not {access!r}")
        read_kib = _whole(raw, "read_kib", 0, 0, 1 << 20, where, problems) or 0
        if access == "random" and not 0 < read_kib <= file_kib:
            problems.add(where, "a random access needs 'read_kib' within 1..file_kib")
        if access == "random" and read_kib and file_kib % read_kib:
            problems.add(where, "'file_kib' must be a multiple of 'read_kib' for random reads")
        if files * file_kib > 1 << 24:
            problems.add(where, "more than 16 GiB of files per VM")
        per_request = _number(raw, "cycles_per_request", 0.0, 0.0, 1e9, where, problems)
        per_byte = _number(raw, "cycles_per_byte", 0.0, 0.0, 1e3, where, problems)
        if len(problems.lines) > before:
            return None
        return Workload(
            kind,
            files,
            file_kib * 1024,
            str(popularity),
            str(access),
            read_kib * 1024,
            per_request,
            per_byte,
        )
    if kind in (Kind.MERGESORT, Kind.STREAM):
        size = _whole(raw, "size_mib", 1, 1, 1 << 16, where, problems) or 1
        if len(problems.lines) > before:
            return None
        return Workload(kind, size_bytes=size * 1024 * 1024)
    return Workload(kind)


def _whole(
    raw: Mapping[str, Any],
    key: str,
    default: int | None,
    low: int,
    high: int,
    where: str,
    problems: Problems,
) -> int | None:
    value = raw.get(key, default)
    if value is None:
        problems.add(where, f"{key!r} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.add(where, f"{key!r} must be a whole number within {low}..{high}, not {value!r}")
        return None
    return int(value)


def _number(
    raw: Mapping[str, Any],
    key: str,
    default: float,
    low: float,
    high: float,
    where: str,
    problems: Problems,
) -> float:
    value = raw.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        problems.add(where, f"{key!r} must be a number within {low:g}..{high:g}, not {value!r}")
        return default
    return float(value)


def _choice(
    raw: Mapping[str, Any],
    key: str,
    default: E | None,
    kind: type[E],
    where: str,
    problems: Problems,
) -> E | None:
    value = raw.get(key)
    if value is None:
        if default is None:
            problems.add(where, f"{key!r} is required (one of {', '.join(kind)})")
        return default
    try:
        return kind(value)
    except ValueError:
        problems.add(where, f"{key!r} must be one of {', '.join(kind)}, not {value!r}")
        return None
