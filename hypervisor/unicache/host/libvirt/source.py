"""The libvirt domains as a VmSource: running domains, their vCPU threads and agent channels.

:class:`LibvirtVmSource` is a :class:`~unicache.host.live.VmSource` for the domains of a
libvirtd (``qemu:///system`` by default). It follows lifecycle events (libvirt's default
event loop runs in a thread), so a domain that stops, restarts or migrates away between
two rounds is re-read, never mistaken for the old one; a ``listAllDomains`` each round is
the safety net. When libvirtd goes away (restart, upgrade) the close callback fires, the
source keeps the domains it knew (QEMU keeps running without libvirtd) and reconnects at
the next round; nothing the daemon holds is lost.

vCPU threads come from QMP ``query-cpus-fast`` through ``virDomainQemuMonitorCommand``
(QEMU/KVM only; libvirt marks the domain "tainted: custom-monitor" for it). Xen (libxl)
domains have no host vCPU threads and no QMP: they are listed without threads, with one
line saying so, and pinned through the same libvirt calls.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unicache.errors import ConfigError, ProtocolError
from unicache.host.libvirt.binding import (
    EVENT_NAMES,
    STOPPED_DETAILS,
    _alive,
    _as_oserror,
    _live,
    _message,
    _tgid,
    _vcpu_times,
    ensure_event_loop,
    libvirt,
    libvirt_qemu,
)
from unicache.host.libvirt.channel import make_placeholder_socket
from unicache.host.libvirt.domain_xml import DomainXml, parse_domain, parse_query_cpus_fast
from unicache.host.ports import RunningVm, VmEvent, VmSource
from unicache.model import GuestNode

log = logging.getLogger(__name__)

#: the URI the daemon tries when no --connect is given
DEFAULT_URI = "qemu:///system"
#: seconds between reconnect attempts while libvirtd is unreachable
RECONNECT_INTERVAL_S = 1.0
#: libvirt keepalive: probe every 5 s, give up after 3 unanswered probes
KEEPALIVE = (5, 3)
#: lifecycle events kept for :meth:`LibvirtVmSource.drain_events`
MAX_EVENTS = 1024


@dataclass(frozen=True, slots=True)
class _Known:
    domid: int
    xml: DomainXml
    vm: RunningVm


class LibvirtVmSource:
    """The running domains of one libvirtd, kept current by lifecycle events.

    Call :meth:`connect` first (or use :func:`choose_vm_source`).

    :param uri: the libvirt URI.
    :param reconnect_interval_s: minimum seconds between reconnect attempts.
    :param clock: monotonic clock.
    """

    def __init__(
        self,
        uri: str = DEFAULT_URI,
        reconnect_interval_s: float = RECONNECT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if libvirt is None:
            raise ConfigError("libvirt-python is not installed (pip install libvirt-python)")
        self.uri = uri
        self._interval = reconnect_interval_s
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: Any = None
        self._callbacks: list[int] = []
        self._lost: str | None = None
        self._next_try = 0.0
        self._known: dict[str, _Known] = {}
        self._dirty: set[str] = set()
        self._events: deque[VmEvent] = deque(maxlen=MAX_EVENTS)
        self._noted: set[str] = set()
        self._sockets: set[Path] = set()
        #: successful reconnects since :meth:`connect`
        self.reconnects = 0
        #: the hypervisor driver libvirt reports (``QEMU``, ``Xen``, ...)
        self.driver = ""

    # Section: connection lifecycle --------------------------------------------------------

    def connect(self) -> None:
        """Open the connection and subscribe to lifecycle and close events.

        :raises ConfigError: when libvirtd is unreachable at :attr:`uri`.
        """
        ensure_event_loop()
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as err:
            raise ConfigError(f"cannot connect to libvirt at {self.uri}: {_message(err)}") from err
        try:
            with contextlib.suppress(libvirt.libvirtError):
                conn.setKeepAlive(*KEEPALIVE)
            conn.registerCloseCallback(self._on_close, None)
            callback = conn.domainEventRegisterAny(
                None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
            )
            added = conn.domainEventRegisterAny(
                None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED, self._on_device_added, None
            )
            driver = conn.getType()
        except libvirt.libvirtError as err:  # libvirtd went away again right after open
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()
            raise ConfigError(
                f"cannot subscribe to libvirt at {self.uri}: {_message(err)}"
            ) from err
        with self._lock:
            self._conn = conn
            self._callbacks = [callback, added]
            self._lost = None
            self.driver = driver
            # events may have been missed while disconnected: re-read every domain
            self._dirty.update(self._known)
        if self.driver != "QEMU":
            self._note(
                f"libvirt driver {self.driver}: no QMP, so no host vCPU threads or per-thread "
                "counters; vCPUs are pinned through libvirt vcpupin only"
            )

    def close(self) -> None:
        """Unsubscribe and close the connection (the known domains are kept).

        Agent sockets that went missing (the daemon's channel server removes its sockets
        when it stops) get their placeholder back, so those domains can start again.
        """
        self._keep_placeholders(set())
        with self._lock:
            conn, self._conn = self._conn, None
            callbacks, self._callbacks = self._callbacks, []
        if conn is None:
            return
        with contextlib.suppress(libvirt.libvirtError):
            for callback in callbacks:
                conn.domainEventDeregisterAny(callback)
            conn.unregisterCloseCallback()
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()

    @property
    def connected(self) -> bool:
        """Whether the connection is open and alive."""
        with self._lock:
            conn = self._conn
        if conn is None:
            return False
        try:
            return bool(conn.isAlive())
        except libvirt.libvirtError:
            return False

    def _on_close(self, _conn: Any, reason: int, _opaque: object) -> None:
        # runs in the event thread: only record it, the next round reconnects
        log.warning("libvirt connection to %s closed (reason %d); will reconnect", self.uri, reason)
        with self._lock:
            self._lost = f"closed (reason {reason})"

    def _ensure_connected(self) -> bool:
        with self._lock:
            lost = self._lost is not None or self._conn is None
        if not lost and self.connected:
            return True
        now = self._clock()
        if now < self._next_try:
            return False
        self._next_try = now + self._interval
        self.close()
        try:
            self.connect()
        except ConfigError as err:
            log.info("libvirt still unreachable: %s", err)
            return False
        self.reconnects += 1
        log.warning("reconnected to libvirt at %s", self.uri)
        self._events.append(VmEvent(time.time(), "", "reconnected", self.uri))
        return True

    def _note(self, line: str) -> None:
        if line not in self._noted:
            self._noted.add(line)
            log.warning("%s", line)

    # Section: events ----------------------------------------------------------------------

    def _on_lifecycle(self, _conn: Any, dom: Any, event: int, detail: int, _opaque: object) -> None:
        # runs in the event thread: record and mark, never call back into libvirt here
        name = dom.name()
        kind = EVENT_NAMES[event] if 0 <= event < len(EVENT_NAMES) else f"event-{event}"
        what = str(detail)
        if kind == "stopped":
            what = STOPPED_DETAILS[detail] if 0 <= detail < len(STOPPED_DETAILS) else what
            if what == "migrated":
                kind = "migrated-away"
        with self._lock:
            self._events.append(VmEvent(time.time(), name, kind, what))
            self._dirty.add(name)
            if kind in ("stopped", "migrated-away", "crashed"):
                self._known.pop(name, None)
        log.info("domain=%s event=%s detail=%s", name, kind, what)

    def _on_device_added(self, _conn: Any, dom: Any, alias: str, _opaque: object) -> None:
        # a hot-plugged agent channel (`unicache attach`): re-read the domain's XML
        name = dom.name()
        with self._lock:
            self._events.append(VmEvent(time.time(), name, "device-added", alias))
            self._dirty.add(name)

    def drain_events(self) -> list[VmEvent]:
        """The lifecycle events received since the last call, oldest first."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
        return out

    # Section: VmSource --------------------------------------------------------------------

    def running(self) -> list[RunningVm]:
        """The running domains with their vCPU threads and agent sockets.

        While libvirtd is unreachable, the domains known before whose process still runs.
        """
        if not self._ensure_connected():
            return self._survivors()
        with self._lock:
            conn = self._conn
        try:
            domains = conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        except libvirt.libvirtError as err:
            log.warning("libvirt: cannot list domains: %s", _message(err))
            with self._lock:
                self._lost = "list failed"
            return self._survivors()
        seen: dict[str, _Known] = {}
        for dom in domains:
            try:
                known = self._refresh(dom)
            except libvirt.libvirtError as err:
                if not self.connected:
                    # libvirtd went away mid-round: keep what is known, reconnect later
                    with self._lock:
                        self._lost = "lost during refresh"
                    return self._survivors()
                # it stopped between the listing and now, or QMP is busy: keep what was
                # known (a VM dropped for one round would lose its journaled pins), retry
                name = dom.name()
                log.info("domain %s not re-read this round: %s", name, _message(err))
                with self._lock:
                    old = self._known.get(name)
                    self._dirty.add(name)
                if old is not None:
                    seen[name] = old
                continue
            except ProtocolError as err:
                self._note(f"domain {dom.name()}: {err}; left out")
                continue
            if self.driver != "QEMU":
                # no host threads: this round's vCPU CPU times and pins from the hypervisor
                known = replace(known, vm=replace(known.vm, vcpu_times=_vcpu_times(dom)))
            seen[known.vm.name] = known
        with self._lock:
            for name in sorted(set(self._known) - set(seen)):
                log.info("domain=%s no longer running", name)
            self._known = seen
        self._keep_placeholders({k.vm.agent_socket for k in seen.values() if k.vm.agent_socket})
        return [k.vm for _, k in sorted(seen.items())]

    def _keep_placeholders(self, in_use: set[Path]) -> None:
        # the channel server removes a VM's socket when the VM is gone; libvirt would then
        # refuse to start that domain again (it stats a mode='connect' path at start)
        with self._lock:
            paths = sorted(self._sockets - in_use)
        for path in paths:
            with contextlib.suppress(OSError):
                if make_placeholder_socket(path):
                    log.info("socket=%s placeholder restored for the next start", path)

    def _survivors(self) -> list[RunningVm]:
        with self._lock:
            gone = [n for n, k in self._known.items() if k.vm.pid and not _alive(k.vm.pid)]
            for name in gone:
                self._known.pop(name)
            return [k.vm for _, k in sorted(self._known.items())]

    def _refresh(self, dom: Any) -> _Known:
        name = dom.name()
        domid = dom.ID()
        with self._lock:
            known = self._known.get(name)
            dirty = name in self._dirty
            self._dirty.discard(name)
        if known is not None and known.domid == domid and not dirty:
            if known.vm.agent_socket is not None and not known.vm.agent_listens:
                self._share_socket(known.vm.agent_socket, known.vm.pid)
            return known
        xml = parse_domain(dom.XMLDesc(0))
        threads: dict[int, int] = {}
        pid = 0
        if self.driver == "QEMU":
            reply = libvirt_qemu.qemuMonitorCommand(dom, '{"execute":"query-cpus-fast"}', 0)
            threads = parse_query_cpus_fast(reply)
            pid = _tgid(next(iter(threads.values()))) if threads else 0
        # guest NUMA cells: NCC replicates across them (libvirt has no colored memory)
        nodes = tuple(GuestNode(c.id, c.vcpus, c.memory_bytes) for c in xml.cells)
        listens = xml.agent_mode == "bind"
        vm = RunningVm(
            name, pid, threads, xml.agent_socket, xml.memory_bytes, nodes=nodes,
            agent_listens=listens,
        )
        if xml.agent_socket is not None and not listens:
            # a channel defined before attach used bind mode: unicache listens there
            self._share_socket(xml.agent_socket, pid)
            with self._lock:
                self._sockets.add(xml.agent_socket)
        log.info("domain=%s id=%d vcpus=%s", name, domid, sorted(threads.items()))
        return _Known(domid, xml, vm)

    def _share_socket(self, path: Path, pid: int) -> None:
        # QEMU runs as its own user (libvirt-qemu): the channel socket unicache's server
        # creates (root, 0600) must belong to that user or QEMU cannot connect to it
        if pid <= 0 or os.geteuid() != 0:
            return
        try:
            owner = os.stat(f"/proc/{pid}")
            # the inode itself, never a link: checked and changed through one descriptor, so
            # nothing swapped in at the path between the check and the chown is touched
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISSOCK(st.st_mode):
                log.warning("%s is not a socket: its owner is left as it is", path)
                return
            if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
                with contextlib.suppress(OSError):
                    # fchown refuses an O_PATH descriptor; its /proc link is the same inode
                    os.chown(f"/proc/self/fd/{fd}", owner.st_uid, owner.st_gid)
        except OSError:
            return
        finally:
            os.close(fd)

    # Section: queries and pinning ---------------------------------------------------------

    def domain_xml(self, name: str) -> DomainXml | None:
        """The parsed live XML of a running domain seen by the last :meth:`running`."""
        with self._lock:
            known = self._known.get(name)
        return None if known is None else known.xml

    def manages(self, name: str) -> bool:
        """Whether ``name`` is a domain of this libvirtd (seen by the last round)."""
        with self._lock:
            return name in self._known

    def _domain(self, name: str) -> Any:
        with self._lock:
            conn = self._conn
        if conn is None:
            raise OSError(errno.ENOTCONN, f"libvirt at {self.uri} is not connected")
        try:
            return conn.lookupByName(name)
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"domain {name}") from err

    def host_cpus(self) -> int:
        """The number of host CPUs libvirt's cpumaps cover."""
        with self._lock:
            conn = self._conn
        if conn is None:
            return os.cpu_count() or 1
        try:
            return int(conn.getCPUMap()[0])
        except libvirt.libvirtError:
            return os.cpu_count() or 1

    def _cpumap(self, cpus: Iterable[int]) -> tuple[bool, ...]:
        wanted = set(cpus)
        return tuple(i in wanted for i in range(self.host_cpus()))

    def identity(self, name: str) -> tuple[str, int]:
        """``(uuid, domain id)`` of a running domain.

        :raises OSError: when it is not running or libvirt is unreachable.
        """
        dom = self._domain(name)
        try:
            return dom.UUIDString(), int(dom.ID())
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"domain {name}") from err

    def vcpu_pins(self, name: str) -> dict[int, frozenset[int]]:
        """The live vCPU pinning of a domain (``virsh vcpupin --live``)."""
        dom = self._domain(name)
        try:
            info = dom.vcpuPinInfo(libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"vcpupin info of {name}") from err
        return {i: frozenset(c for c, on in enumerate(m) if on) for i, m in enumerate(info)}

    def emulator_pins(self, name: str) -> frozenset[int]:
        """The live emulator pinning of a domain."""
        dom = self._domain(name)
        try:
            info = dom.emulatorPinInfo(libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"emulatorpin info of {name}") from err
        return frozenset(c for c, on in enumerate(info) if on)

    def pin_vcpu(self, name: str, vcpu: int, cpus: Iterable[int]) -> None:
        """``virsh vcpupin --live``.

        :raises OSError: when libvirt refuses or is unreachable (retried next round).
        """
        dom = self._domain(name)
        try:
            _live(dom.pinVcpuFlags, vcpu, self._cpumap(cpus))
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"vcpupin {name} {vcpu}") from err

    def pin_emulator(self, name: str, cpus: Iterable[int]) -> None:
        """``virsh emulatorpin --live``.

        :raises OSError: when libvirt refuses or is unreachable.
        """
        dom = self._domain(name)
        try:
            _live(dom.pinEmulator, self._cpumap(cpus))
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"emulatorpin {name}") from err


    def cpu_shares(self, name: str) -> int:
        """The domain's live ``cpu_shares`` (``virsh schedinfo --live``).

        :raises OSError: when libvirt refuses (no cpu controller) or is unreachable.
        """
        dom = self._domain(name)
        try:
            params = dom.schedulerParametersFlags(libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"schedinfo {name}") from err
        if not isinstance(params.get("cpu_shares"), int):
            raise OSError(f"schedinfo {name}: libvirt reports no cpu_shares")
        return int(params["cpu_shares"])

    def set_cpu_shares(self, name: str, shares: int) -> None:
        """``virsh schedinfo --live --set cpu_shares=N``.

        :raises OSError: when libvirt refuses or is unreachable.
        """
        dom = self._domain(name)
        try:
            _live(dom.setSchedulerParametersFlags, {"cpu_shares": shares})
        except libvirt.libvirtError as err:
            raise _as_oserror(err, f"schedinfo {name} cpu_shares={shares}") from err


if TYPE_CHECKING:
    _check: VmSource = LibvirtVmSource()  # conformance, as mypy sees it
