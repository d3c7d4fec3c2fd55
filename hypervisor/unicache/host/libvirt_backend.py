"""The libvirt backend: running domains, their vCPU threads and agent channels, pinning via libvirt.

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

:class:`LibvirtActuator` pins through ``virDomainPinVcpuFlags``/``virDomainPinEmulator``
(live only) rather than ``sched_setaffinity``: libvirt confines vCPU threads to cpuset
cgroups it owns (``sched_setaffinity`` outside them fails with EINVAL) and re-applies its
own pinning on some operations, and ``virsh vcpupin``/``vcpuinfo`` then tell the admin the
truth. The original pinning is journaled first (like :class:`~unicache.host.actuate.Actuator`)
and restored through libvirt on exit, or at the next start after a crash.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import logging
import os
import re
import socket
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unicache.errors import ConfigError, ProtocolError, StateError, UnicacheError
from unicache.host.actuate import Actuator, SavedAffinity, thread_start_time
from unicache.host.libvirt_xml import (
    DomainXml,
    add_agent_channel,
    agent_channel_xml,
    parse_domain,
    parse_query_cpus_fast,
)
from unicache.host.live import RunningVm, VmSource
from unicache.model import GuestNode
from unicache.statefile import write_private_json


def _optional(module: str) -> Any:
    # libvirt-python is optional (and untyped): without it choose_vm_source falls back
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - exercised only where libvirt-python is missing
        return None


libvirt: Any = _optional("libvirt")
libvirt_qemu: Any = _optional("libvirt_qemu")

log = logging.getLogger(__name__)

#: the URI the daemon tries when no --connect is given
DEFAULT_URI = "qemu:///system"
#: seconds between reconnect attempts while libvirtd is unreachable
RECONNECT_INTERVAL_S = 1.0
#: libvirt keepalive: probe every 5 s, give up after 3 unanswered probes
KEEPALIVE = (5, 3)
#: lifecycle events kept for :meth:`LibvirtVmSource.drain_events`
MAX_EVENTS = 1024

#: virDomainEventType names, by value (libvirt-domain.h)
EVENT_NAMES = (
    "defined", "undefined", "started", "suspended", "resumed", "stopped", "shutdown",
    "pmsuspended", "crashed",
)
#: virDomainEventStoppedDetailType names, by value
STOPPED_DETAILS = (
    "shutdown", "destroyed", "crashed", "migrated", "saved", "failed", "from-snapshot",
)
_KEY = re.compile(r"^affinity/(?P<vm>.+)/vcpu(?P<index>\d+)$")


@dataclass(frozen=True, slots=True)
class DomainEvent:
    """A lifecycle event libvirt delivered.

    :param time: wall-clock seconds.
    :param domain: the domain's name.
    :param kind: ``started``, ``stopped``, ``migrated-away``, ``crashed``, ...
    :param detail: libvirt's detail for it (``destroyed``, ``migrated``, ...).
    """

    time: float
    domain: str
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class _Known:
    domid: int
    xml: DomainXml
    vm: RunningVm


def libvirt_available() -> bool:
    """Whether libvirt-python can be imported."""
    return libvirt is not None


def _quiet_errors(_ctx: object, _err: object) -> None:
    # libvirt prints every error to stderr by default; unicache reports them itself
    return None


_event_lock = threading.Lock()
_event_thread: threading.Thread | None = None


def ensure_event_loop() -> None:
    """Register libvirt's default event loop once per process and run it in a thread.

    It must exist before a connection is opened, or no event (lifecycle, close, keepalive)
    is ever delivered.
    """
    global _event_thread
    with _event_lock:
        if _event_thread is not None:
            return
        libvirt.registerErrorHandler(_quiet_errors, None)
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                if libvirt.virEventRunDefaultImpl() < 0:
                    log.error("libvirt event loop iteration failed")
                    time.sleep(0.1)

        _event_thread = threading.Thread(target=run, name="libvirt-events", daemon=True)
        _event_thread.start()


def _message(err: Any) -> str:
    text = err.get_error_message() if hasattr(err, "get_error_message") else None
    return str(text or err).splitlines()[0]


def _as_oserror(err: Exception, what: str) -> OSError:
    # the live host retries actions that fail with OSError; libvirt errors become those
    return OSError(errno.EAGAIN, f"libvirt: {what}: {_message(err)}")


def make_placeholder_socket(path: Path) -> bool:
    """Create a unix socket file nobody listens on, if ``path`` does not exist.

    libvirt refuses to start a domain whose ``mode='connect'`` channel path does not exist;
    QEMU with ``reconnect`` then simply retries until unicache's channel server listens.

    :returns: ``True`` when it created one.
    :raises OSError: when the directory or socket cannot be created.
    """
    if path.exists():
        return False
    if not path.parent.is_dir():
        # QEMU's user must be able to reach the socket: a directory made here is 0755
        # (an existing one is left as it is)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    finally:
        sock.close()
    return True


def _tgid(tid: int) -> int:
    try:
        for line in Path(f"/proc/{tid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


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
        self._events: deque[DomainEvent] = deque(maxlen=MAX_EVENTS)
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
        self._events.append(DomainEvent(time.time(), "", "reconnected", self.uri))
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
            self._events.append(DomainEvent(time.time(), name, kind, what))
            self._dirty.add(name)
            if kind in ("stopped", "migrated-away", "crashed"):
                self._known.pop(name, None)
        log.info("domain=%s event=%s detail=%s", name, kind, what)

    def _on_device_added(self, _conn: Any, dom: Any, alias: str, _opaque: object) -> None:
        # a hot-plugged agent channel (`unicache attach`): re-read the domain's XML
        name = dom.name()
        with self._lock:
            self._events.append(DomainEvent(time.time(), name, "device-added", alias))
            self._dirty.add(name)

    def drain_events(self) -> list[DomainEvent]:
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
            st = os.lstat(path)
        except OSError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            log.warning("%s is not a socket: its owner is left as it is", path)
            return
        if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
            with contextlib.suppress(OSError):
                os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)

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


def _live(call: Callable[..., Any], *args: Any) -> None:
    # VIR_DOMAIN_AFFECT_LIVE; a driver that refuses the flag (libvirt's test driver, some
    # older ones) gets VIR_DOMAIN_AFFECT_CURRENT, which for a running domain is the same
    try:
        call(*args, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError as err:
        if err.get_error_code() != libvirt.VIR_ERR_INVALID_ARG:
            raise
        call(*args, libvirt.VIR_DOMAIN_AFFECT_CURRENT)


if TYPE_CHECKING:
    _check: VmSource = LibvirtVmSource()  # conformance, as mypy sees it


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


# Section: actuation with a journal -------------------------------------------------------

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
        self._pins: dict[str, SavedPin] = self._load_pins()
        self._wanted: dict[str, dict[int, frozenset[int]]] = {}
        self._emulator: dict[str, frozenset[int]] = {}

    def _load_pins(self) -> dict[str, SavedPin]:
        try:
            data = json.loads(self.lv_journal.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise StateError(
                f"journal {self.lv_journal} is unreadable; inspect it, then remove it",
                "corrupt",
                "readable",
            ) from err
        if data.get("version") != LIBVIRT_JOURNAL_VERSION:
            raise StateError(f"journal {self.lv_journal} has another version", "foreign", "v1")
        pins = [SavedPin(**{**e, "cpus": tuple(e["cpus"])}) for e in data.get("pins", [])]
        return {p.key: p for p in pins}

    def _store_pins(self) -> None:
        payload = {
            "version": LIBVIRT_JOURNAL_VERSION,
            "pins": [asdict(p) for _, p in sorted(self._pins.items())],
        }
        write_private_json(self.lv_journal, payload)

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

    def restore_all(self) -> list[str]:
        """Put every journaled pin back (through libvirt; by thread when it is gone).

        :returns: one line per entry.
        """
        lines = super().restore_all()
        for key, pin in sorted(self._pins.items()):
            lines.append(self._restore(key, pin))
        self._pins.clear()
        self._wanted.clear()
        self._emulator.clear()
        if not self.dry_run:
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


# Section: choosing the backend -----------------------------------------------------------


def _vcpu_times(dom: Any) -> dict[int, tuple[frozenset[int], int]]:
    """vCPU -> (its CPUs, CPU time ns) from ``virDomainGetVcpus``; empty if it fails."""
    try:
        infos, maps = dom.vcpus()
    except libvirt.libvirtError as err:
        log.info("domain %s: no vCPU times this round: %s", dom.name(), _message(err))
        return {}
    return {
        int(info[0]): (frozenset(i for i, on in enumerate(cpumap) if on), int(info[2]))
        for info, cpumap in zip(infos, maps, strict=False)
    }


def choose_vm_source(connect_uri: str | None, state_dir: Path) -> tuple[VmSource, str]:
    """libvirt when a libvirtd is reachable, unicache's own QEMU otherwise.

    :param connect_uri: ``--connect URI``; ``None`` tries :data:`DEFAULT_URI` and falls
        back quietly, ``"none"`` means unicache's own QEMU only, an explicit URI that
        cannot be reached is an error.
    :param state_dir: the daemon's state directory (for the fallback).
    :returns: the source and one line saying which and why.
    :raises ConfigError: when an explicit ``--connect`` URI is unreachable.
    """
    if connect_uri == "none":
        return _fallback(state_dir, "--connect none")
    uri = connect_uri or DEFAULT_URI
    if libvirt is None:
        if connect_uri is not None:
            raise ConfigError("--connect needs libvirt-python (pip install libvirt-python)")
        return _fallback(state_dir, "libvirt-python is not installed")
    source = LibvirtVmSource(uri)
    try:
        source.connect()
    except ConfigError as err:
        if connect_uri is not None:
            raise
        return _fallback(state_dir, f"no libvirtd at {uri} ({_short(err)})")
    return source, (
        f"VMs: libvirt domains at {uri} (driver {source.driver}; pinning through vcpupin, "
        "restored on exit)"
    )


def _short(err: UnicacheError) -> str:
    return str(err).rsplit(": ", 1)[-1]


def _fallback(state_dir: Path, why: str) -> tuple[VmSource, str]:
    from unicache.daemon import default_vm_source

    return default_vm_source(state_dir), f"VMs: unicache's own QEMU ({why})"


# Section: attach --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttachResult:
    """What ``unicache attach`` did.

    :param domain: the domain.
    :param socket: the socket QEMU listens on, which the daemon dials (from the live XML;
        ``None`` until the domain runs with the channel: libvirt picks it at each start).
    :param mode: the channel's source mode: ``bind`` (what attach adds), or ``connect`` for
        a channel defined earlier where the daemon listens.
    :param persistent: ``added``, ``present`` or ``transient`` (no persistent config).
    :param live: ``added``, ``present``, ``not running`` or ``impossible: WHY``.
    """

    domain: str
    socket: Path | None
    mode: str
    persistent: str
    live: str


def attach_channel(uri: str, domain: str) -> AttachResult:
    """Add the unicache agent channel to a domain, persistently and live; idempotent.

    The channel is ``mode='bind'`` (:func:`agent_channel_xml`): QEMU listens on a socket
    libvirt makes in its channel directory, and the daemon dials it. A domain with the
    channel already (either mode) is left as it is.

    :param uri: the libvirt URI.
    :param domain: the domain name.
    :raises ConfigError: when libvirt is unreachable, the domain is unknown or the
        persistent definition is refused.
    """
    if libvirt is None:
        raise ConfigError("attach needs libvirt-python (pip install libvirt-python)")
    if not domain or "/" in domain or len(domain) > 64:
        raise ConfigError(f"bad domain name {domain!r}")
    libvirt.registerErrorHandler(_quiet_errors, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise ConfigError(f"cannot connect to libvirt at {uri}: {_message(err)}") from err
    try:
        try:
            dom = conn.lookupByName(domain)
        except libvirt.libvirtError as err:
            raise ConfigError(f"no domain {domain!r} at {uri}") from err
        persistent = "transient"
        mode = "bind"
        if dom.isPersistent():
            inactive = parse_domain(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
            if inactive.agent_mode is not None:
                persistent, mode = "present", inactive.agent_mode
            else:
                try:
                    conn.defineXML(
                        add_agent_channel(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
                    )
                except libvirt.libvirtError as err:
                    raise ConfigError(f"libvirt refused the new definition of {domain}") from err
                persistent = "added"
        live = "not running"
        sock = None
        if dom.isActive():
            running = parse_domain(dom.XMLDesc(0))
            if running.agent_mode is not None:
                live, mode = "present", running.agent_mode
            else:
                try:
                    # QEMU listens: the hot-plugged chardev needs nobody on the other side
                    dom.attachDeviceFlags(agent_channel_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE)
                    live = "added"
                except libvirt.libvirtError as err:
                    live = f"impossible: {_message(err)}"
            sock = parse_domain(dom.XMLDesc(0)).agent_socket
        return AttachResult(domain, sock, mode, persistent, live)
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


__all__ = [
    "DEFAULT_URI",
    "AttachResult",
    "DomainEvent",
    "LibvirtActuator",
    "LibvirtVmSource",
    "SavedPin",
    "attach_channel",
    "choose_vm_source",
    "ensure_event_loop",
    "libvirt_available",
    "make_actuator",
    "make_placeholder_socket",
]
