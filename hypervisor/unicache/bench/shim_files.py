"""The files cells of ``unicache bench shim``: what the shim adds per small file.

A program that reads many small files (tar, a web server; issue #33) pays the shim once per
file rather than per byte: each file is an open, an fstat, a read, the read that finds EOF
and a close, and the shim's per-open work (learning the file, the open sample's draw, a
counted file's run sent at close) is a large part of what it adds. The cell (``uc_bench
cell --kind files``, guest-agent/shim/uc_bench_files.c) goes file after file through
:data:`FILES_PER_DIR` page-cached files of one size, blocks through the preloaded
functions alternating with blocks through libc's own, and reports ns per file.

It runs under the ``unplaced`` table (8,192 entries, none naming these files) once per
open sample (shim_tables.py :data:`~unicache.bench.shim_tables.OPEN_SAMPLES`, each its own
table): ``sampled``, the agent's opt-in (``--open-sample 262144:3``: one in 8 read-only
opens of files up to 256 KiB counted), ``every`` (every open counted, the agent's default:
the cost of a counted file) and ``never`` (one in 2^15: practically
every open passes, the cost of a skipped file). The simulator's calibration takes the last
two (:mod:`unicache.bench.shim_calibration`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.bench import shim_cells, shim_stats, shim_tables
from unicache.errors import ConfigError

#: the files cells' sizes: small files an open sample covers (the agent's opt-in covers up
#: to 256 KiB; the simulator holds the 64 KiB figures above it, as it holds the calls')
FILE_SIZES = (4096, 16384, 65536)
#: ``--quick``: one size
QUICK_FILE_SIZES = (16384,)
#: the largest size the files cells take (the ``never`` sample covers files up to it)
MAX_FILE_SIZE = 65536
#: files per size, cycled through: 16 MiB of 64 KiB files, more than a block reads
FILES_PER_DIR = 256


@dataclass(frozen=True, slots=True)
class FilesCell:
    """One files cell: files of ``size`` bytes under the open sample ``sample``."""

    size: int
    sample: str

    def label(self) -> str:
        return f"files of {shim_cells.size_text(self.size)}, open sample {self.sample}"

    @property
    def table(self) -> str:
        """The table state it runs under."""
        return shim_tables.sampled_state(self.sample)


def cells(sizes: tuple[int, ...]) -> list[FilesCell]:
    """Every files cell of ``sizes``, size by size, each under every open sample."""
    return [FilesCell(s, sample) for s in sizes for sample in shim_tables.OPEN_SAMPLES]


def file_sizes_of(text: str | None, quick: bool = False) -> tuple[int, ...]:
    """The files cells' sizes from ``--file-sizes`` (None: the default, or ``--quick``'s;
    ``none``: no files cells).

    :raises ConfigError: naming the option and its bad value.
    """
    if text is None:
        return QUICK_FILE_SIZES if quick else FILE_SIZES
    if text.strip() == "none":
        return ()
    try:
        sizes = tuple(dict.fromkeys(int(p.replace("_", "")) for p in text.split(",")
                                    if p.strip()))
    except ValueError:
        sizes = (0,)  # refused below, with the text as given
    return checked_sizes(sizes or (0,), text)


def checked_sizes(sizes: tuple[int, ...], given: str | None = None) -> tuple[int, ...]:
    """``sizes``, if the files cells take each (none at all: no files cells).

    :param given: the option's text, for the error (default: ``sizes`` joined).
    :raises ConfigError: naming the option and its bad value.
    """
    if any(not 1 <= s <= MAX_FILE_SIZE for s in sizes):
        shown = ",".join(str(s) for s in sizes) if given is None else given
        raise ConfigError(f"--file-sizes takes byte counts of 1 to {MAX_FILE_SIZE} (files an "
                          f"open sample covers) separated by commas, or none, not {shown!r}")
    return sizes


def make_files(directory: Path, size: int) -> Path:
    """:data:`FILES_PER_DIR` files of ``size`` random bytes in a new ``directory/files-SIZE``
    (just written: page-cached); that directory."""
    where = directory / f"files-{size}"
    where.mkdir()
    for i in range(FILES_PER_DIR):
        (where / f"f{i:04d}").write_bytes(os.urandom(size))
    return where


def sample_text(max_bytes: int, shift: int) -> str:
    """What an ``OpenSample(max_bytes, shift)`` counts, in words."""
    if shift == 0 or max_bytes == 0:
        return "every open counted"
    return (f"1 in {1 << shift:,} opens of files up to {shim_cells.size_text(max_bytes)} "
            "counted")


@dataclass(frozen=True, slots=True)
class FilesResult:
    """One files cell's figures, ns per file: under the shim, under the null preload.

    :param sample_bytes: the open sample's largest file sampled (``OpenSample.max_bytes``).
    :param sample_shift: its log2 interval (``OpenSample.shift``).
    :param round_added: the shim's median of each round (process) alone.
    """

    cell: FilesCell
    sample_bytes: int
    sample_shift: int
    shim: shim_stats.Paired
    control: shim_stats.Paired
    round_added: tuple[float, ...]

    def as_json(self) -> dict[str, Any]:
        return {"size": self.cell.size, "sample": self.cell.sample,
                "sample_bytes": self.sample_bytes, "sample_shift": self.sample_shift,
                "table": self.cell.table,
                **shim_cells.stats_json(self.shim, self.control, "ns"),
                "round_added_ns": [round(x, 3) for x in self.round_added]}
