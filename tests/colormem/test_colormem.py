"""The colormem C library (qemu-patches/colormem): colored pages checked through /proc/self/pagemap.

This machine is a nested VM: its PFNs are guest-physical and say nothing about the
host's cache sets, so these tests check the mechanism (every page of the region has an
allowed ``pfn % n_colors``), not a cache effect.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "qemu-patches" / "colormem" / "test_colormem"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="reading PFNs from /proc/self/pagemap needs root"
)


@pytest.fixture(scope="module")
def binary() -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: install build-essential (make setup does)")
    subprocess.run(
        ["make", "-s", "-f", "qemu-patches/colormem/colormem.mk", "colormem-build"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return BINARY


def _run(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=60, check=False
    )


def _fields(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", line)}


@pytest.mark.parametrize(
    ("n_colors", "colors", "pages", "wanted"),
    [
        (64, "0,5-6", 300, 3),  # xeon-x5355: 64 colors, three of them
        (8, "3", 500, 1),  # one color of eight
        (512, "0-255", 200, 256),  # this machine's LLC (32 MiB, 16 ways): half the colors
    ],
    ids=["x5355-3-of-64", "1-of-8", "host-half-of-512"],
)
def test_every_page_of_the_region_has_an_allowed_color(
    binary: Path, n_colors: int, colors: str, pages: int, wanted: int
) -> None:
    proc = _run(binary, str(n_colors), colors, str(pages))
    assert proc.returncode == 0, proc.stderr
    fields = _fields(proc.stdout)
    assert fields["pages"] == pages
    assert 1 <= fields["colors_used"] <= wanted
    if wanted * 8 <= n_colors:
        # the filter did something: a plain allocation of the same size is not confined
        # (only checked for small sets: the allocator's frame order is skewed, so a plain
        # 200-page allocation may cover fewer than 256 of 512 colors)
        assert fields["plain_colors"] > wanted
    # pages were really searched for and the rest released (pool >= region)
    assert fields["pool_pages"] >= pages


def test_bad_color_list_is_one_line_and_exit_2(binary: Path) -> None:
    proc = _run(binary, "8", "9", "10")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "bad color list" in proc.stderr


def test_argument_errors_name_the_pid_on_one_line(binary: Path) -> None:
    proc = _run(binary, "8", "1", "4")
    assert proc.returncode == 0, proc.stderr
    # the unit checks provoke three refusals and one failed search, one line each
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("colormem[")]
    assert len(lines) == 4
    assert all(re.match(r"colormem\[\d+\]: .+: Invalid argument$", ln) for ln in lines[:3])
    assert re.match(r"colormem\[\d+\]: pool exhausted .+: Cannot allocate memory$", lines[3])
