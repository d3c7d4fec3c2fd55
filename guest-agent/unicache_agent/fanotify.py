"""File-level read capture with fanotify, for processes that run without the preload shim.

Marks a mount (default ``/``) for FAN_ACCESS and FAN_MODIFY. Each event gives a descriptor of
the file: it is fstat'ed for the opaque file id (the same id the shim computes) and closed.
Events of the agent itself and of processes that have libunicache.so mapped are skipped (the
shim already counts those per chunk). The kernel merges repeated events of one file and
bounds its queue; fanotify gives no offsets or sizes, so these records are per file:
``(file_id, accesses, modifies)``. Needs CAP_SYS_ADMIN.

Every FAN_MODIFY event (of any process) also goes to ``on_modify(file_id)``: the agent bumps
the file's generation there, so replicas drop soon after a write by a process without the
shim (a hint only; the shim checks each replica serve with fstat, docs/replicas.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from typing import Callable, Dict, List, Optional, Tuple

from .errors import AgentError
from .shm import file_id_of

FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_CLASS_NOTIF = 0x0
FAN_MARK_ADD = 0x1
FAN_MARK_MOUNT = 0x10
FAN_ACCESS = 0x1
FAN_MODIFY = 0x2
FAN_Q_OVERFLOW = 0x4000
AT_FDCWD = -100
_META = struct.Struct("<IBBHQii")
#: files tracked between two drains; more are counted as dropped
MAX_TRACKED_FILES = 4096
#: pids whose shim status is remembered
MAX_PID_CACHE = 1024


class FanotifyCapture:
    """Counts file accesses of processes without the shim.

    :param salt: the table's file-id salt.
    :param mount: the mount to watch.
    :param on_modify: called with the file id of every FAN_MODIFY event.
    :raises AgentError: when fanotify is unavailable (not root, old kernel).
    """

    def __init__(self, salt: int, mount: str = "/",
                 on_modify: Optional[Callable[[int], None]] = None) -> None:
        self.salt = salt
        self.on_modify = on_modify
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        init = libc.fanotify_init
        init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        init.restype = ctypes.c_int
        mark = libc.fanotify_mark
        mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                         ctypes.c_char_p]
        mark.restype = ctypes.c_int
        fd = init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK,
                  os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise AgentError(f"fanotify_init failed: {os.strerror(e)}")
        if mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, FAN_ACCESS | FAN_MODIFY, AT_FDCWD,
                mount.encode()) < 0:
            e = ctypes.get_errno()
            os.close(fd)
            raise AgentError(f"fanotify_mark {mount} failed: {os.strerror(e)}")
        self.fd = fd
        self._files: Dict[int, List[int]] = {}
        self._pids: Dict[int, bool] = {}
        self.dropped = 0
        self._me = os.getpid()

    def _has_shim(self, pid: int) -> bool:
        known = self._pids.get(pid)
        if known is not None:
            return known
        if len(self._pids) >= MAX_PID_CACHE:
            self._pids.clear()
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                has = any("libunicache" in line for line in f)
        except OSError:
            has = False
        self._pids[pid] = has
        return has

    def poll(self, max_events: int = 65536) -> int:
        """Read pending events (non-blocking).

        :param max_events: stop after this many (bounds the time spent).
        :returns: events read.
        """
        n = 0
        while n < max_events:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError as err:
                if err.errno == errno.EINTR:
                    continue
                break
            if not buf:
                break
            off = 0
            while off + _META.size <= len(buf):
                ev_len, _vers, _r, _ml, mask, efd, pid = _META.unpack_from(buf, off)
                if ev_len < _META.size:
                    break
                off += ev_len
                n += 1
                if mask & FAN_Q_OVERFLOW:
                    self.dropped += 1
                if efd < 0:
                    continue
                try:
                    fid = 0
                    if mask & FAN_MODIFY and self.on_modify is not None:
                        st = os.fstat(efd)
                        fid = file_id_of(self.salt, st.st_dev, st.st_ino)
                        self.on_modify(fid)
                    if pid != self._me and not self._has_shim(pid):
                        if not fid:
                            st = os.fstat(efd)
                            fid = file_id_of(self.salt, st.st_dev, st.st_ino)
                        self._count(fid, mask)
                except OSError:
                    pass
                finally:
                    os.close(efd)
        return n

    def _count(self, fid: int, mask: int) -> None:
        rec = self._files.get(fid)
        if rec is None:
            if len(self._files) >= MAX_TRACKED_FILES:
                self.dropped += 1
                return
            rec = self._files[fid] = [0, 0]
        if mask & FAN_ACCESS:
            rec[0] += 1
        if mask & FAN_MODIFY:
            rec[1] += 1

    def drain(self) -> List[Tuple[int, int, int]]:
        """Records since the last drain, most accessed first: (file_id, accesses, modifies)."""
        self.poll()
        out = sorted(((fid, a, m) for fid, (a, m) in self._files.items()),
                     key=lambda r: (-r[1], -r[2], r[0]))
        self._files = {}
        return out

    def close(self) -> None:
        """Stop capturing."""
        os.close(self.fd)
