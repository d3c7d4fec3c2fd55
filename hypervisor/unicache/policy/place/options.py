"""Options of the placement policy (:mod:`unicache.policy.place.vm`) and the one parser for them.

Pure: a raw mapping (the ``[place]`` table of the daemon's TOML config, docs/placement.md
"Capacity") in, a frozen :class:`PlaceOptions` out. Option names are constants; an
unknown option or a value out of its bounds is a :class:`~unicache.errors.ConfigError`
naming it, as the Kubernetes CPU manager's ``policy_options.go`` parses its static
policy options ("bad value for option"). Capacity (overcommit, memory per node) is an
input of the policy, never a guess inside it ("Policy: Migrating across caches" places
by cache load only where there is room).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unicache.errors import ConfigError


class Profile(enum.StrEnum):
    """How a VM's vCPUs use the LLC groups of its NUMA node."""

    #: fill whole LLC groups: vCPUs that share data share one L3 (Kubernetes CPU manager's
    #: uncore-cache alignment, ``takeFullUncoreCaches``)
    COMPACT = "compact"
    #: over the node's lightest LLC groups: cache-heavy independent vCPUs do not evict each
    #: other (OBS-X, "Policy: Migrating across caches")
    SPREAD = "spread"
    #: compact or spread from the observed cache weights of VMs of the same flavor or name
    AUTO = "auto"


class MemoryMode(enum.StrEnum):
    """libvirt's ``<numatune>`` mode for the VM's memory (https://libvirt.org/formatdomain.html)."""

    #: the memory is allocated on the nodes, and only there (memory policy and cgroup)
    STRICT = "strict"
    #: only the cgroup's ``cpuset.mems`` restricts it (libvirt >= 7.10): changeable live
    RESTRICTIVE = "restrictive"


#: option names (the keys of the config's ``[place]`` table)
CPU_OVERCOMMIT = "cpu_overcommit"
MEMORY_PER_NODE_MIB = "memory_per_node_mib"
MEMORY_RESERVE_MIB = "memory_reserve_mib"
MEMORY_MODE = "memory_mode"
PROFILE = "profile"
AUTO_DEFAULT = "auto_default"

#: bounded numeric options: (lowest, highest)
BOUNDS: dict[str, tuple[float, float]] = {
    CPU_OVERCOMMIT: (1.0, 16.0),
    MEMORY_PER_NODE_MIB: (0, 1 << 32),
    MEMORY_RESERVE_MIB: (0, 1 << 32),
}


@dataclass(frozen=True, slots=True)
class PlaceOptions:
    """Capacity and defaults of the placement.

    :param cpu_overcommit: vCPUs an LLC group may hold per CPU, all VMs together
        (1.0: one vCPU per CPU; a VM never holds more of its own vCPUs on a group than
        the group has CPUs, whatever the ratio).
    :param memory_per_node_mib: memory VMs may use on each NUMA node (0: the node's
        memory as the topology gives it).
    :param memory_reserve_mib: memory kept for the host on each node (subtracted).
    :param memory_mode: ``<numatune>`` mode for ``memory`` and every ``memnode``.
    :param profile: the profile of a request that names none.
    :param auto_default: what ``auto`` chooses when no weights of the flavor are known.
    """

    cpu_overcommit: float = 1.0
    memory_per_node_mib: int = 0
    memory_reserve_mib: int = 0
    memory_mode: MemoryMode = MemoryMode.STRICT
    profile: Profile = Profile.AUTO
    auto_default: Profile = Profile.COMPACT


#: every option name
OPTION_NAMES = frozenset(
    {CPU_OVERCOMMIT, MEMORY_PER_NODE_MIB, MEMORY_RESERVE_MIB, MEMORY_MODE, PROFILE, AUTO_DEFAULT}
)


def place_options_from(raw: Mapping[str, Any], origin: str = "[place]") -> PlaceOptions:
    """Parse raw options (strings, numbers) into :class:`PlaceOptions`.

    :param raw: option name -> value (a TOML table).
    :param origin: where they come from, for messages.
    :raises ConfigError: naming an unknown option or the first bad value.
    """
    unknown = sorted(set(raw) - OPTION_NAMES)
    if unknown:
        raise ConfigError(
            f"{origin}: unknown option {unknown[0]!r} (known: {', '.join(sorted(OPTION_NAMES))})"
        )
    try:
        options = PlaceOptions(
            cpu_overcommit=_number(raw, CPU_OVERCOMMIT, 1.0, float),
            memory_per_node_mib=int(_number(raw, MEMORY_PER_NODE_MIB, 0, int)),
            memory_reserve_mib=int(_number(raw, MEMORY_RESERVE_MIB, 0, int)),
            memory_mode=MemoryMode(raw.get(MEMORY_MODE, MemoryMode.STRICT)),
            profile=Profile(raw.get(PROFILE, Profile.AUTO)),
            auto_default=Profile(raw.get(AUTO_DEFAULT, Profile.COMPACT)),
        )
    except ValueError as err:
        raise ConfigError(f"{origin}: bad value for an option ({err})") from err
    if options.auto_default is Profile.AUTO:
        raise ConfigError(f"{origin}: {AUTO_DEFAULT} must be 'compact' or 'spread'")
    for name, (low, high) in BOUNDS.items():
        value = getattr(options, name)
        if not low <= value <= high:
            raise ConfigError(f"{origin}: {name} must be within {low:g}..{high:g}, not {value:g}")
    return options


def _number(raw: Mapping[str, Any], name: str, default: float, kind: type) -> float:
    value = raw.get(name, default)
    # TOML gives bool for true/false: never a number here
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number of MiB, not {value!r}")
    return float(value) if kind is float else int(value)
