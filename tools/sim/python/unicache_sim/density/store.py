"""The density experiment's results as Parquet: a cache of finished points, and the run's table.

Every finished point is written at once to ``OUT/cache/KEY.parquet`` (written to a
temporary file, then renamed: a killed run leaves no torn file), where KEY is a hash of
every parameter of the point and of the build (:func:`~unicache_sim.build.build_fingerprint`:
the simulator, its native engine, the policies and the models). A rerun finds the points
it asks for there and runs only the others; a point of another build is never reused.

The run's own table, ``OUT/points.parquet``, holds every point the report used, one row
per point and flavor (long format: a data scientist's ``pandas.read_parquet`` or
``duckdb`` opens it directly), with every parameter of the point in its columns:

* the point: ``key``, ``build``, ``stage``, ``model``, ``mix``, ``n``, ``policy``,
  ``seed``, ``overcommit``, the timing (``window_s``, ``round_s``, ``warm_rounds``,
  ``measure_rounds``, ``balance_interval_s``, ``float_prob``), ``vm_flavors`` (the VMs in
  arrival order), ``rates`` and ``flavor_defs`` (JSON: the request rates and the flavors'
  full definitions);
* its outcome: ``admitted``, ``refused``, ``seconds``, ``host_moves``,
  ``guest_migrations``, ``rounds``;
* the flavor's: ``flavor``, ``vms``, ``requests``, ``mean_us``, ``p50_us``, ``p95_us``,
  ``p99_us``, ``worst_vm_p95_us``, ``mb_per_s`` and ``latencies_us`` (every measured
  request; a point with no tenant has one row with these null).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError

from unicache_sim.density.point import PointOutcome, TenantResult
from unicache_sim.density.points import DensityPoint, PointResult

__all__ = ["PointCache", "point_key", "read_points", "write_points"]

#: the cache's directory inside the output directory
CACHE_DIR = "cache"
#: the run's table inside the output directory
POINTS_FILE = "points.parquet"

_TENANT_FIELDS = (
    "vms",
    "requests",
    "mean_us",
    "p50_us",
    "p95_us",
    "p99_us",
    "worst_vm_p95_us",
    "mb_per_s",
)


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError as err:
        raise ConfigError("density needs pyarrow (tools/sim/requirements.txt)") from err
    return pa


def _params(point: DensityPoint) -> dict[str, Any]:
    t = point.timing
    return {
        "stage": point.stage,
        "model": point.model,
        "mix": point.mix,
        "n": point.n,
        "policy": point.policy,
        "seed": point.seed,
        "overcommit": point.overcommit,
        "window_s": t.window_s,
        "round_s": t.round_s,
        "warm_rounds": t.warm_rounds,
        "measure_rounds": t.measure_rounds,
        "balance_interval_s": t.balance_interval_s,
        "float_prob": t.float_prob,
        "vm_flavors": ",".join(f.name for f in point.flavors),
        "rates": json.dumps(point.rates),
        "flavor_defs": json.dumps(
            {f.name: asdict(f) for f in point.flavors}, sort_keys=True, default=str
        ),
    }


def point_key(point: DensityPoint, build: str) -> str:
    """A name for the point and the build: a hash of every parameter."""
    text = json.dumps({"build": build, **_params(point)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _rows(result: PointResult, build: str) -> list[dict[str, Any]]:
    point, out = result.point, result.outcome
    base = {
        "key": point_key(point, build),
        "build": build,
        **_params(point),
        "admitted": out.admitted,
        "refused": out.refused,
        "seconds": out.seconds,
        "host_moves": out.host_moves,
        "guest_migrations": out.guest_migrations,
        "rounds": out.rounds,
    }
    if not out.tenants:
        return [{**base, "flavor": None, **dict.fromkeys(_TENANT_FIELDS), "latencies_us": None}]
    return [
        {
            **base,
            "flavor": t.flavor,
            **{f: getattr(t, f) for f in _TENANT_FIELDS},
            "latencies_us": list(t.latencies_us),
        }
        for t in out.tenants
    ]


def _schema() -> Any:
    pa = _pa()
    return pa.schema(
        [
            ("key", pa.string()),
            ("build", pa.string()),
            ("stage", pa.string()),
            ("model", pa.string()),
            ("mix", pa.string()),
            ("n", pa.int64()),
            ("policy", pa.string()),
            ("seed", pa.int64()),
            ("overcommit", pa.float64()),
            ("window_s", pa.float64()),
            ("round_s", pa.float64()),
            ("warm_rounds", pa.int64()),
            ("measure_rounds", pa.int64()),
            ("balance_interval_s", pa.float64()),
            ("float_prob", pa.float64()),
            ("vm_flavors", pa.string()),
            ("rates", pa.string()),
            ("flavor_defs", pa.string()),
            ("admitted", pa.bool_()),
            ("refused", pa.string()),
            ("seconds", pa.float64()),
            ("host_moves", pa.int64()),
            ("guest_migrations", pa.int64()),
            ("rounds", pa.int64()),
            ("flavor", pa.string()),
            ("vms", pa.int64()),
            ("requests", pa.int64()),
            ("mean_us", pa.float64()),
            ("p50_us", pa.float64()),
            ("p95_us", pa.float64()),
            ("p99_us", pa.float64()),
            ("worst_vm_p95_us", pa.float64()),
            ("mb_per_s", pa.float64()),
            ("latencies_us", pa.list_(pa.float64())),
        ]
    )


def write_points(path: Path, results: Iterable[PointResult], build: str) -> None:
    """Write results as one Parquet table, atomically (a temporary file, renamed).

    :raises OSError: if the file cannot be written.
    """
    pa = _pa()
    rows = [row for r in results for row in _rows(r, build)]
    table = pa.Table.from_pylist(rows, schema=_schema())
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        pa.parquet.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_points(path: Path) -> list[dict[str, Any]]:
    """The rows of a table :func:`write_points` wrote."""
    rows: list[dict[str, Any]] = _pa().parquet.read_table(path).to_pylist()
    return rows


def outcome_of(rows: Sequence[dict[str, Any]]) -> PointOutcome:
    """The outcome a point's rows hold."""
    first = rows[0]
    tenants = tuple(
        TenantResult(
            flavor=r["flavor"],
            **{f: r[f] for f in _TENANT_FIELDS},
            latencies_us=tuple(r["latencies_us"] or ()),
        )
        for r in rows
        if r["flavor"] is not None
    )
    return PointOutcome(
        first["admitted"],
        first["refused"],
        tenants,
        first["seconds"],
        first["host_moves"],
        first["guest_migrations"],
        first["rounds"],
    )


class PointCache:
    """Finished points, one Parquet file each, under one directory.

    :param directory: the cache's directory (made if missing).
    :param build: the build's fingerprint.
    :raises ConfigError: if the directory cannot be made.
    """

    def __init__(self, directory: Path, build: str) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"cannot make the cache directory {directory}") from err
        self.directory = directory
        self.build = build

    def _path(self, point: DensityPoint) -> Path:
        return self.directory / f"{point_key(point, self.build)}.parquet"

    def lookup(self, point: DensityPoint) -> PointResult | None:
        """The point's result, if a run of this build finished it."""
        path = self._path(point)
        if not path.exists():
            return None
        try:
            rows = read_points(path)
        except (OSError, ValueError):
            return None  # unreadable: run the point again
        if not rows or rows[0]["build"] != self.build:
            return None
        return PointResult(point, outcome_of(rows))

    def store(self, result: PointResult) -> None:
        """Keep a finished point."""
        write_points(self._path(result.point), [result], self.build)
