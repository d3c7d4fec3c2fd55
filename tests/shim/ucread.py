"""A reader process for the replica tests: runs under the shim, takes commands on stdin.

Commands, one per line, each answered with one line on stdout:

* ``pread OFF N`` -> the hex of the bytes ``os.pread`` returned;
* ``read OFF N``, ``readv OFF N``, ``preadv OFF N``, ``sendfile OFF N`` -> the same through
  ``lseek`` + ``read``, ``lseek`` + ``readv`` (three buffers), ``preadv`` (three buffers),
  ``sendfile`` into a pipe (read back), each followed by the file position;
* ``pwrite OFF HEX`` -> ``ok`` after ``os.pwrite`` (a write the shim sees);
* ``affinity`` -> the thread's CPUs, comma-separated;
* ``tid`` -> the thread's id (the shim's vCPU claims name it);
* ``quit``.

Usage: ``python3 ucread.py FILE`` (with LD_PRELOAD and UNICACHE_* set by the test).
"""

from __future__ import annotations

import os
import sys
import threading


def _bufs(n: int) -> list[bytearray]:
    return [bytearray(n // 3), bytearray(n // 3), bytearray(n - 2 * (n // 3))]


def _joined(bufs: list[bytearray], got: int) -> bytes:
    return b"".join(bufs)[:got]


def _read(fd: int, off: int, n: int) -> str:
    os.lseek(fd, off, os.SEEK_SET)
    data = os.read(fd, n)
    return f"{data.hex()} {os.lseek(fd, 0, os.SEEK_CUR)}"


def _readv(fd: int, off: int, n: int) -> str:
    os.lseek(fd, off, os.SEEK_SET)
    bufs = _bufs(n)
    got = os.readv(fd, bufs)
    return f"{_joined(bufs, got).hex()} {os.lseek(fd, 0, os.SEEK_CUR)}"


def _preadv(fd: int, off: int, n: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    bufs = _bufs(n)
    got = os.preadv(fd, bufs, off)
    return f"{_joined(bufs, got).hex()} {os.lseek(fd, 0, os.SEEK_CUR)}"


def _sendfile(fd: int, off: int, n: int) -> str:
    os.lseek(fd, off, os.SEEK_SET)
    r, w = os.pipe()
    try:
        sent = os.sendfile(w, fd, None, n)  # at the file position: it moves
        data = os.read(r, sent) if sent > 0 else b""
    finally:
        os.close(r)
        os.close(w)
    return f"{data.hex()} {os.lseek(fd, 0, os.SEEK_CUR)}"


KINDS = {"read": _read, "readv": _readv, "preadv": _preadv, "sendfile": _sendfile}


def main() -> int:
    """Serve commands until ``quit`` or end of input."""
    fd = os.open(sys.argv[1], os.O_RDWR)
    os.fstat(fd)  # as programs do: the shim learns the file from it (uc_interpose_stat.c)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "pread":
            out = os.pread(fd, int(words[2]), int(words[1])).hex()
        elif words[0] in KINDS:
            out = KINDS[words[0]](fd, int(words[1]), int(words[2]))
        elif words[0] == "pwrite":
            os.pwrite(fd, bytes.fromhex(words[2]), int(words[1]))
            out = "ok"
        elif words[0] == "tid":
            out = str(threading.get_native_id())
        elif words[0] == "affinity":
            out = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        else:
            out = "?"
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
