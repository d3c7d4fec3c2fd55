"""The guest's CPU -> NUMA node map and its online nodes, as sysfs names them.

The agent reads them once and publishes them in the table (``shm.CpuNodes``: the
``uc_table_cpus`` map and the header's ``node_mask``, uc_layout.h), so that no process
reads sysfs for them, and the harvester sums each chunk's reads per node through the same
map (``counters.py``). This module only reads sysfs; the layout's bounds and its "no node"
byte are the caller's (``shm.py``).
"""

from __future__ import annotations

import os
from typing import Dict, FrozenSet, Optional, Set, Tuple

#: sysfs ``devices/system``, as the agent's other topology readers take it
DEFAULT_SYS_ROOT = "/sys/devices/system"
#: a cpulist file is a few hundred bytes at most; more is not a cpulist
_MAX_LIST_BYTES = 65536


def parse_cpulist(text: str, limit: int) -> FrozenSet[int]:
    """The ids below ``limit`` in a sysfs list (``"0-3,8"``); a malformed part is skipped.

    :param text: the file's contents.
    :param limit: ids at or above it are left out (a range is cut, never walked past it).
    :returns: the ids.
    """
    out: Set[int] = set()
    for part in text.strip().split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            continue
        out.update(range(max(a, 0), min(b, limit - 1) + 1))
    return frozenset(out)


def _read_list(path: str, limit: int) -> Optional[FrozenSet[int]]:
    """A sysfs list file's ids below ``limit``; None when it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            return parse_cpulist(f.read(_MAX_LIST_BYTES), limit)
    except (OSError, ValueError):
        return None


def read_cpu_nodes(sys_root: str, max_cpus: int,
                   max_nodes: int) -> Tuple[Dict[int, int], FrozenSet[int]]:
    """Each CPU's node and the online nodes, from ``<sys_root>/node``.

    The nodes are those of ``node/online`` below ``max_nodes`` (memory-only nodes too);
    a CPU is on the node whose ``nodeN/cpulist`` names it, and a CPU no online node names
    is left out. A machine without node information (no ``node/online``, as on a kernel
    without NUMA) is one node, 0, holding every present CPU (``cpu/present``, else
    ``os.cpu_count()``).

    :param sys_root: sysfs ``devices/system``.
    :param max_cpus: CPU ids at or above it are left out.
    :param max_nodes: node ids at or above it are left out.
    :returns: (cpu -> node, online nodes).
    """
    online = _read_list(os.path.join(sys_root, "node", "online"), max_nodes)
    if not online:
        present = _read_list(os.path.join(sys_root, "cpu", "present"), max_cpus)
        if not present:
            present = frozenset(range(min(os.cpu_count() or 1, max_cpus)))
        return dict.fromkeys(sorted(present), 0), frozenset({0})
    cpu_node: Dict[int, int] = {}
    for node in sorted(online):
        cpus = _read_list(os.path.join(sys_root, "node", f"node{node}", "cpulist"), max_cpus)
        for cpu in sorted(cpus or ()):
            cpu_node.setdefault(cpu, node)  # named twice (sysfs never does): the first
    return cpu_node, online
