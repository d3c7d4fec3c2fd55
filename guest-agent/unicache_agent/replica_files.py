"""Replica files: one replicated chunk on one node, its layout, its coherent fill and its drop.

The layout mirrors ``struct uc_rep_hdr`` of ``guest-agent/shim/uc_layout.h``: a 128-byte
header padded to :data:`DATA_OFF`, then the chunk's bytes. A file is written whole, mode
0400, before any process gets a descriptor of it; afterwards the agent changes only its
state (VALID -> DROPPED, one byte), truncates it to its header (its memory goes at once,
even while processes map it: they fault inside the shim's guard, never in the program) and
unlinks it. docs/replicas.md "Coherence" gives the reasoning of :func:`read_chunk`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import time
from dataclasses import dataclass
from typing import Optional

from .shm import file_id_of

#: "UCRF", as in uc_layout.h
REP_MAGIC = 0x46524355
REP_LAYOUT = 1
#: the chunk's bytes start one page in
DATA_OFF = 4096
STATE_VALID = 1
STATE_DROPPED = 2
#: offset of the state word in the header
STATE_OFF = 8
#: replica files are the agent's: nobody else may open them by name or write them
FILE_MODE = 0o400
#: a file whose ctime has no nanoseconds sits on a file system with coarse timestamps
COARSE_FS_MARGIN_NS = 2_000_000_000
#: the shim's default margin (UNICACHE_REPLICA_MARGIN_MS): more than a jiffy
DEFAULT_MARGIN_NS = 20_000_000
# magic layout state node file_id chunk chunk_size len dev ino size mtime(s, ns) ctime(s, ns)
_HDR = struct.Struct("<IIII4Q2Q5q24x")
_STATE = struct.Struct("<I")
_NS = 1_000_000_000


@dataclass(frozen=True)
class SourceState:
    """The source file as one ``fstat`` saw it: a serve needs every field unchanged."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> SourceState:
        """The fields of an ``os.stat_result``."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class ChunkKey:
    """A replicated chunk on a node (the chunk size is the table's when it was filled)."""

    file_id: int
    chunk: int
    chunk_size: int
    node: int


@dataclass(frozen=True)
class ReadResult:
    """What :func:`read_chunk` got: the bytes and the source state they belong to, or why
    not (an errno: EAGAIN the file changed too recently or during the read, EINVAL not a
    chunk of a regular file)."""

    data: bytes = b""
    source: Optional[SourceState] = None
    error: int = 0


def header(key: ChunkKey, source: SourceState, length: int,
           state: int = STATE_VALID) -> bytes:
    """The header page of a replica file.

    :param key: the chunk and node.
    :param source: the source file the bytes were read from.
    :param length: bytes of the chunk held.
    :param state: :data:`STATE_VALID` or :data:`STATE_DROPPED`.
    :returns: :data:`DATA_OFF` bytes.
    """
    raw = _HDR.pack(REP_MAGIC, REP_LAYOUT, state, key.node, key.file_id, key.chunk,
                    key.chunk_size, length, source.dev, source.ino, source.size,
                    source.mtime_ns // _NS, source.mtime_ns % _NS,
                    source.ctime_ns // _NS, source.ctime_ns % _NS)
    return raw + bytes(DATA_OFF - len(raw))


def read_chunk(src_fd: int, salt: int, file_id: int, chunk: int, chunk_size: int,
               margin_ns: int = DEFAULT_MARGIN_NS) -> ReadResult:
    """Read one chunk of the file ``src_fd`` refers to, coherently (docs/replicas.md).

    1. ``t0`` = the real-time clock; a descriptor of the agent's own (so the caller's file
       position never moves); ``lseek(SEEK_DATA)`` takes the inode lock shared (ext4,
       tmpfs), so a buffered write in flight has finished;
    2. ``fstat``: the file's ctime must be older than ``t0 - margin`` (margin > the kernel's
       timestamp granularity), so any later write sets another ctime;
    3. read the chunk; ``fstat`` again: unchanged, or no replica.

    :param src_fd: a descriptor of the source, as the requesting process passed it.
    :param salt: the table's file-id salt.
    :param file_id: the id the caller expects (the descriptor must be of that file).
    :param chunk: chunk index.
    :param chunk_size: bytes per chunk.
    :param margin_ns: least age of the file's last change.
    :returns: the bytes and their source state, or the errno of the refusal.
    """
    t0 = time.time_ns()
    try:
        own = os.open(f"/proc/self/fd/{src_fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return ReadResult(error=errno.EINVAL)
    try:
        # ENXIO (a file of holes only) still took the lock: the barrier holds
        with contextlib.suppress(OSError):
            os.lseek(own, 0, os.SEEK_DATA)
        s1 = os.fstat(own)
        start = chunk * chunk_size
        if (not stat.S_ISREG(s1.st_mode) or s1.st_size <= start
                or file_id_of(salt, s1.st_dev, s1.st_ino) != file_id):
            return ReadResult(error=errno.EINVAL)
        margin = margin_ns + (COARSE_FS_MARGIN_NS if s1.st_ctime_ns % _NS == 0 else 0)
        if t0 - s1.st_ctime_ns <= margin:
            return ReadResult(error=errno.EAGAIN)
        length = min(chunk_size, s1.st_size - start)
        parts = []
        got = 0
        while got < length:
            part = os.pread(own, length - got, start + got)
            if not part:
                return ReadResult(error=errno.EAGAIN)  # shrank meanwhile
            parts.append(part)
            got += len(part)
        s2 = os.fstat(own)
        if SourceState.of(s2) != SourceState.of(s1):
            return ReadResult(error=errno.EAGAIN)
        return ReadResult(b"".join(parts), SourceState.of(s1))
    except OSError:
        return ReadResult(error=errno.EAGAIN)
    finally:
        os.close(own)


def write_replica(path: str, key: ChunkKey, source: SourceState, data: bytes) -> int:
    """Create the replica file at ``path`` (which must not exist), whole.

    :returns: the bytes of memory it holds (pages of header and data).
    :raises OSError: when it cannot be written (the caller removes what is left).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(header(key, source, len(data)) + data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
    return charge(len(data))


def charge(length: int) -> int:
    """Memory a replica of ``length`` bytes holds: its header page and its data pages."""
    return DATA_OFF + -(-length // 4096) * 4096


def drop_replica(path: str) -> None:
    """Mark the file dropped, free its data and unlink it; processes that map it see the
    state (or fault inside the shim's guard) and take the real call. Missing: nothing to do.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.pwrite(fd, _STATE.pack(STATE_DROPPED), STATE_OFF)
        os.ftruncate(fd, DATA_OFF)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)


def intact(path: str, key: ChunkKey, source: SourceState, length: int) -> bool:
    """Whether a replica file still has the size and header the agent wrote (nothing has
    truncated or overwritten it since; its data is not checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size != DATA_OFF + length:
            return False
        return os.pread(fd, _HDR.size, 0) == header(key, source, length)[:_HDR.size]
    except OSError:
        return False
    finally:
        os.close(fd)
