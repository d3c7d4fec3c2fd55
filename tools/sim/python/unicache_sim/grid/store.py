"""The grid's checkpoint: each finished point appended to OUT/points.jsonl, reused by --resume.

A full grid runs for hours (docs/PERFORMANCE.md); a laptop lid, a lost SSH session or a
cluster's wall-clock limit must not throw away what was done. Every result is written as
one JSON line the moment it arrives, flushed, so a killed run leaves at most one torn
line. ``unicache-sim grid --resume`` reads the file back and runs only the points missing.

A result is only reused by the build that made it: each line carries the fingerprint of
the simulator (its Python, its native engine) and of the ``unicache`` package it drives
(policies, machine models: :func:`unicache_sim.build.build_fingerprint`). A line from
another build is never mixed into a table.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from unicache_sim.experiments.mfc.read import BaselineResult, PointResult
from unicache_sim.grid.sweep import GridPoint, GridResult

#: the checkpoint's file name inside the grid's output directory
CHECKPOINT_NAME = "points.jsonl"


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a checkpoint holds for this build.

    :param results: the reusable results, by point.
    :param stale: lines written by another build (dropped).
    :param torn: lines that are not a whole result, such as the last line of a killed run
        (dropped).
    """

    results: dict[GridPoint, GridResult]
    stale: int
    torn: int


def load_checkpoint(path: Path, build: str) -> Resumed:
    """Read a checkpoint; a missing file is an empty one.

    :param path: the checkpoint file.
    :param build: the current build's fingerprint.
    :raises OSError: if the file exists and cannot be read.
    """
    results: dict[GridPoint, GridResult] = {}
    stale = torn = 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return Resumed(results, 0, 0)
    for line in lines:
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            if doc.get("build") != build:
                stale += 1
                continue
            result = _result_of(doc)
        except (ValueError, TypeError, KeyError, AttributeError):
            torn += 1
            continue
        results[result.point] = result
    return Resumed(results, stale, torn)


class CheckpointWriter:
    """Appends results to the checkpoint, one flushed line each.

    :param path: the checkpoint file.
    :param build: the current build's fingerprint.
    :param keep: results to write first, replacing the file's content (``--resume``: what
        was reused; otherwise nothing, and the file starts empty).
    :raises OSError: if the file cannot be written.
    """

    def __init__(self, path: Path, build: str, keep: Iterable[GridResult] = ()) -> None:
        self.build = build
        # rewrite atomically: a crash while rewriting must not lose the reused results
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                for result in keep:
                    out.write(self._line(result))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._file: IO[str] = path.open("a")

    def write(self, result: GridResult) -> None:
        """Append one result and flush it."""
        self._file.write(self._line(result))
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _line(self, result: GridResult) -> str:
        doc = {
            "build": self.build,
            "point": asdict(result.point),
            "ws_mb": result.outcome.ws_mb,
            "baselines": [asdict(b) for b in result.outcome.results],
        }
        return json.dumps(doc, separators=(",", ":")) + "\n"


def _result_of(doc: dict[str, object]) -> GridResult:
    """A result from its line; raises ValueError/TypeError/KeyError on anything else."""
    point = GridPoint(**_checked(GridPoint, doc["point"]))
    baselines = doc["baselines"]
    if not isinstance(baselines, list):
        raise TypeError("baselines")
    outcome = PointResult(
        _number(doc["ws_mb"]),
        tuple(BaselineResult(**_checked(BaselineResult, b)) for b in baselines),
    )
    return GridResult(point, outcome)


def _checked(cls: type, raw: object) -> dict[str, Any]:
    """``raw``'s fields for ``cls``, each checked to be of the type its annotation names."""
    if not isinstance(raw, dict):
        raise TypeError(cls.__name__)
    out: dict[str, Any] = {}
    for f in fields(cls):
        value = raw[f.name]
        if f.type == "str" and not isinstance(value, str):
            raise TypeError(f.name)
        if f.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f.name)
        out[f.name] = _number(value) if f.type == "float" else value
    return out


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    return float(value)
