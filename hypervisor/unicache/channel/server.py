"""The asyncio host channel: one unix socket per VM, which QEMU's virtio-serial chardev connects to.

QEMU side (docs/protocol.md "Transport")::

    -chardev socket,id=uc0,path=SOCK,reconnect=1
    -device virtio-serial-pci -device virtserialport,chardev=uc0,name=org.unicache.agent.0

The server listens on SOCK; QEMU connects and reconnects; a second connection while one
is live is refused. When QEMU listens instead (``server=on``; libvirt's ``<source
mode='bind'>``, what ``unicache attach`` adds), :meth:`ChannelServer.connect_vm` dials its
socket and dials again whenever the connection ends; it dials only a socket of QEMU's own
user, reached without following a link (:func:`dial_guest_socket`). All protocol work
happens in :class:`~unicache.channel.session.GuestSession`; this module only moves bytes,
pauses reading when a guest exceeds its byte budget, and caps what it buffers for a guest
that does not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from unicache.channel import protocol as p
from unicache.channel.session import GuestSession, Runstate
from unicache.errors import ConfigError, StateError, UnsafeSocketError
from unicache.model import GuestReport, PublishPlacement

log = logging.getLogger(__name__)

#: bytes read from a socket at a time
READ_CHUNK = 65536
#: bytes queued for a guest that does not read before further lines are dropped
MAX_WRITE_BUFFER = 1 << 20

ClockT = Callable[[], float]
ReportCallbackT = Callable[[GuestReport], None]


@dataclass(frozen=True, slots=True)
class VmChannelStatus:
    """What ``unicache status`` shows about one VM's channel.

    :param vm: the VM.
    :param socket: the unix socket path.
    :param connected: whether QEMU is connected.
    :param state: handshake state.
    :param agent: the agent's name from its hello, if any.
    :param reports: reports accepted since start.
    :param errors: problems found since start, by kind.
    :param applied_version: the last table version the guest says it applied (-1: none).
    :param dropped_out: lines not sent because the guest was not reading.
    :param bytes_in: bytes read from the guest since start (all connections).
    :param bytes_out: bytes queued to the guest since start (all connections).
    """

    vm: str
    socket: str
    connected: bool
    state: str
    agent: str | None
    reports: int
    errors: tuple[tuple[str, int], ...]
    applied_version: int
    dropped_out: int
    bytes_in: int = 0
    bytes_out: int = 0


#: error kind counted when a VM's socket gets a second connection while one is live
SECOND_CONNECTION = "second-connection"
#: error kind counted when a socket to dial is not one (a link, a file) or not QEMU's
UNSAFE_SOCKET = "unsafe-socket"


def dial_guest_socket(path: Path, owner_uid: int | None) -> socket.socket:
    """Connect to a socket QEMU listens on, as root may safely do.

    The directory of a libvirt channel belongs to QEMU's user, so QEMU can put anything at
    the path. The path is opened with ``O_PATH | O_NOFOLLOW`` (a link in its last component
    is opened as the link, and refused), the descriptor must be a socket owned by
    ``owner_uid``, and the connection goes to ``/proc/self/fd/N``: to that very inode,
    whatever the path names by then. A link among the directories could only lead to
    another socket of QEMU's own user.

    :param path: the socket.
    :param owner_uid: QEMU's user (``None``: any owner, for a daemon that is not root).
    :returns: a connected, non-blocking socket.
    :raises UnsafeSocketError: if the path is not a socket of ``owner_uid``.
    :raises OSError: if it cannot be opened or nobody listens.
    """
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISSOCK(st.st_mode):
            raise UnsafeSocketError(f"{path} is not a socket")
        if owner_uid is not None and st.st_uid != owner_uid:
            raise UnsafeSocketError(f"{path} belongs to uid {st.st_uid}, not QEMU's {owner_uid}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(f"/proc/self/fd/{fd}")
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock
    finally:
        os.close(fd)


def check_socket_path(sock: Path) -> None:
    """Refuse a socket path a root daemon must not create or replace.

    The directory must belong to this user (or root) and be writable by no one else, so
    no other user can swap the path for a link between our checks and our bind; an
    existing entry must be a socket (``lstat``: a link is not followed), never a file we
    would delete.

    :raises ConfigError: naming what is wrong.
    """
    parent = sock.parent.lstat()
    if not stat.S_ISDIR(parent.st_mode):
        raise ConfigError(f"{sock.parent} is not a directory")
    if parent.st_uid not in (0, os.geteuid()) or parent.st_mode & 0o022:
        raise ConfigError(
            f"{sock.parent} must belong to {os.geteuid()} or root and be writable by no one "
            f"else (mode {stat.S_IMODE(parent.st_mode):o}, owner {parent.st_uid})"
        )
    try:
        mode = sock.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"{sock} exists and is not a socket: refusing to replace it")


class _VmSlot:
    """Per-VM state: the session survives reconnections; the writer does not."""

    def __init__(self, vm: str, path: Path, params: p.ChannelParams,
                 owner_uid: int | None = None) -> None:
        self.vm = vm
        self.path = path
        #: the user whose socket a dialed VM's path must be (QEMU's)
        self.owner_uid = owner_uid
        self.session = GuestSession(vm, params)
        self.server: asyncio.AbstractServer | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.dialer: asyncio.Task[None] | None = None
        self.dropped_out = 0
        #: bytes queued to the guest since start (the session counts those it read)
        self.bytes_out = 0


class ChannelServer:
    """Host end of the guest channels of all managed VMs.

    :param socket_dir: where per-VM sockets go by default (``<dir>/<vm>.sock``).
    :param params: parameters sent to every guest in welcome.
    :param on_report: called with each accepted report; without it reports wait for
        :meth:`drain_reports` (bounded per VM).
    :param on_arrival: called with each accepted report as it arrives, which still waits
        for :meth:`drain_reports` (the daemon's early rounds, ``unicache.roundpace``).
    :param clock: monotonic clock (tests pass a fake one).
    """

    def __init__(self, socket_dir: Path, params: p.ChannelParams | None = None,
                 on_report: ReportCallbackT | None = None,
                 clock: ClockT = time.monotonic,
                 on_arrival: ReportCallbackT | None = None) -> None:
        self.socket_dir = socket_dir
        self.params = params or p.ChannelParams()
        self.on_report = on_report
        self.on_arrival = on_arrival
        self.clock = clock
        self._vms: dict[str, _VmSlot] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # Section: public interface

    async def add_vm(self, vm: str, path: Path | None = None) -> Path:
        """Listen on the VM's socket.

        :param vm: the VM's name.
        :param path: the socket path (default ``socket_dir/<vm>.sock``).
        :returns: the socket path.
        :raises ConfigError: when the name is unusable or the socket cannot be created.
        :raises StateError: when the VM is already added.
        """
        if not vm or "/" in vm or len(vm) > 64:
            raise ConfigError(f"bad VM name {vm!r}")
        if vm in self._vms:
            raise StateError(f"vm {vm} has a channel already", "added", "absent")
        sock = path or self.socket_dir / f"{vm}.sock"
        slot = _VmSlot(vm, sock, self.params)
        try:
            sock.parent.mkdir(parents=True, exist_ok=True)
            check_socket_path(sock)
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            slot.server = await asyncio.start_unix_server(
                lambda r, w: self._on_connect(slot, r, w), path=str(sock))
            os.chmod(sock, 0o600)
        except OSError as err:
            raise ConfigError(f"cannot listen on {sock}") from err
        self._vms[vm] = slot
        log.info("vm=%s socket=%s listening", vm, sock)
        return sock

    async def connect_vm(self, vm: str, path: Path, retry_s: float = 1.0,
                         owner_uid: int | None = None) -> None:
        """Connect to a socket QEMU listens on (``-chardev socket,...,server=on``; libvirt
        ``<source mode='bind'>``), and connect again whenever the connection ends.

        :param vm: the VM's name.
        :param path: QEMU's socket.
        :param retry_s: pause between attempts.
        :param owner_uid: QEMU's user: any other owner's socket, or anything that is not a
            socket, is refused (:func:`dial_guest_socket`).
        :raises ConfigError: on a bad name.
        :raises StateError: when the VM is already added.
        """
        if not vm or "/" in vm or len(vm) > 64:
            raise ConfigError(f"bad VM name {vm!r}")
        if vm in self._vms:
            raise StateError(f"vm {vm} has a channel already", "added", "absent")
        slot = _VmSlot(vm, path, self.params, owner_uid)
        self._vms[vm] = slot
        slot.dialer = asyncio.create_task(self._dial(slot, retry_s))
        log.info("vm=%s socket=%s connecting", vm, path)

    async def _dial(self, slot: _VmSlot, retry_s: float) -> None:
        warned = False
        while self._vms.get(slot.vm) is slot:
            try:
                sock = dial_guest_socket(slot.path, slot.owner_uid)
                reader, writer = await asyncio.open_unix_connection(sock=sock)
            except UnsafeSocketError as err:
                slot.session.stats.errors_by_kind[UNSAFE_SOCKET] += 1
                if not warned:
                    log.warning("vm=%s refused to dial: %s", slot.vm, err)
                    warned = True
            except OSError as err:
                log.debug("vm=%s connect %s: %s", slot.vm, slot.path, err)
            else:
                warned = False
                await self._on_connect(slot, reader, writer)
            await asyncio.sleep(retry_s)

    async def remove_vm(self, vm: str) -> None:
        """Stop listening for (or connecting to) a VM and drop its connection and state."""
        slot = self._vms.pop(vm, None)
        if slot is None:
            return
        if slot.writer is not None:
            slot.writer.close()
        if slot.dialer is not None:
            slot.dialer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slot.dialer
            return  # the socket is QEMU's
        if slot.server is not None:
            slot.server.close()
            await slot.server.wait_closed()
        with contextlib.suppress(OSError):
            slot.path.unlink()

    async def close(self) -> None:
        """Stop every channel (closing a connection ends its task; stragglers are cancelled)."""
        for vm in list(self._vms):
            await self.remove_vm(vm)
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=2.0)
            for task in pending:
                task.cancel()

    def publish(self, action: PublishPlacement, dry_run: bool = False) -> tuple[bytes, ...]:
        """Send a placement table (now if the guest is ready, else after its hello).

        :param action: the policy's action.
        :param dry_run: encode the table as it would be sent and return its lines; send
            nothing, and leave the VM's session as it was (no table kept for its hello).
        :returns: the lines sent now (with ``dry_run``: that would be); empty when the
            guest is not connected and ready (the table then goes after its hello).
        :raises StateError: when the VM has no channel.
        :raises ProtocolError: when the table exceeds the protocol's limits.
        """
        slot = self._slot(action.vm)
        connected = slot.writer is not None
        if dry_run:
            ready = connected and slot.session.state is Runstate.READY
            lines = p.encode_placement(action.table, slot.session.caps) if ready else ()
            log.info("vm=%s table version=%d entries=%d would send %d lines (dry run) "
                     "reason=%s", action.vm, action.table.version, len(action.table.entries),
                     len(lines), action.reason)
            return tuple(lines)
        lines = slot.session.set_table(action.table)
        self._send(slot, lines)
        log.info("vm=%s table version=%d entries=%d sent=%s reason=%s", action.vm,
                 action.table.version, len(action.table.entries), bool(lines), action.reason)
        return tuple(lines) if connected else ()

    def set_params(self, vm: str, params: p.ChannelParams) -> None:
        """Change one VM's parameters (sent now if ready)."""
        slot = self._slot(vm)
        self._send(slot, slot.session.set_params(params))

    def drain_reports(self) -> list[GuestReport]:
        """Reports received since the last call, all VMs, oldest first per VM."""
        out: list[GuestReport] = []
        for slot in self._vms.values():
            out.extend(slot.session.drain())
        return out

    def status(self) -> list[VmChannelStatus]:
        """One status line per VM."""
        out = []
        for slot in self._vms.values():
            s = slot.session
            out.append(VmChannelStatus(
                slot.vm, str(slot.path), slot.writer is not None, s.state.value,
                s.hello.agent if s.hello else None, s.stats.reports,
                tuple(sorted(s.stats.errors_by_kind.items())), s.stats.applied_version,
                slot.dropped_out, s.stats.bytes_in, slot.bytes_out))
        return out

    def is_ready(self, vm: str) -> bool:
        """Whether the VM's agent completed the handshake on the current connection."""
        slot = self._vms.get(vm)
        return bool(slot and slot.writer is not None
                    and slot.session.state is Runstate.READY)

    def session(self, vm: str) -> GuestSession:
        """The VM's protocol session (for tests and status)."""
        return self._slot(vm).session

    # Section: connection handling

    def _slot(self, vm: str) -> _VmSlot:
        slot = self._vms.get(vm)
        if slot is None:
            raise StateError(f"vm {vm} has no channel", "absent", "added")
        return slot

    async def _on_connect(self, slot: _VmSlot, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if slot.writer is not None and not slot.writer.is_closing():
            # one connection per VM: a second one while the first is live is refused (the
            # agent's QEMU reconnects once its old connection has ended)
            slot.session.stats.errors_by_kind[SECOND_CONNECTION] += 1
            log.warning("vm=%s refused a second connection while one is live", slot.vm)
            writer.close()
            return
        if task is not None and slot.dialer is None:
            self._tasks.add(task)
        slot.writer = writer
        self._send(slot, slot.session.connected())
        try:
            await self._pump(slot, reader)
        except (ConnectionError, OSError) as err:
            log.info("vm=%s connection lost: %s", slot.vm, err)
        except Exception as err:  # a bug of ours must not take the daemon down
            log.error("vm=%s channel failed: %s: %s", slot.vm, type(err).__name__, err)
            log.debug("vm=%s channel failure", slot.vm, exc_info=True)
        finally:
            if slot.writer is writer:
                slot.writer = None
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _pump(self, slot: _VmSlot, reader: asyncio.StreamReader) -> None:
        while True:
            pause = slot.session.throttle_s(self.clock())
            if pause > 0:
                await asyncio.sleep(min(pause, 5.0))
            data = await reader.read(READ_CHUNK)
            if not data:
                log.info("vm=%s disconnected", slot.vm)
                return
            result = slot.session.feed(data, self.clock())
            self._send(slot, result.outgoing)
            if self.on_arrival is not None:
                for report in result.reports:
                    self._call(self.on_arrival, slot.vm, report)
            if self.on_report is not None:
                for report in slot.session.drain():
                    self._call(self.on_report, slot.vm, report)

    @staticmethod
    def _call(callback: ReportCallbackT, vm: str, report: GuestReport) -> None:
        try:
            callback(report)
        except Exception as err:  # the caller's callback, any bug: this VM's channel goes
            # on (a boundary, as _on_connect's catch)
            log.error("vm=%s report callback failed: %s: %s", vm, type(err).__name__, err)
            log.debug("vm=%s report callback failure", vm, exc_info=True)

    def _send(self, slot: _VmSlot, lines: Iterable[bytes]) -> None:
        writer = slot.writer
        if writer is None or writer.is_closing():
            return
        for line in lines:
            if writer.transport.get_write_buffer_size() + len(line) > MAX_WRITE_BUFFER:
                slot.dropped_out += 1
                continue
            writer.write(line)
            slot.bytes_out += len(line)
