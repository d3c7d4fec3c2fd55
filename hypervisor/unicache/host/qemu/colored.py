"""Host side of colored guest memory: the patched QEMU, host page colors, host reservations.

A guest NUMA node with colors (``unicache vm start --numa 0-1:768/-:256@0-15``) is backed
by ``memory-backend-colored``, the QEMU memory backend of ``qemu-patches/`` (``make qemu``
builds it into ``build/qemu/bin/qemu-system-x86_64``), which builds the node's RAM only
from host pages of those LLC page colors. Without it the node falls back to 2 MiB
hugepages: within a 2 MiB page guest-physical and host-physical addresses agree in their
low 21 bits, so guest colors equal host colors there (modulo 512 colors of 4 KiB) and the
guest can color the node itself. docs/coloring.md "QEMU memory backend".

The fallback may have to reserve hugepages (``/sys/kernel/mm/hugepages/hugepages-2048kB``),
and a colored node needs up to two memory mappings per page (``vm.max_map_count``). As
root, unicache raises them by what the VM needs and lowers them by as much when the VM
stops (:func:`release`), so nothing is lost; without root it says what to run.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from unicache.errors import ConfigError, UnicacheError
from unicache.host.qemu.accel import QEMU_BINARY

log = logging.getLogger(__name__)

#: the QOM type qemu-patches/ adds to QEMU
COLORED_BACKEND = "memory-backend-colored"
#: the patched QEMU ``make qemu`` installs, relative to the repository
PATCHED_QEMU_SUBPATH = Path("build/qemu/bin/qemu-system-x86_64")
#: the fallback's page size
HUGEPAGE_BYTES = 2 << 20
#: 2 MiB hugepage pool of the host
HUGEPAGES_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB")
#: per-process limit of memory mappings
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
#: mappings per colored page while colormem's pools are still mapped (hostmem-colored.c)
MAPS_PER_COLORED_PAGE = 2
#: mappings QEMU itself needs besides the colored regions (a generous bound)
QEMU_OWN_MAPS = 4096
#: the one line printed when the patched QEMU is missing ({nodes}: "node 1", "nodes 1,2")
FALLBACK_LINE = ("unicache: patched QEMU with memory-backend-colored not found (make qemu); "
                 "colored {nodes} {verb} 2 MiB hugepages instead: guest colors equal host "
                 "colors within each 2 MiB page")

_backend_cache: dict[tuple[str, int, int], bool] = {}
_colors_cache: list[int] = []


@dataclass(frozen=True, slots=True)
class QemuBinary:
    """The QEMU a VM runs.

    :param path: the executable (a path, or a name found on PATH).
    :param colored: whether it offers ``memory-backend-colored``.
    """

    path: str
    colored: bool


def _repo_root() -> Path:
    # hypervisor/unicache/host/qemu/colored.py -> repository root
    return Path(__file__).resolve().parents[4]


def has_colored_backend(binary: str) -> bool:
    """Whether a QEMU offers ``memory-backend-colored`` (``-object help``; cached per file).

    :param binary: the executable.
    :returns: ``False`` also when it cannot be run.
    """
    resolved = shutil.which(binary)
    if resolved is None:
        return False
    try:
        st = os.stat(resolved)
    except OSError:
        return False
    key = (resolved, st.st_mtime_ns, st.st_size)
    if key not in _backend_cache:
        try:
            out = subprocess.run([resolved, "-object", "help"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _backend_cache[key] = COLORED_BACKEND in out.split()
    return _backend_cache[key]


def find_qemu(colored: bool, repo: Path | None = None) -> QemuBinary:
    """The QEMU to run: env ``UNICACHE_QEMU`` if set; for a VM with colored nodes the patched
    build (``build/qemu/bin/`` of the current directory or the repository) when it has the
    backend; else ``qemu-system-x86_64`` from PATH.

    :param colored: whether the VM has colored nodes.
    :param repo: the repository (default: the one this package lives in).
    :returns: the binary and whether it has ``memory-backend-colored`` (checked only for a
        VM with colored nodes).
    :raises ConfigError: when ``UNICACHE_QEMU`` names no executable.
    """
    env = os.environ.get("UNICACHE_QEMU")
    if env:
        if shutil.which(env) is None:
            raise ConfigError(f"UNICACHE_QEMU={env} is not an executable")
        return QemuBinary(env, colored and has_colored_backend(env))
    if colored:
        for base in (Path.cwd(), repo or _repo_root()):
            cand = base / PATCHED_QEMU_SUBPATH
            if cand.is_file() and has_colored_backend(str(cand)):
                return QemuBinary(str(cand), True)
        return QemuBinary(QEMU_BINARY, has_colored_backend(QEMU_BINARY))
    return QemuBinary(QEMU_BINARY, False)


def host_page_colors() -> int:
    """Page colors of this host's LLC: LLC size / ways / page size from sysfs (cached).

    :returns: the number of colors.
    :raises ConfigError: when sysfs does not describe the LLC.
    """
    if not _colors_cache:
        # imported here: the policy package is pure and loads its own dependencies
        from unicache.policy.srm.buffer import page_colors
        from unicache.topology.sysfs import discover_topology

        try:
            _colors_cache.append(page_colors(discover_topology()))
        except (UnicacheError, OSError, ValueError) as err:
            raise ConfigError("cannot read the host LLC's page colors from "
                              f"/sys/devices/system/cpu/cpu0/cache: {err}") from err
    return _colors_cache[0]


def fallback_line(nodes: Iterable[int]) -> str:
    """The one line that says the patched QEMU is missing and what is used instead."""
    ids = sorted(nodes)
    plural = len(ids) > 1
    return FALLBACK_LINE.format(nodes=f"node{'s' if plural else ''} {','.join(map(str, ids))}",
                                verb="use" if plural else "uses")


def _read_int(path: Path) -> int:
    return int(path.read_text(encoding="ascii").split()[0])


def _write_int(path: Path, value: int) -> None:
    path.write_text(f"{value}\n", encoding="ascii")


def reserve_hugepages(count: int, pool: Path = HUGEPAGES_2M) -> int:
    """Make ``count`` 2 MiB hugepages available, reserving the missing ones as root.

    :param count: hugepages the VM needs.
    :param pool: the hugepage size's sysfs directory.
    :returns: how many were added to ``nr_hugepages`` (give them back with
        :func:`release_hugepages`).
    :raises ConfigError: when they cannot be had (one line says what to do).
    """
    if count <= 0:
        return 0
    try:
        free = _read_int(pool / "free_hugepages") - _read_int(pool / "resv_hugepages")
        total = _read_int(pool / "nr_hugepages")
    except (OSError, ValueError, IndexError) as err:
        raise ConfigError(f"no 2 MiB hugepages on this host ({pool}): cannot back colored "
                          "nodes without the patched QEMU (make qemu)") from err
    if free >= count:
        return 0
    want = count - free
    if os.geteuid() != 0:
        raise ConfigError(f"colored nodes need {count} free 2 MiB hugepages, {free} are free: "
                          f"run as root or `echo {total + want} > {pool}/nr_hugepages`")
    try:
        _write_int(pool / "nr_hugepages", total + want)
        got = _read_int(pool / "nr_hugepages") - total
    except (OSError, ValueError, IndexError) as err:
        raise ConfigError(f"cannot raise {pool}/nr_hugepages: {err}") from err
    if got < want:
        release_hugepages(got, pool)
        raise ConfigError(f"cannot reserve {want} 2 MiB hugepages (the kernel gave {got}): "
                          "free memory, or reserve them at boot (hugepages=N)")
    log.info("reserved %d 2 MiB hugepages (nr_hugepages %d -> %d)", want, total, total + want)
    return want


def release_hugepages(added: int, pool: Path = HUGEPAGES_2M) -> None:
    """Give back hugepages :func:`reserve_hugepages` added (after the VM has stopped)."""
    if added <= 0:
        return
    try:
        total = _read_int(pool / "nr_hugepages")
        _write_int(pool / "nr_hugepages", max(0, total - added))
        log.info("released %d 2 MiB hugepages (nr_hugepages %d -> %d)", added, total,
                 max(0, total - added))
    except (OSError, ValueError, IndexError) as err:
        log.warning("cannot give back %d hugepages through %s: %s", added, pool, err)


def reserve_map_count(colored_pages: int, path: Path = MAX_MAP_COUNT) -> int:
    """Make ``vm.max_map_count`` large enough for a QEMU with ``colored_pages`` colored pages.

    :param colored_pages: 4 KiB pages of the VM's ``memory-backend-colored`` nodes.
    :param path: the sysctl.
    :returns: how much it was raised (lower it again with :func:`release_map_count`).
    :raises ConfigError: when it is too small and cannot be raised.
    """
    if colored_pages <= 0:
        return 0
    need = colored_pages * MAPS_PER_COLORED_PAGE + QEMU_OWN_MAPS
    try:
        limit = _read_int(path)
    except (OSError, ValueError, IndexError):
        return 0  # not known: QEMU's backend checks and says so
    if limit >= need:
        return 0
    if os.geteuid() != 0:
        raise ConfigError(f"colored nodes need vm.max_map_count >= {need} (it is {limit}): "
                          f"run as root or `sysctl -w vm.max_map_count={need}`")
    try:
        _write_int(path, need)
    except OSError as err:
        raise ConfigError(f"cannot raise vm.max_map_count to {need}: {err}") from err
    log.info("raised vm.max_map_count %d -> %d", limit, need)
    return need - limit


def release_map_count(added: int, path: Path = MAX_MAP_COUNT) -> None:
    """Lower ``vm.max_map_count`` by what :func:`reserve_map_count` added."""
    if added <= 0:
        return
    try:
        limit = _read_int(path)
        _write_int(path, max(1, limit - added))
    except (OSError, ValueError, IndexError) as err:
        log.warning("cannot lower vm.max_map_count by %d: %s", added, err)

