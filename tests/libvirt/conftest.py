"""A real libvirtd for the libvirt tests, whoever manages it.

One libvirtd per test module (its first domain start probes QEMU's capabilities, ~5-12 s
here). libvirtd's ``qemu:///system`` driver keeps its runtime state in fixed, compiled-in
directories (/run/libvirt, /var/lib/libvirt, /etc/libvirt), so a private daemon beside
the host's is not possible: the fixture uses the host's libvirtd and restarts it the way
it is managed (:class:`Libvirtd`), so that no test skips on a fresh Debian 12 host, where
systemd socket-activates libvirtd. Without one, it starts its own (virtlogd + libvirtd,
pid files in a temporary directory) and stops exactly those processes afterwards.
Restarting a libvirtd keeps its domains running. Test domains are named
``uctest-<pid>-...`` and destroyed and undefined after each test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed (make setup)")

SOCK = Path("/run/libvirt/libvirt-sock")
#: virtlogd's socket: a virtlogd killed hard leaves it behind, so existence proves nothing
VIRTLOGD_SOCK = Path("/run/libvirt/virtlogd-sock")
URI = "qemu:///system"
PREFIX = f"uctest-{os.getpid()}"


def _reachable(sock: Path = SOCK) -> bool:
    """Whether a daemon answers on ``sock`` (not merely whether the file is there)."""
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(sock))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop(pid_file: Path) -> None:
    pid = _pid(pid_file)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


#: how a libvirtd found running is managed
OURS, SYSTEMD, PID_FILE = "ours", "systemd", "pid-file"
#: the pid file of a libvirtd started by hand with its defaults
DEFAULT_PID_FILE = Path("/run/libvirtd.pid")


def _manager() -> str:
    """Who runs the libvirtd that answers: systemd, or a daemon with the default pid file."""
    if Path("/run/systemd/system").is_dir():
        for unit in ("libvirtd.service", "libvirtd.socket"):
            state = subprocess.run(["systemctl", "is-active", unit], capture_output=True,
                                   text=True, check=False).stdout.strip()
            if state == "active":
                return SYSTEMD
    if _pid(DEFAULT_PID_FILE) is not None:
        return PID_FILE
    raise RuntimeError(
        "a libvirtd answers on /run/libvirt/libvirt-sock, but neither systemd nor "
        f"{DEFAULT_PID_FILE} says how to restart it: stop it, or run it from systemd"
    )


@dataclass
class Libvirtd:
    """The libvirtd the tests talk to.

    :param run_dir: where the pid files of a libvirtd the fixture starts go.
    :param manager: :data:`OURS` (the fixture started it), :data:`SYSTEMD` (restarted with
        systemctl) or :data:`PID_FILE` (a libvirtd started by hand: stopped by its pid file
        and started again the same way).
    """

    run_dir: Path
    manager: str
    domains: list[str] = field(default_factory=list)

    @property
    def ours(self) -> bool:
        """Whether the fixture started it (and stops it at the end)."""
        return self.manager == OURS

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "libvirtd.pid" if self.ours else DEFAULT_PID_FILE

    def start(self) -> None:
        """Start libvirtd (virtlogd first if needed) and wait for its socket."""
        if not _reachable(VIRTLOGD_SOCK):  # virtlogd replaces a stale socket file
            subprocess.run(["virtlogd", "-d", "-p", str(self.run_dir / "virtlogd.pid")],
                           check=True)
        if self.manager == SYSTEMD:
            subprocess.run(["systemctl", "start", "libvirtd.service"], check=True)
        else:
            subprocess.run(["libvirtd", "-d", "-p", str(self.pid_file)], check=True)
        deadline = time.monotonic() + 30
        while not _reachable():
            if time.monotonic() > deadline:
                raise RuntimeError("libvirtd did not open its socket in 30 s")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop libvirtd (domains keep running)."""
        if self.manager == SYSTEMD:
            # the socket units stay: a client would start it again at once
            subprocess.run(["systemctl", "stop", "libvirtd.service"], check=True)
        else:
            _stop(self.pid_file)

    def restart(self) -> None:
        """Stop and start libvirtd the way it is managed (it then reads its hooks again)."""
        self.stop()
        self.start()

    def connect(self) -> Any:
        """A new connection."""
        libvirt.registerErrorHandler(lambda _c, _e: None, None)
        return libvirt.open(URI)


def _require() -> None:
    if os.geteuid() != 0:
        pytest.skip("the libvirt tests need root (libvirtd qemu:///system)")
    for tool in ("libvirtd", "virtlogd", "virsh", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make setup installs libvirt)")


@pytest.fixture(scope="module")
def libvirtd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Libvirtd]:
    """A running libvirtd for the module."""
    _require()
    run_dir = tmp_path_factory.mktemp("libvirtd")
    daemon = Libvirtd(run_dir, _manager() if _reachable() else OURS)
    if daemon.ours:
        daemon.start()
    try:
        yield daemon
    finally:
        conn = daemon.connect() if _reachable() else None
        if conn is not None:
            for name in daemon.domains:
                with contextlib.suppress(libvirt.libvirtError):
                    dom = conn.lookupByName(name)
                    with contextlib.suppress(libvirt.libvirtError):
                        dom.destroy()
                    with contextlib.suppress(libvirt.libvirtError):
                        dom.undefine()
            conn.close()
        if daemon.ours:
            _stop(daemon.pid_file)
            _stop(run_dir / "virtlogd.pid")


def domain_xml(
    name: str,
    vcpus: int = 2,
    channel: Path | None = None,
    numa: bool = False,
    serial_controller: bool = True,
    bind_channel: bool = False,
) -> str:
    """A small TCG domain: no disk, SeaBIOS idles; the vCPU threads are what matters.

    ``channel``: the agent channel in connect mode on that path (the daemon listens);
    ``bind_channel``: in bind mode, as ``unicache attach`` adds it (QEMU listens).
    """
    cells = ""
    if numa:
        half = 64 // 2
        cells = (
            "<cpu><numa>"
            f"<cell id='0' cpus='0' memory='{half}' unit='MiB'/>"
            f"<cell id='1' cpus='1-{vcpus - 1}' memory='{half}' unit='MiB'/>"
            "</numa></cpu><numatune><memory mode='strict' nodeset='0'/></numatune>"
        )
    chan = ""
    if channel is not None:
        chan = (
            f"<channel type='unix'><source mode='connect' path='{channel}'>"
            "<reconnect enabled='yes' timeout='1'/></source>"
            "<target type='virtio' name='org.unicache.agent.0'/></channel>"
        )
    elif bind_channel:
        chan = (
            "<channel type='unix'><source mode='bind'/>"
            "<target type='virtio' name='org.unicache.agent.0'/></channel>"
        )
    controller = "<controller type='virtio-serial' index='0'/>" if serial_controller else ""
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu placement='static'>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/><apic/></features>
  {cells}
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    {controller}{chan}
    <video><model type='none'/></video>
    <memballoon model='none'/>
  </devices>
</domain>"""


@pytest.fixture
def make_domain(libvirtd: Libvirtd) -> Iterator[Callable[..., Any]]:
    """Define and start a domain; destroyed and undefined after the test."""
    made: list[str] = []
    counter = iter(range(1000))

    def make(suffix: str = "", start: bool = True, **kwargs: Any) -> Any:
        name = f"{PREFIX}-{suffix or next(counter)}"
        made.append(name)
        libvirtd.domains.append(name)
        conn = libvirtd.connect()  # a fresh one: a test may have restarted libvirtd
        dom = conn.defineXML(domain_xml(name, **kwargs))
        if start:
            dom.create()
        return dom

    yield make
    conn = libvirtd.connect()
    for name in made:
        with contextlib.suppress(libvirt.libvirtError):
            dom = conn.lookupByName(name)
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
    conn.close()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A directory QEMU (running as libvirt-qemu) can reach; pytest's tmp tree is 0700."""
    path = Path(f"/run/{PREFIX}-sockets")
    path.mkdir(mode=0o755, exist_ok=True)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_for(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
