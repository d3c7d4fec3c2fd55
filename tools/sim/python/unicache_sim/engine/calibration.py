"""Compute cycles per byte of grep, wc and md5sum, measured from the real tools.

Method (``unicache-sim calibrate`` re-measures): write a 64 MiB text file, read it once so
it is in the page cache, then time each tool over it (median of 5 runs) and time
``cat FILE > /dev/null`` the same way. Cycles per byte are the tool's time times the core
clock (``/proc/cpuinfo`` MHz) over the file size. cat's time is recorded as a reference:
subtracting it (the tool's own page-cache read, which the simulator charges separately
as memory stalls) does not work, because ``grep -c`` runs faster than cat on this
machine, so the figures include the tool's read of cached data (an overestimate by at
most cat's ~0.5 cycles/byte).

The constants below were measured this way on the project machine (AMD EPYC, 2.6 GHz
nested VM, 2026-11-21); the simulator applies them unchanged at the modelled clock.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from unicache.errors import ConfigError

#: tool -> compute cycles per byte (measured; see the module docstring and docs/simulator.md)
CYCLES_PER_BYTE: dict[str, float] = {
    "read": 0.0,
    "grep": 0.13,
    "wc": 0.61,
    "md5sum": 4.2,
}

#: the command line of each calibrated tool (the file name is appended)
TOOLS: dict[str, tuple[str, ...]] = {
    "grep": ("grep", "-c", "a"),
    "wc": ("wc", "-l"),
    "md5sum": ("md5sum",),
}


@dataclass(frozen=True, slots=True)
class Calibration:
    """One measurement.

    :param tool: the tool.
    :param seconds: median run time over the file.
    :param cat_seconds: median time of ``cat`` over the same file.
    :param bytes: file size.
    :param clock_ghz: the clock used to turn seconds into cycles.
    :param cycles_per_byte: the result.
    """

    tool: str
    seconds: float
    cat_seconds: float
    bytes: int
    clock_ghz: float
    cycles_per_byte: float


def host_clock_ghz() -> float:
    """This machine's core clock from /proc/cpuinfo (2.0 if it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000.0
    except (OSError, ValueError):
        pass
    return 2.0


def _median_time(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(size_mib: int = 64, runs: int = 5) -> tuple[Calibration, ...]:
    """Measure the tools on this machine.

    :param size_mib: size of the generated text file.
    :param runs: runs per tool (the median is kept).
    :returns: one calibration per tool.
    :raises ConfigError: if a tool is missing.
    """
    for argv in TOOLS.values():
        if shutil.which(argv[0]) is None:
            raise ConfigError(f"calibration needs {argv[0]} on PATH")
    clock = host_clock_ghz()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calibrate.txt"
        line = os.urandom(48).hex() + "\n"
        with path.open("w") as fh:
            for _ in range(size_mib * 1024 * 1024 // len(line)):
                fh.write(line)
        size = path.stat().st_size
        path.read_bytes()  # into the page cache
        cat = _median_time(["cat", str(path)], runs)
        out = []
        for tool, argv in TOOLS.items():
            t = _median_time([*argv, str(path)], runs)
            cpb = t * clock * 1e9 / size
            out.append(Calibration(tool, t, cat, size, clock, cpb))
    return tuple(out)
