"""Pinning of libvirt domains through libvirt, journaled first and restored on exit.

:class:`LibvirtActuator` pins through ``virDomainPinVcpuFlags``/``virDomainPinEmulator``
(live only) rather than ``sched_setaffinity``: libvirt confines vCPU threads to cpuset
cgroups it owns (``sched_setaffinity`` outside them fails with EINVAL) and re-applies its
own pinning on some operations, and ``virsh vcpupin``/``vcpuinfo`` then tell the admin the
truth. The original pinning is journaled first (like
:class:`~unicache.host.linux.affinity.Actuator`) and restored through libvirt on exit, or
at the next start after a crash.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from unicache.host.libvirt.source import LibvirtVmSource
from unicache.host.linux.affinity import Actuator, SavedAffinity, thread_start_time
from unicache.host.ports import VmSource
from unicache.statefile import Checkpoint

log = logging.getLogger(__name__)

_KEY = re.compile(r"^affinity/(?P<vm>.+)/vcpu(?P<index>\d+)$")

#: libvirt journal format version
LIBVIRT_JOURNAL_VERSION = 1
#: the vCPU index used for a domain's emulator entry
EMULATOR = -1


@dataclass(frozen=True, slots=True)
class SavedPin:
    """The live pinning a domain's vCPU (or emulator) had before unicache changed it.

    :param key: ``affinity/VM/vcpuN`` or ``emulator/VM``.
    :param vm: the domain name.
    :param uuid: its UUID.
    :param domid: its domain id (a restarted domain gets another one: nothing to restore).
    :param vcpu: the vCPU index, or :data:`EMULATOR`.
    :param tid: the vCPU thread (0 for the emulator): the fallback when libvirt is gone.
    :param start_time: that thread's start time.
    :param cpus: the original CPU set.
    """

    key: str
    vm: str
    uuid: str
    domid: int
    vcpu: int
    tid: int
    start_time: int
    cpus: tuple[int, ...]


class LibvirtActuator(Actuator):
    """Pins the vCPUs of libvirt domains through libvirt, journaling the originals first.

    Keys of VMs the source does not manage go to the plain thread-affinity actuator. After
    a domain's vCPUs are pinned, its emulator threads are pinned away from them (to the
    host CPUs none of its vCPUs is pinned to; all CPUs when that leaves none).

    :param journal: the thread journal; the libvirt journal sits beside it.
    :param source: the libvirt source.
    :param dry_run: change nothing.
    """

    def __init__(self, journal: Path, source: LibvirtVmSource, dry_run: bool = False) -> None:
        super().__init__(journal, dry_run)
        self.source = source
        self.lv_journal = journal.with_name("libvirt-journal.json")
        self._lv_checkpoint = Checkpoint(self.lv_journal, "libvirt-pin-journal",
                                         LIBVIRT_JOURNAL_VERSION,
                                         legacy_version=LIBVIRT_JOURNAL_VERSION)
        self._pins: dict[str, SavedPin] = self._load_pins()
        self._wanted: dict[str, dict[int, frozenset[int]]] = {}
        self._emulator: dict[str, frozenset[int]] = {}

    def _load_pins(self) -> dict[str, SavedPin]:
        data = self._lv_checkpoint.load()
        if data is None:
            return {}
        pins = [SavedPin(**{**e, "cpus": tuple(e["cpus"])}) for e in data.get("pins", [])]
        return {p.key: p for p in pins}

    def _store_pins(self) -> None:
        payload = {
            "version": LIBVIRT_JOURNAL_VERSION,
            "pins": [asdict(p) for _, p in sorted(self._pins.items())],
        }
        self._lv_checkpoint.save(payload)

    @property
    def pending(self) -> tuple[SavedAffinity, ...]:
        """Changes a restore would undo (threads and libvirt pins)."""
        pins = tuple(
            SavedAffinity(p.key, p.tid, p.start_time, p.cpus) for _, p in sorted(self._pins.items())
        )
        return super().pending + pins

    def set_affinity(self, key: str, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        """Pin a vCPU; through libvirt when its VM is a domain of the source.

        :raises OSError: when libvirt refuses or is unreachable (the round retries).
        """
        match = _KEY.match(key)
        if match is None or not self.source.manages(match["vm"]):
            return super().set_affinity(key, tid, cpus)
        vm, index = match["vm"], int(match["index"])
        wanted = frozenset(cpus)
        if self.dry_run or self._wanted.get(vm, {}).get(index) == wanted:
            return wanted
        uuid, domid = self.source.identity(vm)
        saved = self._pins.get(key)
        if saved is None or (saved.uuid, saved.domid) != (uuid, domid):
            original = self.source.vcpu_pins(vm).get(index, frozenset())
            start = thread_start_time(tid) or 0
            self._pins[key] = SavedPin(
                key, vm, uuid, domid, index, tid, start, tuple(sorted(original))
            )
            ekey = f"emulator/{vm}"
            esaved = self._pins.get(ekey)
            if esaved is None or (esaved.uuid, esaved.domid) != (uuid, domid):
                eorig = tuple(sorted(self.source.emulator_pins(vm)))
                self._pins[ekey] = SavedPin(ekey, vm, uuid, domid, EMULATOR, 0, 0, eorig)
            self._store_pins()  # saved before the write: a crash now still restores
        self.source.pin_vcpu(vm, index, wanted)
        self._wanted.setdefault(vm, {})[index] = wanted
        self._pin_emulator_away(vm)
        return wanted

    def _pin_emulator_away(self, vm: str) -> None:
        everything = frozenset(range(self.source.host_cpus()))
        busy = frozenset().union(*self._wanted.get(vm, {}).values())
        target = (everything - busy) or everything
        if self._emulator.get(vm) == target:
            return
        self.source.pin_emulator(vm, target)
        self._emulator[vm] = target
        log.info("vm=%s emulator cpus=%s (away from its vCPUs)", vm, sorted(target))

    def forget(self, key: str) -> None:
        """Drop journal entries without restoring (the domain or thread is gone)."""
        super().forget(key)
        saved = self._pins.pop(key, None)
        if saved is None:
            return
        self._wanted.get(saved.vm, {}).pop(saved.vcpu, None)
        if not any(p.vm == saved.vm and p.vcpu != EMULATOR for p in self._pins.values()):
            self._pins.pop(f"emulator/{saved.vm}", None)
            self._emulator.pop(saved.vm, None)
            self._wanted.pop(saved.vm, None)
        self._store_pins()

    def restore(self, key: str) -> str:
        """Put one vCPU's pin back (a policy released it); the emulator's too once none of
        its domain's vCPUs stays pinned.

        :raises OSError: when libvirt refuses or is unreachable (the round retries).
        """
        pin = self._pins.get(key)
        if pin is None:
            return super().restore(key)
        if self.dry_run:
            return f"release: {key}: would go back on cpus {pin.cpus} (libvirt)"
        if self.source.identity(pin.vm) == (pin.uuid, pin.domid):
            self.source.pin_vcpu(pin.vm, pin.vcpu, pin.cpus)
        self._wanted.get(pin.vm, {}).pop(pin.vcpu, None)
        lines = [f"release: {key}: back on cpus {pin.cpus} (libvirt)"]
        ekey = f"emulator/{pin.vm}"
        emulator = self._pins.get(ekey)
        others = any(p.vm == pin.vm and p.vcpu != EMULATOR and p.key != key
                     for p in self._pins.values())
        if emulator is not None and not others:
            lines.append(self._restore(ekey, emulator))
        elif emulator is not None:
            self._emulator.pop(pin.vm, None)
            self._pin_emulator_away(pin.vm)
        self.forget(key)
        return "; ".join(lines)

    def restore_all(self) -> list[str]:
        """Put every journaled pin back (through libvirt; by thread when it is gone).

        With ``dry_run``: one line per pin that would go back, nothing set.

        :returns: one line per entry.
        """
        lines = super().restore_all()
        if self.dry_run:
            return lines + [f"restore: {key}: would go back on cpus {pin.cpus} (libvirt)"
                            for key, pin in sorted(self._pins.items())]
        for key, pin in sorted(self._pins.items()):
            lines.append(self._restore(key, pin))
        self._pins.clear()
        self._wanted.clear()
        self._emulator.clear()
        self._store_pins()
        return lines

    def _restore(self, key: str, pin: SavedPin) -> str:
        try:
            if self.source.identity(pin.vm) != (pin.uuid, pin.domid):
                return f"restore: {key}: domain {pin.vm} restarted or gone, nothing to do"
            if pin.vcpu == EMULATOR:
                self.source.pin_emulator(pin.vm, pin.cpus)
            else:
                self.source.pin_vcpu(pin.vm, pin.vcpu, pin.cpus)
            return f"restore: {key}: back on cpus {pin.cpus} (libvirt)"
        except OSError as err:
            why = err.strerror or str(err)
        if pin.tid and pin.start_time and thread_start_time(pin.tid) == pin.start_time:
            try:
                os.sched_setaffinity(pin.tid, pin.cpus)
            except OSError as err:
                return f"restore: {key}: failed: {why}; by thread: {err.strerror}"
            return (
                f"restore: {key}: libvirt unreachable ({why}); thread {pin.tid} back on cpus "
                f"{pin.cpus} (libvirt's live XML still shows unicache's pin)"
            )
        return f"restore: {key}: not restored: {why}"


def make_actuator(source: VmSource, journal: Path, dry_run: bool = False) -> Actuator:
    """The actuator for a source: libvirt pinning for libvirt domains, threads otherwise.

    :param source: the daemon's VM source.
    :param journal: the journal path.
    :param dry_run: change nothing.
    """
    if isinstance(source, LibvirtVmSource):
        return LibvirtActuator(journal, source, dry_run)
    return Actuator(journal, dry_run)


if TYPE_CHECKING:
    from unicache.host.ports import AffinitySetter

    _check: AffinitySetter = LibvirtActuator(Path(), LibvirtVmSource())  # conformance
