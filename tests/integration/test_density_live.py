"""``unicache density --live`` end to end: two real guests, without and with the real daemon.

Their tenants' requests are timed inside them.
The command runs as a user runs it (the venv's ``unicache``, ``--json``), with two guests
and a short window. The checks are what could fail: both policies measured both tenants
(requests, finite latencies), the daemon exited 0 on SIGTERM after its decision log
showed it opened both guests' agent channels and got read reports from both, the
simulator's prediction is there and labelled as a model's, and no QEMU of the run is left.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNICACHE = str(Path(sys.executable).parent / "unicache")
pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="booting the guests needs the image `make image` builds "
                                       "as root")


def _qemus() -> dict[int, str]:
    """Running QEMU processes: pid -> command line."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"qemu-system" in argv[0]:
            out[int(proc.name)] = " ".join(a.decode(errors="replace") for a in argv)
    return out


def test_density_live_runs_two_guests_with_and_without_the_daemon(tmp_path: Path) -> None:
    before = set(_qemus())
    t0 = time.monotonic()
    run = subprocess.run(
        [UNICACHE, "density", "--live", "--guests", "2", "--seconds", "3", "--model",
         "epyc-2s", "--json", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    wall = time.monotonic() - t0
    left = {pid: cmd for pid, cmd in _qemus().items()
            if pid not in before and "guest=live-" in cmd}
    assert not left, f"QEMU left running: {left}"
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["live"] is True and doc["qemu_left"] == []

    guests = {g["name"]: g["flavor"] for g in doc["guests"]}
    assert sorted(guests.values()) == ["kv", "web"]
    measured = {(r["policy"], r["guest"]): r for r in doc["results"]}
    assert set(measured) == {(p, g) for p in ("linux", "unicache") for g in guests}
    for (policy, guest), r in measured.items():
        assert r["requests"] > 0, (policy, guest, r)
        for key in ("p50_us", "p95_us", "p99_us"):
            assert isinstance(r[key], float) and math.isfinite(r[key]) and r[key] > 0, (
                policy, guest, key, r)
        assert r["p50_us"] <= r["p95_us"] <= r["p99_us"]
        assert r["slo"] == "latency" and isinstance(r["meets"], bool)
    for ref in doc["references"]:
        assert ref["rate_hz"] > 0 and ref["p95_us"] > 0, ref

    daemon = doc["daemon"]
    assert daemon["exit_code"] == 0
    # as an operator runs it: its cost models and step-asides on
    assert daemon["command"] == "unicache run --interval 1 --connect none --quiet"
    seen = {v["vm"]: v for v in daemon["vms"]}
    assert set(seen) == set(guests)
    for name, v in seen.items():
        assert v["channel"], f"the daemon never listened for {name}'s agent"
        assert v["reports"] > 0 and v["bytes_read"] > 0, f"no reads reported by {name}: {v}"
    log = Path(daemon["log"])
    reporters = {json.loads(line).get("vm") for line in log.read_text().splitlines()
                 if '"guest-report"' in line}
    assert reporters >= set(guests)

    prediction = doc["prediction"]
    assert prediction["label"] == "simulator prediction for model epyc-2s (not this host)"
    assert [p["policy"] for p in prediction["policies"]] == ["linux", "unicache"]
    for p in prediction["policies"]:
        assert p["admitted"] and {t["flavor"] for t in p["tenants"]} == {"kv", "web"}
    print(f"density --live, 2 guests: {wall:.0f} s")
