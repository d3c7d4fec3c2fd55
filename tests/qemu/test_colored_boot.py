"""The patched QEMU (``make qemu``) boots a guest whose memory-only NUMA node is colored.

One guest for the module: 2 vCPUs on node 0 and a 64 MiB memory-only node 1 built by
``memory-backend-colored`` from host pages of colors 0-255 of this host's LLC (sysfs:
32 MiB / 16 ways / 4 KiB = 512 colors). Checked from inside the guest (node 1 exists, has
no CPUs and about 64 MiB) and from the host: the backend's own pagemap check (QOM
``colored-pages``/``stray-pages``) and an independent one that reads
``/proc/<qemu>/pagemap`` over the region (QOM ``host-address``), also after the guest has
written to the node. This machine is a nested VM: its PFNs are guest-physical, so this
checks the mechanism (every page has an allowed ``pfn % ncolors``), not a cache effect.

Needs root (pagemap). Fails, never skips, when the patched QEMU or the image is missing.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import (
    BACKING_COLORED,
    GuestImage,
    QemuVm,
    VmConfig,
    ensure_image,
    parse_numa,
)
from unicache.host.qemu.colored import PATCHED_QEMU_SUBPATH, find_qemu, host_page_colors

REPO = Path(__file__).resolve().parents[2]
VM_NAME = "uctest-colored"
BOOT_TIMEOUT_S = 180.0
NODE_MIB = 64
COLORS = "0-255"

# the guest binds 32 MiB to node 1 with mbind(MPOL_BIND) and writes every page of it
TOUCH_NODE1 = r"""
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
size = 32 << 20
m = mmap.mmap(-1, size)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
mask = ctypes.c_ulong(1 << 1)
# mbind(addr, len, MPOL_BIND=2, nodemask, maxnode, flags) is syscall 237 on x86_64
if libc.syscall(237, ctypes.c_void_p(addr), ctypes.c_ulong(size), 2, ctypes.byref(mask),
                ctypes.c_ulong(64), 0) != 0:
    raise SystemExit("mbind failed: errno %d" % ctypes.get_errno())
def free_kib():
    for line in open("/sys/devices/system/node/node1/meminfo"):
        if "MemFree:" in line:
            return int(line.split()[3])
before = free_kib()
for i in range(0, size, 4096):
    m[i] = 1
print(before, free_kib())
"""


@pytest.fixture(scope="module")
def image() -> GuestImage:
    return ensure_image()


@pytest.fixture(scope="module")
def vm(image: GuestImage, tmp_path_factory: pytest.TempPathFactory,
       request: pytest.FixtureRequest) -> Iterator[QemuVm]:
    if os.geteuid() != 0:
        pytest.fail("memory-backend-colored reads /proc/self/pagemap: run as root")
    qemu = find_qemu(colored=True)
    if not qemu.colored:
        pytest.fail(f"no QEMU with memory-backend-colored ({PATCHED_QEMU_SUBPATH}): "
                    "run `make qemu`")
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    said: list[str] = []

    def progress(msg: str) -> None:
        said.append(msg)
        if tr is not None:
            tr.write_line(f"[vm] {msg}")

    numa = parse_numa(f"0-1:448/-:{NODE_MIB}@{COLORS}", vcpus=2, memory_mib=512)
    machine = QemuVm(VmConfig(VM_NAME, vcpus=2, memory_mib=512, numa=numa,
                              image_dir=image.directory),
                     tmp_path_factory.mktemp("vms"), progress=progress)
    machine.start()
    try:
        waited = machine.wait_for_boot(BOOT_TIMEOUT_S)
        if tr is not None:
            tr.write_line(f"[vm] {machine.record.qemu}: booted in {waited:.1f} s "
                          f"(accel {machine.record.accel})")
        assert not any("hugepages instead" in s for s in said), said
        yield machine
    finally:
        machine.stop(timeout=10.0)


def _qom(vm: QemuVm, prop: str) -> int:
    value = vm.qmp("qom-get", {"path": "/objects/mem1", "property": prop})
    assert isinstance(value, int), value
    return value


def _host_colors_of_region(pid: int, addr: int, pages: int, ncolors: int) -> list[int]:
    """Colors of the region's frames from /proc/PID/pagemap (-1: not present)."""
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(addr // 4096 * 8)
        raw = f.read(pages * 8)
    assert len(raw) == pages * 8
    out = []
    for (entry,) in struct.iter_unpack("<Q", raw):
        present, pfn = entry >> 63, entry & ((1 << 55) - 1)
        assert pfn != 0 or not present, "PFNs hidden: not root?"
        out.append(pfn % ncolors if present else -1)
    return out


def test_record_says_node_1_is_built_by_memory_backend_colored(vm: QemuVm) -> None:
    node = vm.record.numa[1]
    assert (node.backing, node.ncolors) == (BACKING_COLORED, host_page_colors())
    assert node.guest_colors() == frozenset(range(256))
    # UNICACHE_QEMU may name another patched build (e.g. of qemu-patches/upstream)
    assert vm.record.qemu == (os.environ.get("UNICACHE_QEMU") or str(REPO / PATCHED_QEMU_SUBPATH))
    cmdline = Path(f"/proc/{vm.pid}/cmdline").read_bytes().split(b"\0")
    assert (f"memory-backend-colored,id=mem1,size={NODE_MIB}M,colors={COLORS},"
            f"ncolors={host_page_colors()}").encode() in cmdline


def test_guest_has_a_memory_only_node_of_about_64_mib(vm: QemuVm) -> None:
    res = vm.run_in_guest(["sh", "-c", "cd /sys/devices/system/node && "
                           "echo cpus=$(cat node1/cpulist) && grep MemTotal node1/meminfo"])
    assert res.ok, res
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "cpus="
    total_kib = int(lines[1].split()[3])
    # the kernel keeps part of a node for its own page structures
    assert (NODE_MIB - 8) * 1024 <= total_kib <= NODE_MIB * 1024, lines


def test_backend_finds_every_page_of_an_allowed_color(vm: QemuVm) -> None:
    assert _qom(vm, "colored-pages") == NODE_MIB * 256
    assert _qom(vm, "stray-pages") == 0


def test_host_pagemap_shows_only_allowed_colors(vm: QemuVm) -> None:
    ncolors = host_page_colors()
    colors = _host_colors_of_region(vm.pid, _qom(vm, "host-address"), NODE_MIB * 256, ncolors)
    assert -1 not in colors
    assert max(colors) <= 255
    # the region really holds many colors of the set, not one repeated frame color
    assert len(set(colors)) > 64


def test_pages_the_guest_writes_on_node_1_keep_their_colors(vm: QemuVm) -> None:
    res = vm.run_in_guest(["python3", "-c", TOUCH_NODE1], timeout=120)
    assert res.ok, res
    before, during = map(int, res.stdout.split())
    assert before - during >= 30 * 1024, res.stdout  # 32 MiB came from node 1
    assert _qom(vm, "stray-pages") == 0
    colors = _host_colors_of_region(vm.pid, _qom(vm, "host-address"), NODE_MIB * 256,
                                    host_page_colors())
    assert -1 not in colors and max(colors) <= 255
