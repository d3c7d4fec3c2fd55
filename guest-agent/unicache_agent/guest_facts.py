"""What the agent reads of its guest for the host: its vCPUs and nodes, each node's
memory, and the capabilities of the installed shim (the ``hello`` and the reports)."""

from __future__ import annotations

import os
from typing import List, Sequence, Tuple

from . import numa_mem
from . import protocol as p

#: the string libunicache.so carries when it enforces colors and replicas
SHIM_CAPS_MARKER = b"unicache-shim-caps="
#: where install.sh puts the shim
DEFAULT_SHIM = "/usr/lib/unicache-agent/libunicache.so"


def shim_caps(path: str = DEFAULT_SHIM) -> Tuple[str, ...]:
    """The optional capabilities the installed shim enforces (its ``unicache-shim-caps=``
    marker), among ``colors`` and ``replicas``; none when the file is absent or older.

    :param path: the shim library.
    :returns: the capabilities, in protocol order.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(16 << 20)
    except OSError:
        return ()
    at = data.find(SHIM_CAPS_MARKER)
    if at < 0:
        return ()
    end = data.find(b"\0", at)
    words = data[at + len(SHIM_CAPS_MARKER):end if end >= 0 else at + 128].split(b",")
    return tuple(c for c in p.SHIM_CAPS if c.encode() in words)


def node_memory(sys_root: str = "/sys/devices/system",
                nodes: Sequence[int] = ()) -> Tuple[Tuple[int, int, int], ...]:
    """Free and total memory of each guest node, as the report's ``node_memory`` sends it.

    Free is what the agent's own memory-tight timer counts (``numa_mem.node_headroom``:
    ``MemFree`` plus ``Inactive(file)``), so the host's NCC round and the agent's replica
    store call the same nodes tight.

    :param sys_root: sysfs ``devices/system`` directory.
    :param nodes: the node ids to read.
    :returns: ``(node, free_bytes, total_bytes)`` for each node whose meminfo was readable.
    """
    return tuple(m for m in numa_mem.node_headroom(sys_root, list(nodes)[:p.MAX_NODES])
                 if m[2] <= p.MAX_COUNTER)


def guest_topology(sys_root: str = "/sys/devices/system") -> Tuple[int, Tuple[int, ...]]:
    """The guest's online vCPU count and NUMA node ids.

    :param sys_root: sysfs ``devices/system`` directory.
    :returns: (vcpus, nodes); nodes is ``(0,)`` when sysfs has no node directory.
    """
    vcpus = 0
    try:
        with open(os.path.join(sys_root, "cpu", "online"), encoding="ascii") as f:
            for part in f.read().strip().split(","):
                if "-" in part:
                    a, b = part.split("-", 1)
                    vcpus += int(b) - int(a) + 1
                elif part:
                    vcpus += 1
    except (OSError, ValueError):
        vcpus = os.cpu_count() or 1
    nodes: List[int] = []
    try:
        for name in os.listdir(os.path.join(sys_root, "node")):
            if name.startswith("node") and name[4:].isdigit():
                nodes.append(int(name[4:]))
    except OSError:
        pass
    return max(1, min(vcpus, p.MAX_VCPUS)), tuple(sorted(nodes)[:p.MAX_NODES]) or (0,)
