"""Issue #14's house rule that a change most easily breaks: no product source file over
500 lines (one concern per module; generated files and patches aside)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: where product code lives (tests, docs and examples are not product code)
PRODUCT = ("hypervisor/unicache", "guest-agent", "tools", "qemu-patches/colormem", "images")
SOURCES = (".py", ".rs", ".c", ".h", ".sh")
MAX_LINES = 500


def test_no_product_source_file_is_over_500_lines() -> None:
    listed = subprocess.run(["git", "ls-files", *PRODUCT], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    files = [f for f in listed if f.endswith(SOURCES)]
    assert len(files) > 100  # the listing found the tree
    long = {f: n for f in files if (n := len((ROOT / f).read_text().splitlines())) > MAX_LINES}
    assert not long, long
