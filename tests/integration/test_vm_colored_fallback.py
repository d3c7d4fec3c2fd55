"""Without the patched QEMU a colored node boots on 2 MiB hugepages (the documented fallback).

Runs the system's stock ``qemu-system-x86_64`` (``UNICACHE_QEMU``) with a colored
memory-only node: unicache says so in one line, backs the node with
``memory-backend-memfd,hugetlb=on,hugetlbsize=2M``, reserves the hugepages it lacks as root
and gives them back when the VM stops. The patched QEMU itself is tested on demand in
tests/qemu (``make qemu-test``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import (
    BACKING_HUGEPAGE,
    GuestImage,
    QemuVm,
    VmConfig,
    ensure_image,
    parse_numa,
)
from unicache.host.qemu.colored import HUGEPAGES_2M, fallback_line

VM_NAME = "uctest-hugefall"
NODE_MIB = 64
pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="reserving hugepages through sysfs needs root")


def _nr() -> int:
    return int((HUGEPAGES_2M / "nr_hugepages").read_text())


@pytest.fixture(scope="module")
def image() -> GuestImage:
    return ensure_image()


@pytest.fixture(scope="module")
def booted(image: GuestImage, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[QemuVm, list[str], int]]:
    stock = shutil.which("qemu-system-x86_64")
    assert stock is not None, "qemu-system-x86_64 missing: install qemu-system-x86"
    nr_before = _nr()
    said: list[str] = []
    numa = parse_numa(f"0-1:448/-:{NODE_MIB}@0-15", vcpus=2, memory_mib=512)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("UNICACHE_QEMU", stock)
        vm = QemuVm(VmConfig(VM_NAME, vcpus=2, memory_mib=512, numa=numa,
                             image_dir=image.directory),
                    tmp_path_factory.mktemp("vms"), progress=said.append)
        vm.start()
    try:
        vm.wait_for_boot(180.0)
        yield vm, said, nr_before
    finally:
        vm.stop(timeout=10.0)
    assert _nr() == nr_before, "hugepages reserved for the VM were not given back"


def test_missing_patched_qemu_is_said_in_one_line(booted: tuple[QemuVm, list[str], int]
                                                  ) -> None:
    _, said, _ = booted
    assert [s for s in said if "memory-backend-colored" in s] == [fallback_line([1])]


def test_node_is_backed_by_2m_hugepages(booted: tuple[QemuVm, list[str], int]) -> None:
    vm, _, nr_before = booted
    node = vm.record.numa[1]
    assert node.backing == BACKING_HUGEPAGE
    assert node.guest_colors() == frozenset(range(node.ncolors)) and node.ncolors > 0
    cmdline = Path(f"/proc/{vm.pid}/cmdline").read_bytes().split(b"\0")
    assert (f"memory-backend-memfd,id=mem1,size={NODE_MIB}M,hugetlb=on,"
            "hugetlbsize=2M").encode() in cmdline
    # what was missing was reserved on top of what the host had
    assert _nr() >= NODE_MIB // 2
    assert _nr() == nr_before + vm.record.hugepages_added


def test_guest_sees_the_memory_only_node(booted: tuple[QemuVm, list[str], int]) -> None:
    vm, _, _ = booted
    res = vm.run_in_guest(["sh", "-c", "cd /sys/devices/system/node && "
                           "echo cpus=$(cat node1/cpulist) && grep MemTotal node1/meminfo"])
    assert res.ok, res
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "cpus="
    assert (NODE_MIB - 8) * 1024 <= int(lines[1].split()[3]) <= NODE_MIB * 1024, lines
