"""OBS-C's CPU credit for libvirt domains, through libvirt's own scheduler parameters.

libvirt owns its domains' cgroups (``machine.slice/machine-qemu-….scope`` under systemd):
moving a QEMU process or its threads into cgroups of unicache's, as the embedded backend
does (``host/linux/cgroup.py``), would take it out of ``machine.slice`` behind libvirt's
back.
So a libvirt domain's credit goes where libvirt keeps it, the domain's ``cpu_shares``
scheduler parameter (``virsh schedinfo --live``: ``cpu.weight`` on cgroup v2,
``cpu.shares`` on v1), set with ``virDomainSetSchedulerParametersFlags``.

libvirt has no per-vCPU shares, so a domain's shares carry the mean of its vCPUs' OBS-C
weights relative to :data:`~unicache.policy.obscredit.BASE_CPU_WEIGHT`, applied to the shares
the domain had before unicache: a domain whose vCPUs are all credited 2 % gets 2 % more
than it had. The shares a domain had are journaled before the first change and put back
on shutdown (and, after a crash, at the next start); a value already applied is never
written again.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from unicache.policy.obscredit import BASE_CPU_WEIGHT
from unicache.statefile import Checkpoint

#: libvirt's bounds for cpu_shares (cgroup v1 ``cpu.shares``; v2 takes 1..10000 and libvirt
#: refuses more, which the caller reports as a failed action)
MIN_SHARES = 2
MAX_SHARES = 262_144


class SharesPort(Protocol):
    """The libvirt calls this needs (``LibvirtVmSource``)."""

    def cpu_shares(self, name: str) -> int:
        """The domain's live ``cpu_shares``."""

    def set_cpu_shares(self, name: str, shares: int) -> None:
        """Set the domain's live ``cpu_shares``."""


def domain_shares(original: int, weights: Iterable[int]) -> int:
    """A domain's shares for its vCPUs' OBS-C weights.

    :param original: the shares the domain had before unicache.
    :param weights: its vCPUs' cpu weights (``BASE_CPU_WEIGHT``: no credit).
    """
    ratio = statistics.fmean(weights) / BASE_CPU_WEIGHT
    return max(MIN_SHARES, min(MAX_SHARES, round(original * ratio)))


class LibvirtWeights:
    """Sets each libvirt domain's ``cpu_shares`` from its vCPUs' OBS-C weights.

    The same interface as :class:`~unicache.host.linux.cgroup.CgroupWeights`.

    :param source: the libvirt source.
    :param journal: where each domain's original shares are kept until restored.
    :raises OSError: from libvirt, when a domain refuses (the action is then failed).
    """

    def __init__(self, source: SharesPort, journal: Path) -> None:
        self.source = source
        self.journal = journal
        self._checkpoint = Checkpoint(journal, "libvirt-shares-journal", 1)
        self._original: dict[str, int] = self._load()
        self._weights: dict[str, dict[int, int]] = {}
        self._applied: dict[str, int] = {}

    def _load(self) -> dict[str, int]:
        data = self._checkpoint.load()
        return {} if data is None else {str(k): int(v) for k, v in data["shares"].items()}

    def _store(self) -> None:
        self._checkpoint.save({"shares": self._original})

    def set_weight(self, vm: str, pid: int, vcpu: int, tid: int, weight: int) -> None:
        """Take one vCPU's weight into its domain's shares.

        :param vm: the domain.
        :param pid: unused (the embedded backend's cgroups need it).
        :param vcpu: the vCPU index.
        :param tid: unused.
        :param weight: its cpu weight.
        """
        del pid, tid
        self._weights.setdefault(vm, {})[vcpu] = weight
        if vm not in self._original:
            self._original[vm] = self.source.cpu_shares(vm)
            self._store()  # journaled before the change
        shares = domain_shares(self._original[vm], self._weights[vm].values())
        if self._applied.get(vm) == shares:
            return
        self.source.set_cpu_shares(vm, shares)
        self._applied[vm] = shares

    def restore_all(self) -> list[str]:
        """Give every changed domain its original shares back; one line each."""
        lines = []
        for vm, shares in sorted(self._original.items()):
            try:
                self.source.set_cpu_shares(vm, shares)
                lines.append(f"restore: domain {vm} cpu_shares back to {shares}")
            except OSError as err:  # gone, or libvirtd away: nothing left to restore
                lines.append(f"restore: domain {vm} cpu_shares: {err}")
        self._original.clear()
        self._weights.clear()
        self._applied.clear()
        self._store()
        return lines


if TYPE_CHECKING:
    from unicache.host.libvirt.source import LibvirtVmSource
    from unicache.host.live import WeightSetter

    _check: WeightSetter = LibvirtWeights(LibvirtVmSource(), Path())  # conformance
