"""What is already on this host, for the placement policy: the daemon's status, merged with libvirt.

Two sources describe the VMs of a live host, each with what the other lacks:

* the daemon's status (``STATE_DIR/status.json``, written every round by
  :func:`unicache.roundrecord.write_status`): every managed vCPU with the cache unit it
  sits in and its observed cache weight (OBS "cache weight"), but no memory;
* libvirt (:func:`unicache.host.libvirt.placement.placed_from_libvirt`): every running
  domain's vCPU pins, memory and ``<numatune>`` nodes, and the placement unicache recorded
  in its metadata, but no weights.

:func:`merge_placed` joins them by VM name. Units are matched by CPUs, not by id, so a
status written at another ``--unify`` level still counts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from unicache.cpulist import parse_list
from unicache.errors import ConfigError, StateError
from unicache.policy.place.types import PlacedVm, flavor_of
from unicache.statefile import status_checkpoint
from unicache.topology import CacheUnit


def units_covering(units: Iterable[CacheUnit], cpus: frozenset[int]) -> frozenset[int]:
    """The units whose CPUs meet ``cpus``."""
    return frozenset(u.id for u in units if u.cpus & cpus)


def placed_from_status(
    status: Mapping[str, Any], units: Sequence[CacheUnit], exclude: str | None = None
) -> tuple[PlacedVm, ...]:
    """The VMs of a daemon status, with the units and weights of their vCPUs.

    :param status: the status (``unicache status --json`` shows the same).
    :param units: the cache units placement uses.
    :param exclude: a VM to leave out (the one being placed).
    :raises ConfigError: when the status is malformed.
    """
    try:
        unit_cpus = {int(u["id"]): parse_list(str(u["cpus"])) for u in status.get("units", [])}
        by_vm: dict[str, dict[int, tuple[frozenset[int], float]]] = {}
        for entry in status.get("vcpus", []):
            vm = str(entry["vm"])
            cpus = unit_cpus.get(int(entry["unit"]), frozenset())
            covered = units_covering(units, cpus)
            by_vm.setdefault(vm, {})[int(entry["vcpu"])] = (
                covered, float(entry.get("cache_weight", 0.0)))
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError("the daemon's status is malformed") from err
    out = []
    for vm, vcpus in sorted(by_vm.items()):
        if vm == exclude:
            continue
        order = sorted(vcpus)
        out.append(PlacedVm(vm, flavor_of(vm), tuple(vcpus[i][0] for i in order),
                            tuple(vcpus[i][1] for i in order)))
    return tuple(out)


def load_status(state_dir: Path) -> dict[str, Any] | None:
    """The daemon's status, or ``None`` without a daemon.

    :raises ConfigError: when it exists but cannot be read.
    """
    try:
        return status_checkpoint(state_dir).load()
    except StateError as err:
        raise ConfigError(f"cannot read the daemon's status: {err.error_message}") from err


def quiet_status(state_dir: Path) -> dict[str, Any] | None:
    """:func:`load_status`, ``None`` on any problem (the libvirt hook never fails on it)."""
    with contextlib.suppress(OSError, ValueError, TypeError, StateError, ConfigError):
        return load_status(state_dir)
    return None


def merge_placed(
    from_status: Sequence[PlacedVm], from_libvirt: Sequence[PlacedVm]
) -> tuple[PlacedVm, ...]:
    """One :class:`PlacedVm` per VM: libvirt's pins and memory, the status's weights.

    :param from_status: :func:`placed_from_status`.
    :param from_libvirt: the running libvirt domains.
    """
    weights = {vm.name: vm.weights for vm in from_status}
    out = [
        PlacedVm(vm.name, vm.flavor, vm.vcpu_units, weights.get(vm.name, vm.weights),
                 vm.memory_mib, vm.placement)
        for vm in from_libvirt
    ]
    seen = {vm.name for vm in from_libvirt}
    out += [vm for vm in from_status if vm.name not in seen]
    return tuple(sorted(out, key=lambda vm: vm.name))
