"""A fleet of arrivals packed on one host with :func:`~unicache.policy.place.vm.place_vm`.

``unicache place --arrivals FILE`` and the density experiments (issue #16) use this:
requests are placed one after another, each seeing those before it (their vCPUs, memory
and, where the file gives one, their observed cache weight, so that ``auto`` and OBS-X
("Policy: Migrating across caches": new vCPUs go to the LLC group with the smallest cache
load) see a loaded host); a request that does not fit is refused and the packing goes on.

The arrivals file (docs/placement.md "Arrivals") is TOML, an array of ``[[vm]]`` tables,
or JSON lines, one object per line; both have the same keys::

    flavor       = "web"      # required: the kind of VM (auto's weights are per flavor)
    vcpus        = 4          # required: 1..4096
    memory_mib   = 8192       # default 0 (no memory planned)
    profile      = "auto"     # compact | spread | auto; default: the config's [place] profile
    count        = 3          # default 1: that many VMs of this line, in a row
    name         = "web"      # default: the flavor; VMs are named NAME-1, NAME-2, ...
    cache_weight = 0.4        # optional: the cache weight each vCPU is observed to have

Parsing is pure (text in); reading the file is the caller's.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unicache.errors import ConfigError, PolicyRefusal
from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.room import host_room
from unicache.policy.place.types import PlacedVm, Placement, VmRequest, placed_from
from unicache.policy.place.vm import MAX_VCPUS, place_vm
from unicache.topology import Topology, Unify

#: the keys an arrival may have
ARRIVAL_KEYS = frozenset(
    {"flavor", "vcpus", "memory_mib", "profile", "count", "name", "cache_weight"}
)
#: the most VMs one file may ask for (a typo in ``count`` must not run for an hour)
MAX_ARRIVALS = 100_000


@dataclass(frozen=True, slots=True)
class Arrival:
    """One VM request of a fleet.

    :param request: the VM.
    :param cache_weight: the cache weight each of its vCPUs is observed to have once it
        runs (what the daemon's status would show), if known.
    """

    request: VmRequest
    cache_weight: float | None = None


def parse_arrivals(text: str, origin: str) -> tuple[Arrival, ...]:
    """Parse an arrivals file (module docstring): TOML ``[[vm]]`` tables or JSON lines.

    :param text: the file's text.
    :param origin: its name, for messages.
    :raises ConfigError: naming the entry and the first problem.
    """
    entries: list[tuple[str, Any]] = []
    first = next(
        (
            line.strip()
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ),
        "",
    )
    if first.startswith("{"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entries.append((f"{origin}:{number}", json.loads(line)))
            except ValueError as err:
                raise ConfigError(f"{origin}:{number}: not a JSON object") from err
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{origin}: neither JSON lines nor valid TOML") from err
        extra = sorted(set(data) - {"vm"})
        if extra:
            raise ConfigError(f"{origin}: unknown table {extra[0]!r} (expected [[vm]])")
        vms = data.get("vm", [])
        if not isinstance(vms, list):
            raise ConfigError(f"{origin}: 'vm' must be an array of tables ([[vm]])")
        entries = [(f"{origin} [[vm]] #{i}", vm) for i, vm in enumerate(vms, 1)]
    out: list[Arrival] = []
    numbers: dict[str, int] = {}
    for where, raw in entries:
        out += _arrivals(raw, where, numbers)
        if len(out) > MAX_ARRIVALS:
            raise ConfigError(f"{origin}: more than {MAX_ARRIVALS} VMs")
    return tuple(out)


def _arrivals(raw: Any, where: str, numbers: dict[str, int]) -> list[Arrival]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: an arrival must be a table/object")
    unknown = sorted(set(raw) - ARRIVAL_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(ARRIVAL_KEYS))})"
        )
    flavor = raw.get("flavor")
    if not isinstance(flavor, str) or not flavor:
        raise ConfigError(f"{where}: 'flavor' must be a non-empty string")
    vcpus = _whole(raw, "vcpus", None, where, 1, MAX_VCPUS)
    memory = _whole(raw, "memory_mib", 0, where, 0, 1 << 40)
    count = _whole(raw, "count", 1, where, 1, MAX_ARRIVALS)
    name = raw.get("name", flavor)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'name' must be a non-empty string")
    profile: Profile | None = None
    if "profile" in raw:
        try:
            profile = Profile(raw["profile"])
        except ValueError as err:
            raise ConfigError(f"{where}: profile must be compact, spread or auto") from err
    weight = raw.get("cache_weight")
    if weight is not None and (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or weight < 0
    ):
        raise ConfigError(f"{where}: 'cache_weight' must be a number >= 0")
    before = numbers.get(name, 0)
    numbers[name] = before + count
    return [
        Arrival(
            VmRequest(f"{name}-{before + i + 1}", vcpus, memory, profile, flavor),
            None if weight is None else float(weight),
        )
        for i in range(count)
    ]


def _whole(
    raw: Mapping[str, Any], key: str, default: int | None, where: str, low: int, high: int
) -> int:
    value = raw.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: '{key}' is required")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: '{key}' must be a whole number within {low}..{high}")
    return int(value)


@dataclass(frozen=True, slots=True)
class GroupLoad:
    """One LLC group after the packing.

    :param unit: the cache unit.
    :param node: its NUMA node.
    :param cpus: its CPUs.
    :param vcpus: vCPUs on it.
    :param slots: vCPUs it may hold (CPUs x overcommit).
    :param cache_load: the sum of its vCPUs' weights (expected where none is observed).
    """

    unit: int
    node: int
    cpus: int
    vcpus: float
    slots: float
    cache_load: float


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """One NUMA node after the packing.

    :param node: the node.
    :param cpus: its CPUs.
    :param vcpus: vCPUs on it.
    :param slots: vCPUs it may hold.
    :param memory_mib: memory used by VMs.
    :param memory_capacity_mib: memory VMs may use.
    """

    node: int
    cpus: int
    vcpus: float
    slots: float
    memory_mib: float
    memory_capacity_mib: float


@dataclass(frozen=True, slots=True)
class Refused:
    """An arrival that did not fit.

    :param request: the VM.
    :param kind: :class:`~unicache.errors.PolicyRefusal` kind.
    :param reason: the refusal's one line.
    """

    request: VmRequest
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class FleetResult:
    """Where a fleet went.

    :param placed: the placements, in arrival order.
    :param refused: the arrivals that did not fit, in order.
    :param groups: the load of every LLC group at the end.
    :param nodes: the load of every node at the end.
    """

    placed: tuple[Placement, ...]
    refused: tuple[Refused, ...]
    groups: tuple[GroupLoad, ...]
    nodes: tuple[NodeLoad, ...]


def place_fleet(
    topology: Topology,
    arrivals: Sequence[Arrival],
    options: PlaceOptions | None = None,
    unify: Unify = Unify.LLC,
    placed: Sequence[PlacedVm] = (),
    until_refused: bool = False,
) -> FleetResult:
    """Place ``arrivals`` in order on one host, each seeing all placed before it.

    :param topology: the machine.
    :param arrivals: the requests, in order.
    :param options: capacity and defaults.
    :param unify: what one LLC group is.
    :param placed: VMs on the host before the first arrival.
    :param until_refused: stop at the first refusal (the arrivals after it are neither
        placed nor refused): how many of the first arrivals the host takes, in one pass.
    """
    options = options or PlaceOptions()
    on_host = list(placed)
    done: list[Placement] = []
    refused: list[Refused] = []
    for arrival in arrivals:
        try:
            placement = place_vm(topology, arrival.request, on_host, options, unify)
        except PolicyRefusal as refusal:
            refused.append(Refused(arrival.request, refusal.kind, refusal.error_message))
            if until_refused:
                break
            continue
        done.append(placement)
        on_host = [vm for vm in on_host if vm.name != arrival.request.name]
        on_host.append(placed_from(placement, arrival.cache_weight))
    groups, nodes = host_load(topology, on_host, options, unify)
    return FleetResult(tuple(done), tuple(refused), groups, nodes)


def host_load(
    topology: Topology, placed: Sequence[PlacedVm], options: PlaceOptions, unify: Unify
) -> tuple[tuple[GroupLoad, ...], tuple[NodeLoad, ...]]:
    """Per-LLC-group and per-node load of a host with ``placed`` on it."""
    room = host_room(topology, unify, placed, options)
    groups = tuple(
        GroupLoad(u.id, u.node, len(u.cpus), room.used[u.id], room.slots[u.id], room.load[u.id])
        for u in room.units.values()
    )
    nodes = tuple(
        NodeLoad(
            node,
            room.node_cpus(node),
            sum(room.used[u] for u in units),
            sum(room.slots[u] for u in units),
            room.memory_used[node],
            room.memory[node],
        )
        for node, units in room.node_units.items()
    )
    return groups, nodes
