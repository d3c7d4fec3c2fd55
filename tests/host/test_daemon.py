"""The daemon on real threads: it pins, logs every action with its reason, and restores.

The "VM" is a real process whose threads carry QEMU's vCPU thread names ("CPU n/TCG"),
attached with ``--attach NAME=PID`` exactly as an operator attaches a QEMU started
elsewhere. Booting real QEMU is the integration tests' job (tests/integration).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.procfs_source import vcpu_threads_of
from unicache.statefile import Checkpoint

UNICACHE = str(Path(sys.executable).parent / "unicache")
ALL = frozenset(os.sched_getaffinity(0))

#: argv: the number of vCPU threads (2), and "free" to spin outside the GIL (hashing a MiB
#: releases it), so that every thread runs as a vCPU does, not a share of one CPU
FAKE_QEMU = r"""
import ctypes, hashlib, sys, threading, time
libc = ctypes.CDLL(None)
free = sys.argv[2:] == ["free"]
def vcpu(n):
    libc.prctl(15, f"CPU {n}/TCG".encode(), 0, 0, 0)  # PR_SET_NAME, as QEMU names vCPUs
    data = bytes(1 << 20)
    end = time.time() + 120
    while time.time() < end:
        hashlib.sha256(data).digest() if free else sum(range(1000))
for n in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    threading.Thread(target=vcpu, args=(n,), daemon=True).start()
time.sleep(120)
"""


@contextlib.contextmanager
def fake_qemu(vcpus: int, *mode: str) -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", FAKE_QEMU, str(vcpus), *mode])
    for _ in range(100):
        if len(vcpu_threads_of(proc.pid)) == vcpus:
            break
        time.sleep(0.05)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def guest() -> Iterator[int]:
    with fake_qemu(2) as pid:
        yield pid


def affinities(pid: int) -> dict[int, frozenset[int]]:
    return {i: frozenset(os.sched_getaffinity(t)) for i, t in vcpu_threads_of(pid).items()}


def start(tmp_path: Path, pid: int, *extra: str) -> subprocess.Popen[str]:
    # the fake vCPUs weigh nothing on a host without LLC counters and no agent reports:
    # OBS would leave them unpinned (its step-aside), so --always-place makes it pin
    return subprocess.Popen(
        [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir", str(tmp_path),
         "--attach", f"vm1={pid}", "--always-place", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_for_pins(pid: int, timeout: float = 20) -> dict[int, frozenset[int]]:
    end = time.time() + timeout
    while time.time() < end:
        now = affinities(pid)
        if now and all(len(c) == 1 for c in now.values()):
            return now
        time.sleep(0.1)
    raise AssertionError(f"vCPU threads never pinned: {affinities(pid)}")


def log_records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]


def test_daemon_pins_each_vcpu_to_its_own_unit_logs_why_and_restores(
    tmp_path: Path, guest: int
) -> None:
    assert len(ALL) >= 2, "needs the project's 2-CPU machine"
    done = subprocess.run(
        [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir", str(tmp_path),
         "--attach", f"vm1={guest}", "--rounds", "4", "--quiet", "--always-place"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = log_records(tmp_path)
    pins = [r for r in records if r["kind"] == "pin-vcpu"]
    assert {r["vcpu"] for r in pins} == {0, 1}
    assert {r["cpus"] for r in pins} == {"0", "1"}  # one L2 unit each
    assert all(r["reason"].startswith("OBS-X") for r in pins)
    notes = [r["message"] for r in records if r["kind"] == "note"]
    assert any("perf counters" in n for n in notes)  # what it uses, in one line
    assert any(n.startswith("shutdown: restore") for n in notes)
    assert affinities(guest) == {0: ALL, 1: ALL}


def test_vcpus_that_weigh_nothing_are_left_on_their_own_cpus_and_the_log_says_why(
    tmp_path: Path, guest: int
) -> None:
    # no LLC counters here and no agent: no vCPU is cache-heavy, so a pin would keep
    # nothing apart (OBS's step-aside, docs/policies.md)
    done = subprocess.run(
        [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir", str(tmp_path),
         "--attach", f"vm1={guest}", "--rounds", "3", "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = log_records(tmp_path)
    assert not [r for r in records if r["kind"] in ("pin-vcpu", "release-vcpu")]
    aside = [r for r in records if r["kind"] == "refusal" and r["refusal"] == "OBS_NO_GAIN"]
    assert len(aside) == 3 and "no cache-heavy vCPU" in aside[0]["reason"]
    assert affinities(guest) == {0: ALL, 1: ALL}


def test_sigterm_restores_every_affinity(tmp_path: Path, guest: int) -> None:
    daemon = start(tmp_path, guest)
    try:
        wait_for_pins(guest)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    finally:
        daemon.kill()
    assert affinities(guest) == {0: ALL, 1: ALL}


def test_after_kill_9_the_next_start_restores(tmp_path: Path, guest: int) -> None:
    daemon = start(tmp_path, guest)
    try:
        pinned = wait_for_pins(guest)
    finally:
        daemon.kill()  # SIGKILL: no chance to clean up
        daemon.wait()
    assert affinities(guest) == pinned  # still changed: nobody restored yet
    again = subprocess.run(
        [UNICACHE, "run", "--state-dir", str(tmp_path), "--rounds", "1", "--quiet",
         "--attach", f"other={os.getpid()}"],
        capture_output=True, text=True, timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert affinities(guest) == {0: ALL, 1: ALL}
    assert any(r.get("message", "").startswith("recovery: restore") for r in log_records(tmp_path))


def test_a_vm_that_dies_mid_run_does_not_stop_the_daemon(tmp_path: Path, guest: int) -> None:
    other = subprocess.Popen([sys.executable, "-c", FAKE_QEMU])
    try:
        time.sleep(0.5)
        daemon = start(tmp_path, guest, "--attach", f"vm2={other.pid}")
        wait_for_pins(guest)
        other.kill()
        other.wait()
        time.sleep(1.0)
        assert daemon.poll() is None  # still serving vm1
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    finally:
        other.kill()
        daemon.kill()
    assert affinities(guest) == {0: ALL, 1: ALL}


def test_bad_config_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("intervall_s = 3\n")
    out = subprocess.run([UNICACHE, "run", "--config", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 2
    assert "unknown key 'intervall_s'" in out.stderr and "Traceback" not in out.stderr


def test_status_explain_and_metrics_describe_what_the_daemon_did(
    tmp_path: Path, guest: int
) -> None:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = start(tmp_path, guest, "--metrics-port", str(port))
    try:
        wait_for_pins(guest)
        time.sleep(0.5)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = body.decode()
        assert 'unicache_vcpu_cache_weight{source="software"' in text or "source=" in text
        assert "unicache_actions_total" in text
        status = subprocess.run([UNICACHE, "status", "--state-dir", str(tmp_path), "--json"],
                                capture_output=True, text=True, timeout=30)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert {(v["vm"], v["vcpu"]) for v in data["vcpus"]} == {("vm1", 0), ("vm1", 1)}
        assert len(data["units"]) == 2
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    why = subprocess.run([UNICACHE, "explain", "vm1", "1", "--state-dir", str(tmp_path),
                          "--json"], capture_output=True, text=True, timeout=30)
    assert why.returncode == 0, why.stderr
    found = json.loads(why.stdout)
    assert found["vcpus"]["1"]["reason"].startswith("OBS-X")
    unknown = subprocess.run([UNICACHE, "explain", "nosuchvm", "--state-dir", str(tmp_path)],
                             capture_output=True, text=True, timeout=30)
    assert unknown.returncode == 2 and "never mentions" in unknown.stderr


def test_dry_run_decides_and_logs_but_changes_nothing_and_sends_no_table(
    tmp_path: Path,
) -> None:
    import socket

    from unicache.host.linux.cgroup import probe_cpu_weight
    from unicache.topology import Unify
    from unicache.topology.sysfs import discover_topology

    # one vCPU more than this host has units: two of them share a unit, whatever its size
    vcpus = len(discover_topology().units(Unify.L2)) + 1
    agent = tmp_path / "agent.sock"
    with contextlib.ExitStack() as stack:
        guest = stack.enter_context(fake_qemu(vcpus, "free"))
        before, tids = affinities(guest), vcpu_threads_of(guest)
        daemon = subprocess.Popen(
            [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir",
             str(tmp_path), "--attach", f"vm1={guest}:{agent}", "--dry-run", "--always-place",
             "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        stack.callback(daemon.kill)
        received = b""
        # the daemon's start (imports, topology) takes seconds on a busy machine: wait for
        # its socket as long as it runs, up to a minute
        deadline = time.time() + 60
        while not agent.exists() and daemon.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert agent.exists(), f"no agent socket; daemon exit {daemon.poll()}"
        sock = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        sock.connect(str(agent))
        sock.settimeout(0.3)
        sock.sendall(b'{"v":1,"type":"hello","seq":0,"agent":"t","versions":[1],'
                     b'"caps":["report"],"vcpus":%d,"nodes":[0]}\n' % vcpus)
        # the first round's (dry-run) pins say which two vCPUs share a unit; the guest
        # reports reads on those two, 44 and 20 MiB a report: one heavier than the other by
        # more than OBS-L's heavy margin (x1.67), the other light enough for a credit over
        # OBS-C's hysteresis while they overlap a sixth of the time or more: OBS-C credits
        # CPU time between them, so weights are decided. Every other vCPU reports 128 MiB,
        # so that OBS-X's rebalance never moves one of the two away (their unit is the
        # lightest; moving a lone vCPU into it would not lower the heaviest load)
        shared: list[int] = []
        deadline = time.time() + 60
        while time.time() < deadline:
            units: dict[int, list[int]] = {}
            if (tmp_path / "decisions.jsonl").exists():
                for r in log_records(tmp_path):
                    if r["kind"] == "pin-vcpu" and r["tick"] == 1:
                        units.setdefault(r["unit"], []).append(r["vcpu"])
            shared = next((sorted(v)[:2] for v in units.values() if len(v) > 1), [])
            if shared:
                break
            time.sleep(0.1)
        assert shared, "no two vCPUs pinned in one unit in the first round"
        heavy, light = shared
        reads = {v: 128 << 20 for v in range(vcpus)} | {heavy: 44 << 20, light: 20 << 20}
        start, seq = time.time(), 1
        # 4 s, and on a machine too busy for the two to overlap, until OBS-C decided (20 s)
        while time.time() < start + 4 or (time.time() < start + 20 and not [
                r for r in log_records(tmp_path) if "cpu.weight/" in r.get("target", "")]):
            report = {"v": 1, "type": "report", "seq": seq, "interval_s": 1, "vcpus": vcpus,
                      "nodes": [0], "chunks": [["ab", seq, sum(reads.values()), 1, 0,
                                                sorted(reads.items())]]}
            sock.sendall(json.dumps(report).encode() + b"\n")
            seq += 1
            with contextlib.suppress(TimeoutError):
                received += sock.recv(65536)
        assert affinities(guest) == before  # never pinned
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    records = log_records(tmp_path)
    assert all(r.get("dry_run") is True for r in records if r["kind"] != "note"
               and r.get("target"))  # every action record says it was not carried out
    # decided and logged, each with what its setter's dry-run path would have written
    pins = [r for r in records if r["kind"] == "pin-vcpu"]
    assert pins and all(r["would_write"] == [f"thread {tids[r['vcpu']]} affinity = {r['cpus']}"]
                        for r in pins)
    tables = [r for r in records if r["kind"] == "publish-placement"]
    assert tables and all(len(r["would_write"]) == 1 and r["would_write"][0].startswith(
        f"vm vm1 agent: placement table version {r['version']}, {len(r['entries'])} entries, "
    ) for r in tables)
    assert b'"placement"' not in received  # no table reached the guest
    assert b'"welcome"' in received  # the channel itself works: reports are observed
    weights = [r for r in records if r.get("target", "").startswith("cpu.weight/")]
    assert weights, "no OBS-C weight was decided"
    if probe_cpu_weight().root is None:
        # a host without cgroup v2's cpu controller (this project's CI machine): a real
        # run would fail each weight, so the dry run says the same
        assert all(r["kind"] == "failed" and r["dry_run"] is True
                   and r["error"].startswith("cpu.weight not available") for r in weights)
    else:
        assert all(r["kind"] == "set-cpu-weight" and r["dry_run"] is True
                   and r["would_write"][-1].endswith(f"/cpu.weight = {r['weight']}")
                   for r in weights)
    # nothing written: no affinity journaled, no cgroup journaled or made
    journal = Checkpoint(tmp_path / "journal.json", "affinity-journal", 1).load()
    assert journal is None or not journal["affinity"]
    cgroups = Checkpoint(tmp_path / "cgroups.json", "cgroup-journal", 1).load()
    assert cgroups is None or cgroups["moved"] == {}
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        assert not (root / "unicache" / "vm1").exists()
    assert not (tmp_path / "round-state.json").exists()


def test_a_restarted_daemon_goes_on_from_what_it_learned_and_pins_again(
    tmp_path: Path, guest: int
) -> None:
    def run(rounds: int) -> list[dict[str, object]]:
        done = subprocess.run(
            [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir",
             str(tmp_path), "--attach", f"vm1={guest}", "--rounds", str(rounds), "--quiet",
             "--always-place"],
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        records = log_records(tmp_path)
        (tmp_path / "decisions.jsonl").unlink()
        return records

    first = run(3)
    saved = tmp_path / "round-state.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    assert not [r for r in first if "round state restored" in str(r.get("message"))]
    second = run(2)
    restored = [str(r["message"]) for r in second
                if "round state restored" in str(r.get("message"))]
    assert len(restored) == 1 and "2 vCPUs in units" in restored[0]
    # the shutdown restored the affinities, so OBS pins the same units again at once
    assert {(r["vcpu"], r["cpus"]) for r in second if r["kind"] == "pin-vcpu"} == {
        (r["vcpu"], r["cpus"]) for r in first if r["kind"] == "pin-vcpu"}
    assert affinities(guest) == {0: ALL, 1: ALL}


def test_a_round_state_that_cannot_be_restored_is_set_aside_and_the_daemon_starts_afresh(
    tmp_path: Path, guest: int
) -> None:
    (tmp_path / "round-state.json").write_text('{"kind": "round-state", "version": 1}')
    done = subprocess.run(
        [UNICACHE, "run", "--unify", "l2", "--interval", "0.2", "--state-dir", str(tmp_path),
         "--attach", f"vm1={guest}", "--rounds", "1", "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    notes = [str(r["message"]) for r in log_records(tmp_path) if r["kind"] == "note"]
    assert [n for n in notes if n.startswith("round state not restored, starting afresh")]
    assert (tmp_path / "round-state.json.refused").exists()
    assert (tmp_path / "round-state.json").exists()  # the new run's own state
