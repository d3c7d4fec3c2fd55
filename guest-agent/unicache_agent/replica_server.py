"""The agent's replica socket: processes ask for replicas, proving they may read the file.

``<root>/socket`` (SOCK_SEQPACKET, mode 0666; layout in ``uc_layout.h``): a shim sends a
32-byte request (chunk, chunk size, node, id) with one descriptor attached, of the file it
reads. The descriptor is the proof: only a process that could open the file for reading
holds a readable descriptor of it, so a replica reaches exactly the processes that may
read its source, whatever the file's mode, ACLs or directories say (the replica files
themselves are root's, mode 0400, in a directory only root may enter). The answer is a
16-byte status with, on success, a read-only descriptor of the replica file.

Processes are untrusted: a request is checked byte by byte (size, magic, one descriptor,
a readable regular file on a file system whose timestamps the coherence rests on), the
file id is computed from the descriptor (never taken from the request), the clients and
the requests per client and turn are bounded, and a reply that does not fit the client's
socket is dropped (its shim times out and takes the real call).
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import logging
import os
import socket
import stat
import struct
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .replica_store import ReplicaStore
from .shm import MAX_NODES, file_id_of

log = logging.getLogger(__name__)

#: "UCRQ", "UCRP", as in uc_layout.h
REQ_MAGIC = 0x51524355
RSP_MAGIC = 0x50524355
_REQ = struct.Struct("<IIQQQ")  # magic node id chunk chunk_size
_RSP = struct.Struct("<IiQ")  # magic status id
#: connected processes at once; more are refused (their shims take the real calls)
MAX_CLIENTS = 256
#: requests read from one client per turn of the agent's loop
MAX_REQUESTS_PER_TURN = 16
#: largest chunk size a request may name
MAX_CHUNK_SIZE = 1 << 30
#: file systems whose ctime (nanoseconds, updated under the inode lock) the coherence rests
#: on (docs/replicas.md "Coherence"); files elsewhere are never replicated
COHERENT_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs"})
O_PATH = getattr(os, "O_PATH", 0o10000000)


class ReplicaServer:
    """The listening socket and its clients; the agent's loop selects on :meth:`fds`.

    :param store: the replica store that answers.
    :param path: the socket's path (``<root>/socket``).
    """

    def __init__(self, store: ReplicaStore, path: str) -> None:
        self.store = store
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        os.chmod(path, 0o666)  # any process may ask; the descriptor it sends decides
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.clients: Dict[int, socket.socket] = {}
        self.requests = 0
        self.rejected = 0
        #: run after a request is read and before it is answered (the serving process
        #: applies the store calls sent before it: replica_service)
        self.before_answer: Optional[Callable[[], None]] = None
        self._fstypes: Dict[int, str] = {}

    def fds(self) -> List[int]:
        """Descriptors to select on for reading."""
        return [self.listener.fileno(), *self.clients]

    def handle(self, ready: Sequence[int]) -> None:
        """Serve what ``select`` found readable."""
        if self.listener.fileno() in ready:
            self._accept()
        for fd in [fd for fd in ready if fd in self.clients]:
            self._serve(self.clients[fd])

    def _accept(self) -> None:
        for _ in range(MAX_CLIENTS):
            try:
                conn, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log.warning("replica socket accept failed: %s", err)
                return
            if len(self.clients) >= MAX_CLIENTS:
                conn.close()
                self.rejected += 1
                continue
            conn.setblocking(False)
            self.clients[conn.fileno()] = conn

    def _close(self, conn: socket.socket) -> None:
        self.clients.pop(conn.fileno(), None)
        conn.close()

    def _serve(self, conn: socket.socket) -> None:
        for _ in range(MAX_REQUESTS_PER_TURN):
            try:
                data, anc, flags, _addr = conn.recvmsg(_REQ.size + 1,
                                                       socket.CMSG_SPACE(4 * 4))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(conn)
                return
            fds = _received_fds(anc)
            if not data:
                _close_all(fds)
                self._close(conn)
                return
            if self.before_answer is not None:
                self.before_answer()
            try:
                status, reply_fd, rid = self._answer(data, fds, flags)
            finally:
                _close_all(fds)
            self.requests += 1
            if not self._reply(conn, status, rid, reply_fd):
                return

    def _answer(self, data: bytes, fds: List[int],
                flags: int) -> Tuple[int, Optional[int], int]:
        """(status, replica descriptor or None, request id) for one request."""
        if (len(data) != _REQ.size or len(fds) != 1
                or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC)):
            self.rejected += 1
            return errno.EINVAL, None, 0
        magic, node, rid, chunk, chunk_size = _REQ.unpack(data)
        if (magic != REQ_MAGIC or node >= MAX_NODES or chunk_size <= 0
                or chunk_size > MAX_CHUNK_SIZE or chunk_size & (chunk_size - 1)
                or chunk >= (1 << 63) // chunk_size):
            self.rejected += 1
            return errno.EINVAL, None, rid
        src = fds[0]
        file_id = self._readable_file_id(src)
        if file_id is None:
            self.rejected += 1
            return errno.EINVAL, None, rid
        status, path = self.store.request(src, file_id, chunk, chunk_size, node)
        if status or path is None:
            return status or errno.EINVAL, None, rid
        try:
            return 0, os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW), rid
        except OSError:
            return errno.EAGAIN, None, rid

    def _readable_file_id(self, fd: int) -> Optional[int]:
        """The file id of a descriptor the sender could read: a regular file opened for
        reading (not O_PATH, not write-only) on a file system of :data:`COHERENT_FS`."""
        try:
            fl = fcntl.fcntl(fd, fcntl.F_GETFL)
            st = os.fstat(fd)
        except OSError:
            return None
        if fl & O_PATH or fl & os.O_ACCMODE == os.O_WRONLY or not stat.S_ISREG(st.st_mode):
            return None
        if self._fstype(st.st_dev) not in COHERENT_FS:
            return None
        return file_id_of(self.store.salt, st.st_dev, st.st_ino)

    def _fstype(self, dev: int) -> str:
        if dev not in self._fstypes:
            if len(self._fstypes) > 4096:
                self._fstypes.clear()
            self._fstypes.update(_mount_types())
            self._fstypes.setdefault(dev, "")
        return self._fstypes[dev]

    def _reply(self, conn: socket.socket, status: int, rid: int,
               reply_fd: Optional[int]) -> bool:
        anc = ([(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [reply_fd]))]
               if reply_fd is not None else [])
        try:
            conn.sendmsg([_RSP.pack(RSP_MAGIC, status, rid)], anc)
            return True
        except (BlockingIOError, InterruptedError):
            return True  # its queue is full: this answer is lost, its shim times out
        except OSError:
            self._close(conn)
            return False
        finally:
            if reply_fd is not None:
                os.close(reply_fd)

    def close(self) -> None:
        """Close every connection and the socket."""
        for conn in list(self.clients.values()):
            self._close(conn)
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _received_fds(anc: List[Tuple[int, int, bytes]]) -> List[int]:
    out: List[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[:len(data) - len(data) % arr.itemsize])
            out.extend(arr)
    return out


def _close_all(fds: List[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _mount_types() -> Dict[int, str]:
    """st_dev -> file system type of every mount (/proc/self/mountinfo)."""
    out: Dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, sep, right = line.partition(" - ")
                parts = left.split()
                if not sep or len(parts) < 3 or ":" not in parts[2]:
                    continue
                major, minor = parts[2].split(":", 1)
                try:
                    out[os.makedev(int(major), int(minor))] = right.split()[0]
                except (ValueError, IndexError):
                    continue
    except OSError:
        pass
    return out
