"""The live density run (``unicache density --live``): real guests, their requests timed inside.

The guests run on this host, their tenants' requests are timed inside them, without and
with the daemon.

docs/density.md "``--live``" describes it. In order:

1. **guests**: the mix's first N VMs (:func:`unicache_sim.density.mixes.mix_vms`), one tenant per
   guest, booted from the project's image (:class:`~unicache_sim.density.live_vms.LiveGuests`),
   small (``vcpus`` each, :data:`GUEST_MEMORY_MIB`); each tenant's files are written in
   its guest and read once, its data sized down to :data:`LIVE_DATA_BYTES`
   (:func:`live_workload`);
2. **alone**: the first guest of each flavor, the others idle, without the daemon: its
   requests back to back give its service time and its rate (``utilization / service``
   per vCPU, as the simulator's stage 1), then at that rate its p95 alone, the reference
   of its SLO (p95 at most k x alone, the same target under both policies);
3. **linux**: every guest at its rate at once, no daemon, no shim;
4. **unicache**: the real daemon (:class:`~unicache_sim.density.live_daemon.LiveDaemon`),
   the shim preloaded in the guests; a warm-up until every guest has reported reads to
   the daemon, then every guest at its rate at once; the daemon is stopped with SIGTERM
   and must exit 0;
5. **prediction**: the simulator's, for the same mix and N on ``model`` (not this host:
   :mod:`unicache_sim.density.predict`).

The guests run the program :mod:`unicache_sim.density.guest` (read as text). Every
guest is stopped at the end, also on an error.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError, UnicacheError
from unicache.topology.sysfs import discover_topology

from unicache_sim.density.live_daemon import DaemonSummary, LiveDaemon
from unicache_sim.density.live_vms import GuestCommand, GuestSpec, LiveGuests
from unicache_sim.density.mixes import mix_vms
from unicache_sim.density.predict import Prediction, predict
from unicache_sim.density.search import Reference, SloCheck, check_slo
from unicache_sim.density.tenants import Catalogue, Flavor, Kind, Mix, Workload

#: the guest program
GUEST_PROGRAM = Path(__file__).with_name("guest.py")
#: the shim in the image
SHIM = "/usr/lib/unicache-agent/libunicache.so"
#: where a guest keeps its tenant's files
DATA_DIR = "/var/tmp/unicache-density"
#: guests, at most (a 2-core host under TCG)
MAX_GUESTS = 3
#: vCPUs per guest, at most
MAX_VCPUS = 2
#: memory of each guest
GUEST_MEMORY_MIB = 384
#: a tenant's data in its guest, at most (the catalogue's is sized for a cloud host)
LIVE_DATA_BYTES = 4 << 20
#: seconds of the back-to-back run that gives a service time
SERVICE_S = 2.0
#: seconds of the warm-up under the daemon (repeated until every guest has reported)
WARM_S = 3.0
#: the daemon's decision log, kept in ``--out``
DECISION_LOG = "live-decisions.jsonl"
#: the policies of a live run
POLICIES = ("linux", "unicache")


@dataclass(frozen=True, slots=True)
class LiveWorkload:
    """A tenant's ``files`` workload as its guest runs it (sized down).

    :param files: files.
    :param file_bytes: bytes of each.
    :param access: ``whole`` or ``random``.
    :param read_bytes: bytes per read call (whole: 0 = one call per file).
    :param popularity: ``zipf`` or ``uniform``.
    """

    files: int
    file_bytes: int
    access: str
    read_bytes: int
    popularity: str

    @property
    def data_bytes(self) -> int:
        """Bytes of the tenant's files."""
        return self.files * self.file_bytes


@dataclass(frozen=True, slots=True)
class LiveGuest:
    """One guest and its tenant.

    :param name: the guest's name.
    :param flavor: its tenant's flavor.
    :param vcpus: vCPUs (one request worker each).
    :param workload: what its requests read.
    """

    name: str
    flavor: Flavor
    vcpus: int
    workload: LiveWorkload


@dataclass(frozen=True, slots=True)
class LiveMeasure:
    """What one guest's request program measured.

    :param requests: requests that arrived in the window.
    :param mean_us: mean latency.
    :param p50_us: median.
    :param p95_us: 95th percentile (nearest rank).
    :param p99_us: 99th percentile.
    :param per_s: requests per second.
    """

    requests: int
    mean_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    per_s: float

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LiveMeasure:
        """From the program's output."""
        def num(key: str) -> float:
            value = obj.get(key)
            return float(value) if isinstance(value, int | float) else math.nan

        return cls(int(obj.get("requests", 0)), num("mean_us"), num("p50_us"), num("p95_us"),
                   num("p99_us"), num("per_s"))


@dataclass(frozen=True, slots=True)
class LiveResult:
    """One guest under one policy.

    :param policy: linux or unicache.
    :param guest: the guest.
    :param flavor: its flavor.
    :param measure: what it measured.
    :param check: its SLO against its flavor's reference alone.
    """

    policy: str
    guest: str
    flavor: str
    measure: LiveMeasure
    check: SloCheck | None


@dataclass(frozen=True, slots=True)
class LiveRequest:
    """One live run.

    :param model: the model of the simulator's prediction.
    :param catalogue: the flavors.
    :param mix: the mix (its first ``guests`` VMs run).
    :param guests: guests.
    :param vcpus: vCPUs per guest, at most (a flavor with fewer gets its own).
    :param seconds: the measured window of each run.
    :param policies: linux and/or unicache.
    :param image_dir: the guest image (``None``: the project's).
    :param out: where the daemon's decision log is kept (``None``: nowhere).
    :param overcommit: vCPUs per CPU the prediction's model admits.
    :param always_place: run the daemon with ``make demo``'s ``--always-place`` flags.
    """

    model: str
    catalogue: Catalogue
    mix: Mix
    guests: int = 2
    vcpus: int = 1
    seconds: float = 10.0
    policies: tuple[str, ...] = POLICIES
    image_dir: Path | None = None
    out: Path | None = None
    overcommit: float = 4.0
    always_place: bool = False


@dataclass(frozen=True, slots=True)
class LiveReport:
    """What a live run measured.

    :param request: what was asked.
    :param guests: the guests.
    :param host: this host, in one line.
    :param accel: the accelerator QEMU ran with, and why.
    :param references: per flavor, alone (the guest it ran in is the flavor's first).
    :param results: per policy and guest.
    :param daemon: the daemon's run (``None`` without the unicache policy).
    :param left: guests whose QEMU was still running after the stop (empty: none).
    :param prediction: the simulator's, for ``request.model``.
    :param seconds: the run's wall time.
    """

    request: LiveRequest
    guests: tuple[LiveGuest, ...]
    host: str
    accel: str
    references: tuple[Reference, ...]
    results: tuple[LiveResult, ...]
    daemon: DaemonSummary | None
    left: tuple[str, ...]
    prediction: Prediction
    seconds: float


def live_workload(flavor: Flavor) -> LiveWorkload:
    """The flavor's workload sized down to :data:`LIVE_DATA_BYTES`: fewer files of the
    same size, or one smaller file (whole multiples of its reads).

    :raises ConfigError: when it is not a ``files`` workload (only those run live).
    """
    w: Workload = flavor.workload
    if w.kind is not Kind.FILES or not flavor.latency_critical:
        raise ConfigError(f"--live runs latency tenants that read files; flavor {flavor.name} "
                          f"runs {w.kind}")
    files, size = w.files, w.file_bytes
    if files * size > LIVE_DATA_BYTES:
        if size < LIVE_DATA_BYTES:
            files = max(1, LIVE_DATA_BYTES // size)
        else:
            files, size = 1, LIVE_DATA_BYTES
    unit = w.read_bytes if w.access == "random" and w.read_bytes else 4096
    size = max(unit, size // unit * unit)
    return LiveWorkload(files, size, w.access, w.read_bytes, w.popularity)


def plan_guests(req: LiveRequest) -> tuple[LiveGuest, ...]:
    """The guests of the run: the mix's first ``req.guests`` VMs.

    :raises ConfigError: on bad sizes or a flavor that cannot run live.
    """
    if not 1 <= req.guests <= MAX_GUESTS:
        raise ConfigError(f"--guests must be within 1..{MAX_GUESTS} (a small host under "
                          f"TCG), not {req.guests}")
    if not 1 <= req.vcpus <= MAX_VCPUS:
        raise ConfigError(f"--vcpus must be within 1..{MAX_VCPUS}, not {req.vcpus}")
    if not 1.0 <= req.seconds <= 600.0:
        raise ConfigError(f"--seconds must be within 1..600, not {req.seconds:g}")
    for policy in req.policies:
        if policy not in POLICIES:
            raise ConfigError(f"--policies: unknown {policy!r} (known: {', '.join(POLICIES)})")
    out = []
    for i, name in enumerate(mix_vms(req.mix, req.guests), 1):
        flavor = req.catalogue.get(name)
        out.append(LiveGuest(f"live-{i}-{name}", flavor, min(req.vcpus, flavor.vcpus),
                             live_workload(flavor)))
    return tuple(out)


def _command(guest: LiveGuest, mode: str, seconds: float = 0.0, rate_hz: float = 0.0,
             shim: bool = False) -> GuestCommand:
    w = guest.workload
    cfg = {"mode": mode, "dir": DATA_DIR, "files": w.files, "file_bytes": w.file_bytes,
           "access": w.access, "read_bytes": w.read_bytes, "popularity": w.popularity,
           "workers": guest.vcpus, "rate_hz": rate_hz, "seconds": seconds, "seed": 1}
    return GuestCommand(guest.name, ("python3", "-c", _program(), json.dumps(cfg)),
                        {"LD_PRELOAD": SHIM} if shim else {}, timeout=seconds * 4 + 120)


@cache
def _program() -> str:
    return GUEST_PROGRAM.read_text()


def host_line() -> str:
    """This host's CPUs and LLC groups, one line."""
    topo = discover_topology()
    groups = len(topo.llc_groups())
    return f"{len(topo.cpus)} CPUs, {groups} LLC group{'s' if groups != 1 else ''}"


def run_live(req: LiveRequest, say: Callable[[str], None]) -> LiveReport:
    """Run it (module docstring); ``say`` gets a line per step.

    :raises ConfigError: on a user error (bad sizes, no image: ``make image``).
    :raises UnicacheError: when a guest or the daemon fails.
    """
    guests = plan_guests(req)
    start = time.monotonic()
    host = host_line()
    # short paths: unix sockets live in the registry (108 bytes at most)
    work = Path(tempfile.mkdtemp(prefix="uc-live-"))
    try:
        registry, state = work / "vms", work / "state"
        results: list[LiveResult] = []
        daemon: DaemonSummary | None = None
        vms = LiveGuests([GuestSpec(g.name, g.vcpus, GUEST_MEMORY_MIB) for g in guests],
                         registry, req.image_dir, say)
        with vms:
            say("writing each tenant's files in its guest")
            vms.run_all([_command(g, "prepare") for g in guests])
            refs = _alone(vms, guests, req.seconds, say)
            if "linux" in req.policies:
                say(f"linux: {len(guests)} guests at once, {req.seconds:g} s, no daemon")
                results += _measure(vms, guests, refs, "linux", req.seconds, shim=False)
            if "unicache" in req.policies:
                d = LiveDaemon(state, registry, [g.name for g in guests], req.always_place)
                say("unicache: starting the daemon (unicache run)")
                d.start()
                try:
                    d.wait_channels()
                    say("unicache: warm-up with the shim until every guest has reported")
                    for _ in range(3):
                        vms.run_all([_command(g, "run", WARM_S, refs[g.flavor.name].rate_hz,
                                              shim=True) for g in guests])
                        try:
                            d.wait_reports(timeout=5.0)
                            break
                        except UnicacheError:
                            continue  # not yet: warm up once more
                    else:
                        d.wait_reports(timeout=10.0)
                    say(f"unicache: {len(guests)} guests at once, {req.seconds:g} s, "
                        "daemon running, shim preloaded")
                    results += _measure(vms, guests, refs, "unicache", req.seconds, shim=True)
                finally:
                    say("unicache: stopping the daemon (SIGTERM)")
                    daemon = _keep_log(d.stop(), req.out)
        say(f"prediction: the simulator on model {req.model}")
        prediction = predict(req.model, req.catalogue, req.mix, len(guests), req.policies,
                             req.overcommit)
        return LiveReport(req, guests, host, vms.accel, tuple(refs.values()), tuple(results),
                          daemon, vms.left, prediction, time.monotonic() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _keep_log(summary: DaemonSummary, out: Path | None) -> DaemonSummary:
    """The daemon's decision log copied into ``out`` (the run's directory is removed)."""
    if out is None or not summary.log.exists():
        return summary
    out.mkdir(parents=True, exist_ok=True)
    kept = out / DECISION_LOG
    shutil.copyfile(summary.log, kept)
    return replace(summary, log=kept)


def _alone(vms: LiveGuests, guests: tuple[LiveGuest, ...], seconds: float,
           say: Callable[[str], None]) -> dict[str, Reference]:
    """Stage 2 (module docstring): per flavor, its first guest alone."""
    refs: dict[str, Reference] = {}
    for g in guests:
        flavor = g.flavor
        if flavor.name in refs:
            continue
        say(f"alone: {g.name}, requests back to back ({SERVICE_S:g} s)")
        service = LiveMeasure.from_json(vms.run_all([_command(g, "run", SERVICE_S)])[g.name])
        if not service.requests:
            raise UnicacheError(f"guest {g.name}: no request completed alone")
        # a vCPU's time per request back to back: the request, the program's own work and
        # a wake-up (what a request at a rate costs the vCPU)
        service_us = SERVICE_S * 1e6 * g.vcpus / service.requests
        rate = flavor.utilization / service_us * 1e6
        say(f"alone: {g.name} at {rate:.0f} requests/s per vCPU ({seconds:g} s)")
        alone = LiveMeasure.from_json(vms.run_all([_command(g, "run", seconds, rate)])[g.name])
        refs[flavor.name] = Reference(flavor.name, service_us, rate, alone.p95_us)
    return refs


def _measure(vms: LiveGuests, guests: tuple[LiveGuest, ...], refs: Mapping[str, Reference],
             policy: str, seconds: float, shim: bool) -> list[LiveResult]:
    out = vms.run_all([_command(g, "run", seconds, refs[g.flavor.name].rate_hz, shim)
                       for g in guests])
    results = []
    for g in guests:
        m = LiveMeasure.from_json(out[g.name])
        check = check_slo(g.flavor, refs[g.flavor.name], m.p95_us)
        results.append(LiveResult(policy, g.name, g.flavor.name, m, check))
    return results
