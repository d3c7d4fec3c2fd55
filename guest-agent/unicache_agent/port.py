"""Transports the agent talks over: the virtio-serial port, a unix socket, or stdio.

The port is found by name under /dev/virtio-ports (udev) or, without udev, through
/sys/class/virtio-ports/*/name (docs/agent.md "Finding the port").
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
from typing import Optional

from .errors import PortError
from .protocol import PORT_NAME

DEV_DIR = "/dev/virtio-ports"
SYS_DIR = "/sys/class/virtio-ports"


def find_port(name: str = PORT_NAME, dev_dir: str = DEV_DIR, sys_dir: str = SYS_DIR,
              devfs: str = "/dev") -> str:
    """The device path of the virtio-serial port called ``name``.

    :param name: the port name QEMU gave (``virtserialport,name=...``).
    :param dev_dir: udev's symlink directory.
    :param sys_dir: sysfs class directory (used without udev).
    :param devfs: where the ``vportNpM`` device nodes are.
    :returns: a path to open.
    :raises PortError: when no port has that name.
    """
    link = os.path.join(dev_dir, name)
    if os.path.exists(link):
        return link
    try:
        entries = sorted(os.listdir(sys_dir))
    except OSError as err:
        raise PortError(f"no virtio-serial port {name}: {sys_dir} unreadable") from err
    for entry in entries:
        try:
            with open(os.path.join(sys_dir, entry, "name"), encoding="utf-8") as f:
                if f.read(256).strip() == name:
                    return os.path.join(devfs, entry)
        except OSError:
            continue
    raise PortError(f"no virtio-serial port named {name} (looked in {dev_dir} and {sys_dir})")


class Transport:
    """A byte stream the agent can (re)open. Subclasses implement the ``_do_*`` hooks.

    :attr hangup_keeps_open: on EOF keep the fd open and wait (virtio port: the host is
        absent; closing would drop bytes) instead of reopening.
    """

    hangup_keeps_open = False

    def __init__(self) -> None:
        self.rfd: Optional[int] = None
        self.wfd: Optional[int] = None

    def describe(self) -> str:
        """One word or path for logs."""
        return type(self).__name__

    def open(self) -> None:
        """Open the stream.

        :raises PortError: when it is absent or cannot be opened.
        """
        try:
            self._do_open()
        except OSError as err:
            raise PortError(f"cannot open {self.describe()}") from err

    def close(self) -> None:
        """Close the stream (idempotent)."""
        self._do_close()
        self.rfd = self.wfd = None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` was not called since."""
        return self.rfd is not None

    def read(self, n: int = 65536) -> Optional[bytes]:
        """Read what is available (the fd is non-blocking).

        :returns: the bytes; ``b""`` at EOF (host absent); ``None`` when nothing is there yet.
        :raises PortError: on a read error.
        """
        assert self.rfd is not None
        try:
            return os.read(self.rfd, n)
        except BlockingIOError:
            return None
        except OSError as err:
            raise PortError(f"read from {self.describe()} failed") from err

    def write(self, data: bytes, timeout_s: float = 2.0) -> bool:
        """Write all of ``data``; give up after ``timeout_s`` without progress.

        :returns: whether everything was written.
        :raises PortError: on a write error other than "would block".
        """
        assert self.wfd is not None
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.wfd, view)
                view = view[n:]
            except BlockingIOError:
                _, w, _ = select.select([], [self.wfd], [], timeout_s)
                if not w:
                    return False
            except OSError as err:
                if err.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                    return False
                raise PortError(f"write to {self.describe()} failed") from err
        return True

    def _do_open(self) -> None:
        raise NotImplementedError

    def _do_close(self) -> None:
        for fd in {self.rfd, self.wfd}:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


class PortTransport(Transport):
    """The virtio-serial port, found by name or given as a device path."""

    hangup_keeps_open = True

    def __init__(self, name: str = PORT_NAME, device: Optional[str] = None) -> None:
        super().__init__()
        self.name = name
        self.device = device

    def describe(self) -> str:
        return self.device or f"port {self.name}"

    def _do_open(self) -> None:
        path = self.device or find_port(self.name)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        self.rfd = self.wfd = fd


class SocketTransport(Transport):
    """A unix stream socket (tests, or a host channel reached without virtio)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._sock: Optional[socket.socket] = None

    def describe(self) -> str:
        return f"socket {self.path}"

    def _do_open(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.path)
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        self._sock = s
        self.rfd = self.wfd = s.fileno()

    def _do_close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class FdTransport(Transport):
    """Already open descriptors: stdin/stdout (``--stdio``) or a socketpair end in tests."""

    def __init__(self, rfd: int, wfd: int) -> None:
        super().__init__()
        self._fds = (rfd, wfd)

    def describe(self) -> str:
        return f"fds {self._fds[0]},{self._fds[1]}"

    def _do_open(self) -> None:
        for fd in set(self._fds):
            os.set_blocking(fd, False)
        self.rfd, self.wfd = self._fds

    def _do_close(self) -> None:
        pass
