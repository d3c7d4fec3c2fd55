"""The daemon managing a real guest (QEMU, TCG here): pins, tables, shim, kills, recovery.

One guest boot for the module (about 15 s under TCG), plus one short-lived second guest
for the QEMU-kill test. Everything is checked from outside the code under test: /proc for
affinities, the guest agent's own reports for where reads ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import GuestImage, QemuVm, VmConfig, ensure_image
from unicache.policy.scu.options import scu_options_for
from unicache.topology import Unify
from unicache.topology.sysfs import discover_topology

UNICACHE = str(Path(sys.executable).parent / "unicache")
AGENT_LIB = "/usr/lib/unicache-agent"  # the image's agent package and shim
SHIM = f"{AGENT_LIB}/libunicache.so"
ALL = frozenset(os.sched_getaffinity(0))
FILES = ("/root/hot-a", "/root/hot-b", "/root/hot-c")


def _file_bytes() -> int:
    """Each file one chunk (the daemon's, from this host's L2) and 3/8 of an L2 unit.

    Three of them exceed what one L2 holds and fit two: the VM's hot data is then worth
    unifying (SCU's cost model steps aside for a VM whose hot data fits one unit).
    """
    topo = discover_topology()
    unit = topo.units(Unify.L2)[0].capacity_bytes
    return min(3 * unit // 8, scu_options_for(topo, Unify.L2).chunk_size) // 4096 * 4096


FILE_BYTES = _file_bytes()

# The reader moves itself to a start CPU *after* the shim captured the process's own
# affinity (the shim only ever migrates within that, as a process pinned by its user
# must stay pinned), then reads its files (one chunk each) in turn, again and again.
READER = (
    "import os,sys,time\n"
    "if len(sys.argv) > 3: os.sched_setaffinity(0, {int(sys.argv[3])})\n"
    "fds=[os.open(f,os.O_RDONLY) for f in sys.argv[1].split(',')]\n"
    "for fd in fds: os.fstat(fd)\n"  # as programs do: the shim learns the file from it
    "end=time.time()+float(sys.argv[2])\n"
    "while time.time()<end:\n"
    "    for fd in fds: os.pread(fd, 1<<20, 0)\n"
    "print(sorted(os.sched_getaffinity(0)))\n"
)


@pytest.fixture(scope="module")
def image() -> GuestImage:
    return ensure_image()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("daemon-vm")
    return base / "vms", base / "state"


@pytest.fixture(scope="module")
def vm(image: GuestImage, dirs: tuple[Path, Path]) -> Iterator[QemuVm]:
    registry, _ = dirs
    machine = QemuVm(VmConfig("ucd-main", vcpus=2, memory_mib=512,
                              image_dir=image.directory), registry)
    machine.start()
    try:
        machine.wait_for_boot(120)
        make = " && ".join(f"head -c {FILE_BYTES} /dev/urandom > {f} && cat {f} >/dev/null"
                           for f in FILES)
        out = machine.run_in_guest(["sh", "-c", make])
        assert out.ok, out.stderr
        yield machine
    finally:
        machine.stop()


def start_daemon(dirs: tuple[Path, Path], *extra: str) -> subprocess.Popen[str]:
    registry, state = dirs
    env = dict(os.environ, UNICACHE_STATE_DIR=str(registry))
    return subprocess.Popen(
        [UNICACHE, "run", "--unify", "l2", "--interval", "0.5", "--state-dir", str(state),
         "--connect", "none", "--quiet", "--log-chunks", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def stop_daemon(daemon: subprocess.Popen[str]) -> None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0


def records(dirs: tuple[Path, Path]) -> list[dict]:
    path = dirs[1] / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_until(what: str, check, timeout: float = 60.0,  # type: ignore[no-untyped-def]
               daemon: subprocess.Popen[str] | None = None,
               log: tuple[Path, Path] | None = None):
    """``check()`` once it is true; a failure says whether the daemon died (its stderr)
    and what its decision log said meanwhile, as a CI log is all there is to go on."""
    end = time.time() + timeout
    start = len(records(log)) if log else 0
    while time.time() < end:
        value = check()
        if value:
            return value
        if daemon is not None and daemon.poll() is not None:
            raise AssertionError(f"the daemon exited ({daemon.returncode}) while waiting for "
                                 f"{what}: {daemon.stderr.read() if daemon.stderr else ''}")
        time.sleep(0.25)
    said = ""
    if log is not None:
        meanwhile = records(log)[start:]
        reports = sum(r["kind"] == "guest-report" for r in meanwhile)
        last = {r.get("refusal") or r["kind"]: r for r in meanwhile if r["kind"] != "guest-report"}
        said = f"; the log meanwhile: {reports} guest reports; the last of each kind: " + "; ".join(
            f"{kind}: {r.get('reason') or r.get('message', '')}"[:240] for kind, r in last.items())
    raise AssertionError(f"timed out waiting for {what}{said}")


def wait_idle_report(dirs: tuple[Path, Path], timeout: float = 30.0) -> None:
    """Until a guest report of an interval without reads arrives: every read before it has
    been reported (the agent reports each interval; a busy host delays that by seconds)."""
    start = len(records(dirs))
    wait_until("a report of an idle interval", lambda: any(
        r["kind"] == "guest-report" and not r["chunks"] for r in records(dirs)[start:]),
        timeout=timeout)


def vcpu_affinity(vm: QemuVm) -> dict[int, frozenset[int]]:
    return {i: frozenset(os.sched_getaffinity(t)) for i, t in vm.vcpu_threads().items()}


def read_in_guest(vm: QemuVm, seconds: float, cpu: int | None = None,
                  files: tuple[str, ...] = FILES) -> str:
    argv = ["python3", "-c", READER, ",".join(files), str(seconds)]
    if cpu is not None:
        argv.append(str(cpu))
    out = vm.run_in_guest(argv, env={"LD_PRELOAD": SHIM}, timeout=seconds + 60)
    assert out.ok, out.stderr
    return out.stdout


def _file_id_in_guest(vm: QemuVm, path: str) -> str:
    """The shim's id of a guest file, as the decision log writes it (hex): the guest agent's
    own ``file_id_of`` under the salt of the table it published."""
    code = ("import os,struct,sys\n"
            "from unicache_agent import shm\n"
            "salt=struct.unpack_from('<IIQ',open(shm.DEFAULT_TABLE,'rb').read(16))[2]\n"
            "st=os.stat(sys.argv[1]); print(f'{shm.file_id_of(salt, st.st_dev, st.st_ino):x}')\n")
    out = vm.run_in_guest(["python3", "-c", code, path], env={"PYTHONPATH": AGENT_LIB})
    assert out.ok, out.stderr
    return out.stdout.strip()


def test_daemon_pins_vcpus_publishes_a_table_and_the_shim_reads_on_the_planned_vcpu(
    vm: QemuVm, dirs: tuple[Path, Path]
) -> None:
    # the mechanism, on a host whose two L2 units share one L3 under TCG: SCU's cost model
    # and watch would rightly leave this VM alone here (test_daemon_leaves_alone_...)
    daemon = start_daemon(dirs, "--always-place")
    try:
        # 1. each vCPU thread pinned to its own L2 unit, checked from /proc
        wait_until("pins", lambda: all(len(c) == 1 for c in vcpu_affinity(vm).values()))
        assert sorted(vcpu_affinity(vm).values(), key=min) == [frozenset({0}), frozenset({1})]
        wait_until("the agent channel", lambda: any(
            "listening for its agent" in r.get("message", "") for r in records(dirs)))
        # the agent greeted and published its table: reads before that are not counted (no
        # table, no chunk size), and a loaded host greets seconds after the daemon listens
        wait_until("the agent's first report", lambda: any(
            r["kind"] == "guest-report" for r in records(dirs)), daemon=daemon, log=dirs)
        # 2. the guest reads three files under the shim, from vCPU 0 only; its reports reach
        # the host
        read_in_guest(vm, 3, cpu=0)
        wait_until("guest reports of the three files", lambda: len({
            c["file"] for r in records(dirs) if r["kind"] == "guest-report"
            for c in r["chunks"]}) >= len(FILES), daemon=daemon, log=dirs)

        # 3. a placement table reaches the guest: a file's chunk cached in one vCPU's unit
        def entry() -> dict | None:
            tables = [r for r in records(dirs) if r["kind"] == "publish-placement"]
            for e in tables[-1]["entries"] if tables else ():  # the guest's current table
                if e["caching"] and e["chunk"] == 0 and e["vcpus"] in ("0", "1"):
                    return e
            return None

        planned = wait_until("a caching entry in one unit", lambda: entry() or
                             (read_in_guest(vm, 1, cpu=0) and None), timeout=90)
        file_id = planned["file"]
        home = int(planned["vcpus"])
        other = 1 - home
        path = next(f for f in FILES if _file_id_in_guest(vm, f) == file_id)
        # let the reports of step 3's reads (on vCPU 0) arrive first, or they count below as
        # reads off the home vCPU: on a loaded host they come seconds late
        wait_idle_report(dirs)
        before = len(records(dirs))
        # 4. a reader started on the other vCPU is moved home by the shim
        where = read_in_guest(vm, 3, cpu=other, files=(path,))
        assert where.strip() == f"[{home}]", (where, [
            r for r in records(dirs)[before:] if r["kind"] in ("refusal", "publish-placement")])
        wait_idle_report(dirs)  # step 4's reads all reported
        moved = [c for r in records(dirs)[before:] if r["kind"] == "guest-report"
                 for c in r["chunks"] if c["file"] == file_id]
        by_vcpu: dict[int, int] = {}
        for c in moved:
            for vcpu, nbytes in c["vcpu_bytes"]:
                by_vcpu[vcpu] = by_vcpu.get(vcpu, 0) + nbytes
        assert by_vcpu.get(home, 0) > 0.9 * sum(by_vcpu.values()), by_vcpu
    finally:
        stop_daemon(daemon)
    assert vcpu_affinity(vm) == {0: ALL, 1: ALL}


def test_daemon_leaves_alone_a_vm_whose_hot_data_fits_one_unit_and_says_why(
    vm: QemuVm, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    # a state dir of its own: the module's earlier daemon placed this VM over all FILES, and
    # its restored round state (those chunks' reads, aging out round by round) would make
    # the refusal wait on how fast they age rather than on what the VM reads now
    dirs = (dirs[0], tmp_path / "state")
    daemon = start_daemon(dirs)
    try:
        wait_until("the agent channel", lambda: any(
            "listening for its agent" in r.get("message", "") for r in records(dirs)))
        before = len(records(dirs))
        # one file, a third of one L2: nothing to unify
        refusal = wait_until("SCU's refusal", lambda: [
            r for r in records(dirs)[before:] if r["kind"] == "refusal"
            and r["refusal"] == "SCU_NO_GAIN" and "ucd-main" in r["reason"]] or (
            read_in_guest(vm, 1, cpu=0, files=FILES[:1]) and None), timeout=150,
            daemon=daemon, log=dirs)
        assert "fits one unit" in refusal[0]["reason"], refusal
        cached = [e for r in records(dirs)[before:] if r["kind"] == "publish-placement"
                  for e in r["entries"] if e["caching"] and e["vcpus"]]
        assert not cached, cached
    finally:
        stop_daemon(daemon)


def test_agent_greets_a_daemon_restarted_while_its_guest_was_paused(
    vm: QemuVm, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    # a paused guest misses the port's hangup and its reopening: its agent still thinks
    # itself greeted, and the new daemon refuses its reports (not-ready) until it greets
    # again (docs/protocol.md, "Handshake")
    first_dirs, second_dirs = (dirs[0], tmp_path / "first"), (dirs[0], tmp_path / "second")
    daemons = [start_daemon(first_dirs)]
    try:
        wait_until("the agent's reports", lambda: any(
            r["kind"] == "guest-report" for r in records(first_dirs)) or (
            read_in_guest(vm, 1, cpu=0, files=FILES[:1]) and None), timeout=90,
            daemon=daemons[0])
        vm.qmp("stop")
        stop_daemon(daemons[0])
        daemons.append(start_daemon(second_dirs))
        wait_until("the agent channel", lambda: any(
            "listening for its agent" in r.get("message", "") for r in records(second_dirs)),
            daemon=daemons[1])
        time.sleep(3)  # QEMU reconnects its chardev every second (reconnect=1)
        vm.qmp("cont")
        wait_until("the agent's hello and reports", lambda: any(
            r["kind"] == "guest-report" for r in records(second_dirs)) or (
            read_in_guest(vm, 1, cpu=0, files=FILES[:1]) and None), timeout=90,
            daemon=daemons[1], log=second_dirs)
    finally:
        vm.qmp("cont")  # a running guest stays running
        for daemon in daemons:
            stop_daemon(daemon)


def test_kill_9_of_agent_and_daemon_leaves_nothing_changed_after_recovery(
    vm: QemuVm, dirs: tuple[Path, Path]
) -> None:
    daemon = start_daemon(dirs, "--always-place")  # OBS pins even a lone reader
    try:
        wait_until("pins", lambda: all(len(c) == 1 for c in vcpu_affinity(vm).values()))
        # the agent dies: the daemon keeps serving (the guest's init may restart it)
        kill = "pkill -9 -f '^python3 -m unicache_agent'; echo killed"
        out = vm.run_in_guest(["sh", "-c", kill])
        assert out.ok
        time.sleep(2)
        assert daemon.poll() is None
        assert all(len(c) == 1 for c in vcpu_affinity(vm).values())
    finally:
        daemon.kill()  # kill -9 of the daemon: nothing restored yet
        daemon.wait()
    assert all(len(c) == 1 for c in vcpu_affinity(vm).values())
    again = start_daemon(dirs, "--rounds", "1")
    assert again.wait(timeout=60) == 0, again.stderr.read() if again.stderr else ""
    assert vcpu_affinity(vm) == {0: ALL, 1: ALL}
    assert any(r.get("message", "").startswith("recovery: restore") for r in records(dirs))


def test_kill_9_of_one_qemu_does_not_stop_the_daemon_serving_the_other(
    vm: QemuVm, image: GuestImage, dirs: tuple[Path, Path]
) -> None:
    registry, _ = dirs
    second = QemuVm(VmConfig("ucd-second", vcpus=1, memory_mib=256,
                             image_dir=image.directory), registry)
    second.start()
    daemon = start_daemon(dirs, "--always-place")  # OBS pins even a lone reader
    try:
        wait_until("both VMs pinned", lambda: all(
            len(c) == 1 for c in (*vcpu_affinity(vm).values(), *vcpu_affinity(second).values())))
        os.kill(second.pid, signal.SIGKILL)
        wait_until("the daemon to notice", lambda: any(
            "ucd-second: gone" in r.get("message", "") for r in records(dirs)))
        assert daemon.poll() is None
        assert all(len(c) == 1 for c in vcpu_affinity(vm).values())
    finally:
        stop_daemon(daemon)
        second.stop()
    assert vcpu_affinity(vm) == {0: ALL, 1: ALL}
