"""The simulator's figures of the shim's cost, from a run of ``unicache bench shim``.

``make bench`` (:func:`record.record`) writes them to ``unicache_sim/guest/shimcost.toml``, the
calibration the simulated guest charges per call (:mod:`unicache_sim.guest.shimcost`): for each
table state and size, the upper end of the 95 % interval of the sequential ``read()``
cell, with the run's date, command and this machine's clock; and per small file (open,
fstat, read to EOF, close: the files cells, unicache.bench.shim_files) the upper end of the
cell where every open is counted (``file_counted_ns``) and of the one where practically
none is (``file_skipped_ns``), at each of ``file_sizes``. The same run's tables are the
shim block of docs/PERFORMANCE.md, which tests/bench/test_shim_calibration.py holds the
file to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unicache_sim.engine.calibration import host_clock_ghz
from unicache_sim.guest.shimcost import TABLE_STATES, parse

from unicache.errors import BenchError

#: where the simulator's package keeps it, from the repository's root
CALIBRATION = Path("tools/sim/python/unicache_sim/guest/shimcost.toml")
#: the sizes the simulator interpolates between (the benchmark's default sizes)
SIZES = (512, 4096, 16384, 65536, 262144)
#: the files cells' sizes (the benchmark's default): a file of each, counted or skipped
FILE_SIZES = (4096, 16384, 65536)
#: the files cells' open samples the calibration takes: every open counted, and
#: practically none (unicache.bench.shim_tables.OPEN_SAMPLES)
COUNTED, SKIPPED = "every", "never"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip().replace('"', "")
    except OSError:
        pass
    return "this machine"


def calibration_toml(doc: dict[str, Any], when: str, command: str,
                     clock_ghz: float | None = None) -> str:
    """The TOML of a shim benchmark's JSON.

    :param doc: ``unicache bench shim --json``'s output.
    :param when: the run's date, as the doc block says it.
    :param command: the command, as the doc block shows it.
    :param clock_ghz: this machine's clock (default: /proc/cpuinfo's).
    :raises BenchError: when the run lacks a sequential read cell or a files cell the
        simulator needs.
    """
    cells = {(c["table"], c["size"]): c for c in doc["cells"]
             if c["kind"] == "read" and c["pattern"] == "seq"}
    missing = [f"{t} {s}" for t in TABLE_STATES for s in SIZES if (t, s) not in cells]
    if missing:
        raise BenchError("the shim calibration needs sequential read cells of every table "
                         f"and size: missing {', '.join(missing)}")
    files = _files_uppers(doc)
    ghz = clock_ghz if clock_ghz is not None else host_clock_ghz()
    lines = [
        "# What libunicache.so adds to a read call and to a small file (ns), for the simulated",
        "# guest (shimcost.py). Written by `make bench` (unicache.bench.shim_calibration); do",
        "# not edit.",
        f'source = "{command}, {when}: sequential read() and small files (open, fstat, read '
        f'to EOF, close) through an 8,192-entry table, upper end of the 95 % interval, on '
        f'{_cpu_model()} at {ghz:.2f} GHz"',
        f"clock_ghz = {ghz:.3f}",
        f"sizes = [{', '.join(str(s) for s in SIZES)}]",
    ]
    for t in TABLE_STATES:
        uppers = ", ".join(f"{cells[t, s]['ci_high_ns']:.1f}" for s in SIZES)
        lines.append(f"{t}_ns = [{uppers}]")
    lines += [f"file_sizes = [{', '.join(str(s) for s in FILE_SIZES)}]",
              f"file_counted_ns = [{files[COUNTED]}]",
              f"file_skipped_ns = [{files[SKIPPED]}]"]
    text = "\n".join(lines) + "\n"
    parse(text)  # what the simulator will read
    return text


def _files_uppers(doc: dict[str, Any]) -> dict[str, str]:
    """The upper ends of the files cells of each open sample the calibration takes, at
    every file size, as a TOML array's body.

    :raises BenchError: naming the cells the run lacks.
    """
    cells = {(f["sample"], f["size"]): f for f in doc.get("files", [])}
    missing = [f"{p} {s}" for p in (COUNTED, SKIPPED) for s in FILE_SIZES
               if (p, s) not in cells]
    if missing:
        raise BenchError("the shim calibration needs the files cells of the every and never "
                         f"open samples at every file size: missing {', '.join(missing)}")
    return {p: ", ".join(f"{cells[p, s]['ci_high_ns']:.1f}" for s in FILE_SIZES)
            for p in (COUNTED, SKIPPED)}


def write_calibration(root: Path, doc: dict[str, Any], when: str, command: str) -> Path:
    """Write the calibration under the repository ``root``; its path."""
    path = root / CALIBRATION
    # a root other than the checkout (a trial run's) may not have the directories yet
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(calibration_toml(doc, when, command))
    return path
