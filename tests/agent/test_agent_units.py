"""Agent pieces: port discovery, framing, shared table, placement assembly, host errors."""

from __future__ import annotations

import ast
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from unicache_agent import protocol as p
from unicache_agent.agent import Agent
from unicache_agent.counters import CounterHarvester
from unicache_agent.errors import PortError, ShmError
from unicache_agent.guest_facts import guest_topology
from unicache_agent.port import FdTransport, find_port
from unicache_agent.shm import CounterLayout, CpuNodes, ShmEntry, id_space_of
from unicache_agent.table_writer import TableWriter

AGENT_DIR = Path(__file__).resolve().parents[2] / "guest-agent" / "unicache_agent"


def test_port_found_through_sysfs_without_udev(tmp_path: Path) -> None:
    sysd = tmp_path / "sys"
    for name, port in (("vport0p1", "org.qemu.guest_agent.0"), ("vport0p2", p.PORT_NAME)):
        (sysd / name).mkdir(parents=True)
        (sysd / name / "name").write_text(port + "\n")
    found = find_port(dev_dir=str(tmp_path / "none"), sys_dir=str(sysd), devfs="/dev")
    assert found == "/dev/vport0p2"


def test_port_found_through_udev_link_first(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / p.PORT_NAME).write_text("")
    assert find_port(dev_dir=str(tmp_path / "dev"), sys_dir=str(tmp_path / "x")) == str(
        tmp_path / "dev" / p.PORT_NAME)


def test_missing_port_is_a_port_error(tmp_path: Path) -> None:
    with pytest.raises(PortError, match="no virtio-serial port"):
        find_port(dev_dir=str(tmp_path), sys_dir=str(tmp_path))


def test_line_reader_bounds_and_sync() -> None:
    r = p.LineReader(max_line=16)
    assert r.feed(b"abc\nde") == [b"abc"]
    assert r.feed(b"f\n" + b"x" * 40 + b"\nok\n") == [b"def", None, b"ok"]
    assert r.feed(b"partial\xffnext\n") == [b"next"]
    assert r.syncs == 1


def test_table_publish_is_read_back_and_flips_buffers(tmp_path: Path) -> None:
    t = TableWriter(str(tmp_path / "t"), nbuckets=128)  # 32 chunks of 32 files: 64 entries
    entries = [ShmEntry(i * 7919 + 1, i, frozenset({i % 3, 200}), i % 2 == 0, i)
               for i in range(32)]
    assert t.publish(5, 65536, 1000, entries) == 32
    version, cs, mrs, back = t.read_active()
    assert (version, cs, mrs) == (5, 65536, 1000)
    assert sorted(back, key=lambda e: e.chunk) == entries
    t.publish(6, 65536, 1000, entries[:3])
    assert len(t.read_active()[3]) == 3
    salt = t.salt
    t.close()
    assert TableWriter(str(tmp_path / "t"), nbuckets=128).salt == salt  # kept across restarts


def test_table_refuses_more_than_capacity(tmp_path: Path) -> None:
    t = TableWriter(str(tmp_path / "t"), nbuckets=64)
    with pytest.raises(ShmError, match="at most 32"):
        t.publish(1, 65536, 0, [ShmEntry(i + 1, 0, frozenset({0})) for i in range(33)])


def test_counters_harvest_empty_then_zeroed(tmp_path: Path) -> None:
    c = CounterHarvester(str(tmp_path / "c"), CounterLayout.of(max_vcpus=2, nslots=64))
    h = c.harvest(0)
    assert h.chunks == () and h.dropped == 0


def test_guest_topology_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "online").write_text("0-3,6\n")
    for n in (0, 1):
        (tmp_path / "node" / f"node{n}").mkdir(parents=True)
    assert guest_topology(str(tmp_path)) == (5, (0, 1))


class FakeHost:
    """The host end of a socketpair, speaking raw protocol lines."""

    def __init__(self, tmp_path: Path, counters: Any = None, **agent_kw: Any) -> None:
        self.sock, theirs = socket.socketpair()
        self.sock.settimeout(5)
        fd = theirs.detach()
        layout = CounterLayout.of(max_vcpus=2, nslots=64)
        # the CPUs' nodes of the agent's sysfs, as the agent's command line reads them once
        cpu_nodes = CpuNodes.from_sysfs(agent_kw.get("sys_root", "/sys/devices/system"))
        self.table = TableWriter(str(tmp_path / "t"), nbuckets=64, counters=layout,
                                 cpu_nodes=cpu_nodes)
        self.agent = Agent(FdTransport(fd, fd), self.table,
                           counters or CounterHarvester(str(tmp_path / "c"), layout, cpu_nodes),
                           **agent_kw)
        self.buf = b""

    def send(self, obj: object) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")
        self.agent.step(0.2)

    def recv(self) -> dict[str, object]:
        while b"\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line.lstrip(b"\xff"))  # type: ignore[no-any-return]

    def handshake(self, caps: tuple[str, ...] = ()) -> dict[str, object]:
        self.agent.step(0.1)
        assert self.recv()["type"] == "sync"
        hello = self.recv()
        assert hello["type"] == "hello"
        self.send({"v": 1, "type": "welcome", "version": 1, "caps": list(caps),
                   "params": {"chunk_size": 65536, "min_read_size": 0,
                              "report_interval_s": 60}})
        assert self.agent.ready
        return hello


def test_hello_names_the_boots_file_id_space_and_a_new_boot_another(tmp_path: Path) -> None:
    from unicache.channel import protocol as host

    for boot in ("boot1", "boot2"):
        (tmp_path / boot).mkdir()
    h = FakeHost(tmp_path / "boot1")
    hello = h.handshake()
    assert hello["id_space"] == id_space_of(h.table.salt)
    parsed = host.parse_guest_line(json.dumps({"v": 1, **hello}).encode())
    assert isinstance(parsed, host.Hello) and parsed.id_space == hello["id_space"]
    again = FakeHost(tmp_path / "boot1")  # the agent restarted: same table file, same salt
    assert again.handshake()["id_space"] == hello["id_space"]
    rebooted = FakeHost(tmp_path / "boot2")  # a new /dev/shm: a new salt
    assert rebooted.handshake()["id_space"] != hello["id_space"]
    assert str(h.table.salt) not in str(hello) and f"{h.table.salt:x}" not in str(hello)


def test_agent_greets_again_when_a_restarted_host_has_not_heard_its_hello(
        tmp_path: Path) -> None:
    h = FakeHost(tmp_path)
    h.handshake()
    # a new daemon on the port: the agent missed the hangup, so its next report is refused
    h.send({"v": 1, "type": "error", "kind": "not-ready", "message": "send hello first"})
    assert not h.agent.ready
    assert h.recv()["type"] == "sync"
    assert h.recv()["type"] == "hello"
    h.send({"v": 1, "type": "error", "kind": "not-ready", "message": "send hello first"})
    h.send({"v": 1, "type": "error", "kind": "rate-limited", "message": "slow down"})
    h.sock.settimeout(0.3)  # one hello per greeting: the errors before welcome send none
    with pytest.raises(TimeoutError):
        h.recv()


def test_agent_assembles_parts_and_answers_applied(tmp_path: Path) -> None:
    h = FakeHost(tmp_path)
    h.handshake()
    base = {"v": 1, "type": "placement", "version": 3, "parts": 2, "chunk_size": 65536,
            "min_read_size": 4096}
    h.send({**base, "part": 1, "entries": [["b", 0, [1], True, 5]]})
    assert h.table.read_active()[0] == 0  # not applied before all parts arrived
    h.send({**base, "part": 0, "entries": [["a", 2, [0], False, 0]]})
    assert h.recv() == {"v": 1, "type": "applied", "version": 3, "entries": 2}
    assert {(e.file_id, e.chunk) for e in h.table.read_active()[3]} == {(0xA, 2), (0xB, 0)}


@pytest.mark.parametrize(
    ("msg", "kind"),
    [
        ({"v": 1, "type": "colors"}, "reserved-type"),
        ({"v": 1, "type": "replicas"}, "reserved-type"),
        ({"v": 1, "type": "launch"}, "unknown-type"),
        ({"v": 1, "type": "placement", "version": 1, "part": 0, "parts": 1,
          "chunk_size": 1000, "min_read_size": 0, "entries": []}, "bad-field"),
        ({"v": 1, "type": "placement", "version": 1, "part": 0, "parts": 1,
          "chunk_size": 65536, "min_read_size": 0, "entries": [["a", 0, [999], True, 0]]},
         "bad-field"),
        ({"v": 2, "type": "params"}, "unsupported-version"),
    ],
    ids=["colors", "replicas", "unknown", "chunk-size", "vcpu-range", "version"],
)
def test_agent_answers_bad_host_messages_with_named_errors(
        tmp_path: Path, msg: dict[str, object], kind: str) -> None:
    h = FakeHost(tmp_path)
    h.handshake()
    h.send(msg)
    reply = h.recv()
    assert reply["type"] == "error" and reply["kind"] == kind


def test_agent_report_fits_the_line_limit(tmp_path: Path) -> None:
    from unicache_agent.shm import ChunkCounts, Harvest

    h = FakeHost(tmp_path)
    many = tuple(ChunkCounts(i + 1, i, 10**12, 10**6, 0, 0, 0,
                             tuple((v, 10**9) for v in range(64)))
                 for i in range(3000))
    line = h.agent.build_report(Harvest(many, 7, 1), [], 1.0)
    assert len(line) <= p.MAX_LINE_BYTES
    msg = json.loads(line)
    assert 0 < len(msg["chunks"]) <= p.MAX_ENTRIES_PER_MESSAGE
    assert msg["health"]["dropped"] >= 3000 - len(msg["chunks"])


def test_agent_sources_parse_as_python_3_9() -> None:
    for path in sorted(AGENT_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
        assert not any(isinstance(n, ast.Match) for n in ast.walk(tree)), path
        imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names}
        imports |= {n.module.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        assert imports <= sys.stdlib_module_names, (path, imports - sys.stdlib_module_names)


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_fanotify_counts_reads_of_processes_without_shim(tmp_path: Path) -> None:
    import subprocess

    from unicache_agent.fanotify import FanotifyCapture
    from unicache_agent.shm import file_id_of

    f = tmp_path / "x"
    f.write_bytes(b"hello" * 1000)
    cap = FanotifyCapture(99, str(tmp_path))  # a broken fanotify fails here, never skips
    subprocess.run(["cat", str(f)], check=True, stdout=subprocess.DEVNULL)
    st = f.stat()
    recs = {fid: (a, m) for fid, a, m in cap.drain()}
    cap.close()
    assert recs[file_id_of(99, st.st_dev, st.st_ino)][0] >= 1


def test_install_script_into_an_image_root_preloads_nothing_unless_a_scope_asks(
        tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    script = AGENT_DIR.parent / "install.sh"
    shim = "/usr/lib/unicache-agent/libunicache.so"

    def install(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", str(script), "--root", str(tmp_path), *flags],
                              capture_output=True, text=True)

    assert install().returncode == 0
    lib = tmp_path / "usr/lib/unicache-agent"
    assert (lib / "libunicache.so").is_file() and (lib / "preload").is_file()
    assert not (tmp_path / "etc/ld.so.preload").exists()  # scoped by default: nowhere
    conf = tmp_path / "etc/unicache-agent/shim.conf"
    assert all(line.startswith("#") or not line.strip()
               for line in conf.read_text().splitlines())  # only comments
    unit = (tmp_path / "etc/systemd/system/unicache-agent.service").read_text()
    assert "Environment=UNICACHE_DISABLE=1" in unit.splitlines()  # never under its own shim
    # started by udev when the port appears, never at every boot
    assert not (tmp_path / "etc/systemd/system/multi-user.target.wants").exists()
    assert "org.unicache.agent.0" in (
        tmp_path / "etc/udev/rules.d/60-unicache-agent.rules").read_text()

    # --scope: the CLI's code on the root (load check, atomic list, drop-in)
    (tmp_path / "usr/sbin").mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/true", tmp_path / "usr/sbin/web")
    for _ in range(2):  # idempotent: one preload line, one scope line each
        done = install("--scope", "exe:/usr/sbin/web", "--scope", "unit:web.service")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "etc/ld.so.preload").read_text().splitlines() == [shim]
        assert [line for line in conf.read_text().splitlines()
                if not line.startswith("#") and line.strip()] == [
            "exe /usr/sbin/web", "unit web.service"]
    assert f"Environment=LD_PRELOAD={shim}" in (
        tmp_path / "etc/systemd/system/web.service.d/50-unicache-shim.conf").read_text()
    assert sorted(p.name for p in (tmp_path / "etc").iterdir() if p.name.startswith("ld.so")) == [
        "ld.so.preload"]  # no temporary file left

    done = install("--scope", "exe:relative/web")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    done = install("--bogus")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert install("--no-preload", "--no-systemd").returncode == 0  # earlier callers' flags

    res = subprocess.run([sys.executable, "-m", "unicache_agent", "--version"],
                         env={**os.environ, "PYTHONPATH": str(lib)}, capture_output=True,
                         text=True, check=True)
    version = (AGENT_DIR.parents[1] / "VERSION").read_text().strip()
    assert res.stdout.startswith(f"unicache-agent {version}")


def test_relayout_retires_the_old_file_instead_of_shrinking_it(tmp_path: Path) -> None:
    import mmap

    path = tmp_path / "t"
    TableWriter(str(path), nbuckets=128).close()
    old_ino = path.stat().st_ino
    with open(path, "r+b") as f:
        old = mmap.mmap(f.fileno(), 0)  # what a running shim holds
    TableWriter(str(path), nbuckets=64).close()
    assert path.stat().st_ino != old_ino
    assert old[0:4] == bytes(4)  # shims see a zero magic and map the new file
    assert len(old) > path.stat().st_size  # and their old mapping is still whole
    old.close()


