"""What the tests of ``make bench``'s guest benchmarks share: one benchmark run through the
recorder at its tiny size, and the QEMU processes a run must not leave behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNICACHE = str(Path(sys.executable).parent / "unicache")


def qemus(guest_prefix: str) -> set[int]:
    """The pids of QEMU processes whose guest's name starts with ``guest_prefix``."""
    out = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"qemu-system" in argv and f"guest={guest_prefix}".encode() in argv:
                out.add(int(proc.name))
    return out


@dataclass(frozen=True)
class Recorded:
    """One benchmark recorded: its JSON, the page it was tabled in, the run's seconds."""

    result: dict[str, Any]
    page: str
    seconds: float


def record_tiny(name: str, tmp_path: Path, guest_prefix: str) -> Recorded:
    """``unicache bench record --tiny --only NAME`` into a page of its own; asserts it
    exited 0 and left no QEMU of its guests running."""
    before = qemus(guest_prefix)
    doc = tmp_path / "docs" / "PERFORMANCE.md"
    doc.parent.mkdir()
    doc.write_text("# Performance\n")
    t0 = time.monotonic()
    run = subprocess.run(
        [UNICACHE, "bench", "record", "--tiny", "--only", name, "--out",
         str(tmp_path / "bench"), "--doc", str(doc)],
        capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - t0
    assert not qemus(guest_prefix) - before, "QEMU of the bench left running"
    assert run.returncode == 0, run.stderr[-2000:]
    return Recorded(json.loads((tmp_path / "bench" / f"{name}.json").read_text()),
                    doc.read_text(), seconds)
