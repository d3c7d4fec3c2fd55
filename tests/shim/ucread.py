"""A reader process for the replica tests: runs under the shim, takes commands on stdin.

Commands, one per line, each answered with one line on stdout:

* ``pread OFF N`` -> the hex of the bytes ``os.pread`` returned;
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


def main() -> int:
    """Serve commands until ``quit`` or end of input."""
    fd = os.open(sys.argv[1], os.O_RDWR)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "pread":
            out = os.pread(fd, int(words[2]), int(words[1])).hex()
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
