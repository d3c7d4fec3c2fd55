"""The ports: every Protocol the policy loop and the live host drive, and the values that
cross them, in one place.

* :class:`Host` (replayed, simulated and live hosts) and :class:`RoundHost` (the loop's
  view, whose observing may wait) with :class:`ActResult`, what acting did;
* the live host's own: :class:`VmSource` (embedded QEMU, libvirt, procfs) with
  :class:`RunningVm` and :class:`VmEvent`; :class:`AffinitySetter`,
  :class:`WeightSetter`, :class:`Publisher` (the guest channel) and :class:`PerfPort`;
* :class:`SharesPort`, the libvirt calls behind libvirt's CPU weights.

Adapters implement them structurally (no base class): ``host/linux``, ``host/libvirt``,
``host/qemu``, ``channel``, and the simulator's hosts. Actions are carried out one way,
through :meth:`Host.act` (the live host: each action to its setter or the publisher).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from unicache.host.linux.affinity import SavedAffinity
from unicache.host.linux.perf import ThreadCounts
from unicache.model import Action, GuestNode, Observation, PublishPlacement


@dataclass(frozen=True, slots=True)
class ActResult:
    """What a host did with a round's actions (failures are retried next round).

    :param applied: actions carried out (in a dry run: that would have been).
    :param failed: ``(action, why)`` for each action that could not be carried out.
    :param would_write: in a dry run, one entry per action of ``applied``, in order: the
        writes its setter would have made, one line each (empty: none, or not a dry run).
    """

    applied: tuple[Action, ...]
    failed: tuple[tuple[Action, str], ...] = ()
    would_write: tuple[tuple[str, ...], ...] = ()

    def applied_with_writes(self) -> list[tuple[Action, tuple[str, ...]]]:
        """Each applied action with what it would have written (``()`` when not known)."""
        writes = self.would_write
        return [(a, writes[i] if i < len(writes) else ()) for i, a in enumerate(self.applied)]


class Host(Protocol):
    """A host: observe one interval, then act on the decided actions."""

    name: str

    def observe(self) -> Observation | None:
        """Observe the next interval; ``None`` when there is nothing more to observe."""

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out actions; never raises for one failed action."""


class RoundHost(Protocol):
    """A host as the loop sees it: observing may wait (the daemon lists VMs over QMP or
    libvirt and serves its guest channels meanwhile)."""

    async def observe(self) -> Observation | None:
        """The next interval's observation; ``None`` when there is nothing more."""

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out actions; never raises for one failed action."""


@dataclass(frozen=True, slots=True)
class RunningVm:
    """A running VM as a backend (embedded QEMU, libvirt) describes it.

    :param name: unique name.
    :param pid: the hypervisor process.
    :param vcpu_threads: vCPU index -> host thread id.
    :param agent_socket: the unix socket of its guest channel, if it has one.
    :param agent_listens: the hypervisor listens on ``agent_socket`` (libvirt's
        ``mode='bind'``, QEMU ``server=on``) and unicache dials it; otherwise unicache
        listens and the hypervisor connects.
    :param memory_bytes: guest RAM.
    :param vcpu_times: vCPUs that run on no host thread (Xen through libvirt): index ->
        (their CPUs, cumulative CPU time in ns) as the hypervisor reports them this round.
    :param nodes: its guest NUMA nodes as the backend built them (colored ones included).
    """

    name: str
    pid: int
    vcpu_threads: Mapping[int, int]
    agent_socket: Path | None = None
    memory_bytes: int = 0
    vcpu_times: Mapping[int, tuple[frozenset[int], int]] = field(default_factory=dict)
    nodes: tuple[GuestNode, ...] = ()
    agent_listens: bool = False


@dataclass(frozen=True, slots=True)
class VmEvent:
    """A lifecycle event a backend delivered between two rounds (libvirt's).

    :param time: wall-clock seconds.
    :param vm: the VM's name ("" for the backend itself, e.g. a reconnect).
    :param kind: ``started``, ``stopped``, ``migrated-away``, ``crashed``, ...
    :param detail: the backend's detail for it (``destroyed``, ``migrated``, ...).
    """

    time: float
    vm: str
    kind: str
    detail: str


class VmSource(Protocol):
    """A backend that lists the running VMs: everything the daemon's loop calls on it."""

    def running(self) -> list[RunningVm]:
        """The VMs running now; a VM that cannot be queried is left out (and logged)."""

    def drain_events(self) -> list[VmEvent]:
        """Lifecycle events since the last call, oldest first (none for most backends)."""

    def close(self) -> None:
        """Let go of the backend (the VMs keep running)."""


class AffinitySetter(Protocol):
    """Pins vCPUs and puts back what it changed, journaled (``host/linux/affinity.py`` for
    threads, ``host/libvirt/actuator.py`` for libvirt domains)."""

    @property
    def pending(self) -> tuple[SavedAffinity, ...]:
        """Changes that a restore would undo."""

    def set_affinity(self, key: str, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        """Pin one vCPU (``tid`` 0: through the hypervisor); returns the CPUs it had.

        :raises OSError: when refused (the action fails and is retried next round).
        """

    def restore(self, key: str) -> str:
        """Put one pinned vCPU back as it was (a policy released it); one line.

        :raises OSError: when refused (the action fails and is retried next round).
        """

    def forget(self, key: str) -> None:
        """Drop a journal entry whose thread is gone."""

    def restore_all(self) -> list[str]:
        """Undo every change; one line each."""


class WeightSetter(Protocol):
    """Sets vCPU CPU weights and puts back what it changed (``host/linux/cgroup.py`` for
    unicache's own QEMU, ``host/libvirt/weights.py`` for libvirt domains). Built with
    ``dry_run``, it writes nothing and returns what it would write."""

    def set_weight(self, vm: str, pid: int, vcpu: int, tid: int, weight: int) -> tuple[str, ...]:
        """Give one vCPU a weight.

        :returns: the writes made (in a dry run: that would be), one line each.
        :raises OSError: when refused.
        """

    def restore_all(self) -> list[str]:
        """Undo every change; one line each."""


class Publisher(Protocol):
    """Sends placement tables to guest agents (the channel server)."""

    def publish(self, action: PublishPlacement, dry_run: bool = False) -> tuple[bytes, ...]:
        """Queue a table for a VM's agent (``dry_run``: only encode it).

        :returns: the lines sent (that would be, with ``dry_run``); empty if the agent is
            not connected.
        """


class PerfPort(Protocol):
    """What the live host needs from performance counters."""

    def read(self, tid: int) -> ThreadCounts | None:
        """Cumulative counts of a thread (opening its counters on first use)."""

    def forget(self, tid: int) -> None:
        """Close a thread's counters."""

    def close(self) -> None:
        """Close every counter."""


class SharesPort(Protocol):
    """The libvirt calls this needs (``LibvirtVmSource``)."""

    def cpu_shares(self, name: str) -> int:
        """The domain's live ``cpu_shares``."""

    def set_cpu_shares(self, name: str, shares: int) -> None:
        """Set the domain's live ``cpu_shares``."""
