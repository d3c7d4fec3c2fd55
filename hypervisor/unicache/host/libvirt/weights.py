"""OBS-C's CPU credit for libvirt domains, through libvirt's own scheduler parameters.

libvirt owns its domains' cgroups (``machine.slice/machine-qemu-….scope`` under systemd):
moving a QEMU process or its threads into cgroups of unicache's, as the embedded backend
does (``host/linux/cgroup.py``), would take it out of ``machine.slice`` behind libvirt's
back.
So a libvirt domain's credit goes where libvirt keeps it, the domain's ``cpu_shares``
scheduler parameter (``virsh schedinfo --live``: ``cpu.weight`` on cgroup v2,
``cpu.shares`` on v1), set with ``virDomainSetSchedulerParametersFlags``.

libvirt has no per-vCPU shares, so a domain's shares carry the mean of its vCPUs' OBS-C
weights relative to :data:`~unicache.policy.obs.credit.BASE_CPU_WEIGHT`, applied to the shares
the domain had before unicache: a domain whose vCPUs are all credited 2 % gets 2 % more
than it had. The shares a domain had are journaled before the first change and put back
on shutdown (and, after a crash, at the next start); a value already applied is never
written again.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from unicache.host.ports import SharesPort
from unicache.policy.obs.credit import BASE_CPU_WEIGHT
from unicache.statefile import Checkpoint

#: libvirt's bounds for cpu_shares (cgroup v1 ``cpu.shares``; v2 takes 1..10000 and libvirt
#: refuses more, which the caller reports as a failed action)
MIN_SHARES = 2
MAX_SHARES = 262_144



def domain_shares(original: int, weights: Iterable[int]) -> int:
    """A domain's shares for its vCPUs' OBS-C weights.

    :param original: the shares the domain had before unicache.
    :param weights: its vCPUs' cpu weights (``BASE_CPU_WEIGHT``: no credit).
    """
    ratio = statistics.fmean(weights) / BASE_CPU_WEIGHT
    return max(MIN_SHARES, min(MAX_SHARES, round(original * ratio)))


class LibvirtWeights:
    """Sets each libvirt domain's ``cpu_shares`` from its vCPUs' OBS-C weights.

    The same interface as :class:`~unicache.host.linux.cgroup.CgroupWeights`, and the same
    dry run: with ``dry_run`` a weight is worked out from the domain's live shares (read,
    never written or journaled) and returned as what would be set.

    :param source: the libvirt source.
    :param journal: where each domain's original shares are kept until restored.
    :param dry_run: set and journal nothing; return what would be set.
    :raises OSError: from libvirt, when a domain refuses (the action is then failed).
    """

    def __init__(self, source: SharesPort, journal: Path, dry_run: bool = False) -> None:
        self.source = source
        self.journal = journal
        self.dry_run = dry_run
        self._checkpoint = Checkpoint(journal, "libvirt-shares-journal", 1)
        self._original: dict[str, int] = self._load()
        self._weights: dict[str, dict[int, int]] = {}
        self._applied: dict[str, int] = {}

    def _load(self) -> dict[str, int]:
        data = self._checkpoint.load()
        return {} if data is None else {str(k): int(v) for k, v in data["shares"].items()}

    def _store(self) -> None:
        self._checkpoint.save({"shares": self._original})

    def set_weight(self, vm: str, pid: int, vcpu: int, tid: int, weight: int) -> tuple[str, ...]:
        """Take one vCPU's weight into its domain's shares.

        :param vm: the domain.
        :param pid: unused (the embedded backend's cgroups need it).
        :param vcpu: the vCPU index.
        :param tid: unused.
        :param weight: its cpu weight.
        :returns: the write made, ``domain VM cpu_shares = N`` (with ``dry_run``: that
            would be made); empty when the domain has those shares from unicache already.
        """
        del pid, tid
        self._weights.setdefault(vm, {})[vcpu] = weight
        original = self._original.get(vm)
        if original is None:
            original = self.source.cpu_shares(vm)
            if not self.dry_run:
                self._original[vm] = original
                self._store()  # journaled before the change
        shares = domain_shares(original, self._weights[vm].values())
        if self._applied.get(vm) == shares:
            return ()
        line = (f"domain {vm} cpu_shares = {shares}",)
        if self.dry_run:
            return line
        self.source.set_cpu_shares(vm, shares)
        self._applied[vm] = shares
        return line

    def restore_all(self) -> list[str]:
        """Give every changed domain its original shares back; one line each.

        With ``dry_run``: one line per domain that would get its shares back, none set.
        """
        if self.dry_run:
            return [f"restore: domain {vm} cpu_shares would go back to {shares}"
                    for vm, shares in sorted(self._original.items())]
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
    from unicache.host.ports import WeightSetter

    _check: WeightSetter = LibvirtWeights(LibvirtVmSource(), Path())  # conformance
