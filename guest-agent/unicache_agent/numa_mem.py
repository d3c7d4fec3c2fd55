"""Node memory for replicas: a tmpfs per guest node bound to it, or the agent's memory policy;
and how much memory a node can give without pressure (the memory-tight timer's input).

Each node's replicas live in ``<root>/node<N>``, a tmpfs mounted with ``mpol=bind:N`` and
``size=`` the node's replica budget: the kernel puts every page of it on node N, whoever
touches it, and refuses to grow it past the budget. Where mounting is not possible (no
CAP_SYS_ADMIN), the directory is used as it is and the agent binds its own allocations to
the node while it writes a replica (``set_mempolicy(MPOL_BIND)``): tmpfs pages are taken
under the writer's policy. docs/replicas.md says why tmpfs and not memfd.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

MPOL_DEFAULT = 0
MPOL_BIND = 2
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
#: bits of the node mask passed to set_mempolicy
_MASK_BITS = 1024
#: set_mempolicy's number, per architecture (none elsewhere: writes are not bound)
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}.get(platform.machine(), -1)
_libc: Optional[ctypes.CDLL] = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def is_mounted(path: str) -> bool:
    """Whether a tmpfs is mounted exactly at ``path`` (from /proc/self/mounts)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1] == real and parts[2] == "tmpfs":
                    return True
    except OSError:
        pass
    return False


def mount_node_tmpfs(path: str, node: int, size_bytes: int) -> bool:
    """Mount a tmpfs at ``path`` whose pages are all on ``node``, at most ``size_bytes``.

    :returns: True when mounted (or already a tmpfs there); False, with one log line, when
        the kernel refuses (no privilege, no NUMA): the caller binds its writes instead.
    """
    if is_mounted(path):
        return True
    opts = f"mpol=bind:{node},size={max(size_bytes, 4096)},mode=0700"
    lib = _lib()
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                          ctypes.c_char_p]
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if lib.mount(b"unicache-replicas", path.encode(), b"tmpfs", flags, opts.encode()) != 0:
        e = ctypes.get_errno()
        log.warning("cannot mount a tmpfs bound to node %d at %s (%s): replicas are written "
                    "under the agent's memory policy instead", node, path, os.strerror(e))
        return False
    return True


def unmount(path: str) -> None:
    """Unmount the tmpfs at ``path`` (lazily: processes may still map replicas there)."""
    if not is_mounted(path):
        return
    lib = _lib()
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    if lib.umount2(path.encode(), 2) != 0:  # MNT_DETACH
        log.warning("cannot unmount %s: %s", path, os.strerror(ctypes.get_errno()))


def _set_mempolicy(mode: int, node: int) -> bool:
    if _SYS_SET_MEMPOLICY < 0:
        return False
    words = _MASK_BITS // 64
    mask = (ctypes.c_ulong * words)()
    if mode != MPOL_DEFAULT:
        mask[node // 64] = 1 << (node % 64)
    lib = _lib()
    lib.syscall.restype = ctypes.c_long
    r = lib.syscall(ctypes.c_long(_SYS_SET_MEMPOLICY), ctypes.c_int(mode),
                    mask if mode != MPOL_DEFAULT else None,
                    ctypes.c_ulong(_MASK_BITS if mode != MPOL_DEFAULT else 0))
    return int(r) == 0


@contextmanager
def bound_to(node: int, enabled: bool = True) -> Iterator[None]:
    """Allocate this thread's new pages on ``node`` inside the block (no-op when not
    ``enabled``, e.g. when the directory is a tmpfs bound to the node already)."""
    bound = enabled and _set_mempolicy(MPOL_BIND, node)
    try:
        yield
    finally:
        if bound:
            _set_mempolicy(MPOL_DEFAULT, 0)


def node_headroom(sys_root: str = "/sys/devices/system",
                  nodes: Sequence[int] = ()) -> Tuple[Tuple[int, int, int], ...]:
    """Each node's memory free or cheaply freed, and its total, from ``nodeN/meminfo``.

    Free is ``MemFree`` plus ``Inactive(file)``: the page cache the kernel reclaims first,
    before it would touch anything else. A guest whose page cache has filled a node (as it
    does after a while) is not short of memory; counting only ``MemFree`` would call every
    such node tight and keep it without replicas for good.

    :param sys_root: sysfs ``devices/system`` directory.
    :param nodes: the node ids to read.
    :returns: ``(node, free_bytes, total_bytes)`` for each node whose meminfo was readable.
    """
    out: List[Tuple[int, int, int]] = []
    for n in nodes:
        fields = {}
        try:
            with open(os.path.join(sys_root, "node", f"node{n}", "meminfo"),
                      encoding="ascii") as f:
                for line in f:
                    parts = line.split()  # "Node 0 MemFree:  123 kB"
                    if len(parts) >= 4 and parts[2] in ("MemTotal:", "MemFree:",
                                                        "Inactive(file):"):
                        fields[parts[2]] = int(parts[3]) * (1024 if parts[-1] == "kB" else 1)
        except (OSError, ValueError):
            continue
        total = fields.get("MemTotal:", 0)
        free = fields.get("MemFree:", 0) + fields.get("Inactive(file):", 0)
        if total > 0:
            out.append((n, min(free, total), total))
    return tuple(out)
