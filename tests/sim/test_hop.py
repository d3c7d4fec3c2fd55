"""The sched_setaffinity hop that `unicache-sim calibrate` times, here and in a guest."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from typer.testing import CliRunner
from unicache.errors import UnicacheError
from unicache.host.qemu import GuestResult
from unicache_sim.cli.main import app
from unicache_sim.experiments.mfc import sched_hop
from unicache_sim.experiments.mfc.sched_hop import (
    HOP_SNIPPET,
    measure_guest_hop,
    measure_host_hop,
    parse_hop,
)

if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()

two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a hop needs two CPUs"
)

#: the guest's interpreter: a plain python3 (stdlib only), isolated from this venv
GUEST_PYTHON = shutil.which("python3") or sys.executable


def _run_snippet(hops: int, one_cpu: bool = False) -> subprocess.CompletedProcess[str]:
    def pin_to_one() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    return subprocess.run(
        [GUEST_PYTHON, "-I", "-S", "-c", HOP_SNIPPET, str(hops)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        preexec_fn=pin_to_one if one_cpu else None,
    )


@two_cpus
def test_host_hop_moves_the_thread_between_two_cpus_and_reports_ns_and_cycles() -> None:
    h = measure_host_hop(40)
    assert h.where == "host" and h.hops == 40
    assert h.cpu_a is not None and h.cpu_b is not None and h.cpu_a != h.cpu_b
    assert h.move_ns is not None and h.move_ns > 0
    assert h.stay_ns is not None and h.stay_ns > 0
    # every sampled move left the thread on the CPU it was sent to
    assert h.not_moved == 0
    if h.clock_ghz is not None:
        assert h.move_cycles == pytest.approx(h.move_ns * h.clock_ghz)
    assert "sched_setaffinity hop" in h.line() and "\n" not in h.line()


@two_cpus
def test_host_hop_between_chosen_cpus() -> None:
    a, b = sorted(os.sched_getaffinity(0))[:2]
    h = measure_host_hop(20, cpus=(b, a))
    assert (h.cpu_a, h.cpu_b) == (b, a)


@two_cpus
def test_the_guest_snippet_is_plain_stdlib_python() -> None:
    # -I -S: no site packages, no venv, as in a minimal guest image
    proc = _run_snippet(20)
    assert proc.returncode == 0, proc.stderr
    h = parse_hop("guest test", proc.stdout)
    assert h.move_ns is not None and h.move_ns > 0 and h.cpus >= 2


def test_one_cpu_says_so_in_one_line() -> None:
    proc = _run_snippet(20, one_cpu=True)
    assert proc.returncode == 0, proc.stderr
    h = parse_hop("host", proc.stdout)
    assert h.move_ns is None and h.cpus == 1
    assert h.line() == "host: only one CPU: no hop to measure"


class _LocalGuest:
    """A stand-in for a running VM: runs the guest command on this machine."""

    def __init__(self) -> None:
        self.argv: list[str] = []

    def run_in_guest(self, argv: Sequence[str], timeout: float = 60.0) -> GuestResult:
        self.argv = list(argv)
        proc = subprocess.run(
            [GUEST_PYTHON, "-I", "-S", *argv[1:]],
            capture_output=True, text=True, check=False, timeout=timeout,
        )
        return GuestResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr, False,
                           False, 0.0, None)


@two_cpus
def test_guest_hop_runs_the_snippet_through_the_vm_command_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    guest = _LocalGuest()
    from unicache.host import qemu

    monkeypatch.setattr(qemu.QemuVm, "attach", classmethod(lambda cls, name: guest))
    h = measure_guest_hop("vm1", 20)
    assert guest.argv[:2] == ["python3", "-c"] and guest.argv[2] == HOP_SNIPPET
    assert h.where == "guest vm1" and h.move_ns is not None


def test_a_failing_guest_is_an_error_naming_the_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def run_in_guest(self, argv: Sequence[str], timeout: float = 60.0) -> GuestResult:
            return GuestResult(tuple(argv), 127, "", "python3: not found", False, False, 0.0,
                               None)

    from unicache.host import qemu

    monkeypatch.setattr(qemu.QemuVm, "attach", classmethod(lambda cls, name: Broken()))
    with pytest.raises(UnicacheError, match="guest vm1.*python3: not found"):
        measure_guest_hop("vm1", 20)


def test_unexpected_output_is_an_error() -> None:
    with pytest.raises(UnicacheError, match="unexpected hop measurement output"):
        parse_hop("host", "Traceback (most recent call last):")


def test_too_few_hops_are_refused() -> None:
    with pytest.raises(UnicacheError, match="--hops"):
        measure_host_hop(3)


@two_cpus
def test_calibrate_json_includes_the_hop_in_ns_and_cycles() -> None:
    result = runner.invoke(app, ["calibrate", "--no-tools", "--hops", "20", "--json"])
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["tools"] == []
    (host,) = doc["hops"]
    assert host["where"] == "host" and host["move_ns"] > 0
    assert host["move_cycles"] is None or host["move_cycles"] > 0


@two_cpus
def test_calibrate_prints_one_line_per_hop() -> None:
    result = runner.invoke(app, ["calibrate", "--no-tools", "--hops", "20"])
    assert result.exit_code == 0, result.stderr
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("host: sched_setaffinity hop CPU")


def test_calibrate_with_a_missing_guest_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sched_hop, "measure_host_hop", lambda hops: parse_hop(
        "host", json.dumps({"cpus": 1, "mhz": None, "hops": hops, "error": "only one CPU"})))
    monkeypatch.setenv("UNICACHE_STATE_DIR", "/nonexistent-unicache-state")
    result = runner.invoke(app, ["calibrate", "--no-tools", "--hops", "20", "--guest", "nosuch"])
    assert result.exit_code == 2
    assert "nosuch" in result.stderr and "Traceback" not in result.stderr + result.stdout
