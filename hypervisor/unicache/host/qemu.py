"""Launching and managing QEMU guests directly (no libvirt): start, stop, QMP, the VM registry.

One :class:`QemuVm` per guest. ``start()`` runs ``qemu-system-x86_64`` with the guest image
(``make image``: docs/images.md), a throw-away disk (``snapshot=on``: the base image stays
clean), two virtio-serial ports and a QMP socket:

* ``org.unicache.agent.0``: the guest agent's channel. By default QEMU *connects* to
  ``agent_socket`` (``reconnect=1``), on which :class:`unicache.channel.ChannelServer` listens
  (docs/protocol.md "Transport"); ``agent_listen=True`` makes QEMU listen there instead.
* ``org.unicache.control.0``: the demo/test command runner (:meth:`QemuVm.run_in_guest`).
* ``-qmp unix:...``: ``query-cpus-fast`` gives each vCPU's host thread id
  (:meth:`QemuVm.vcpu_threads`), through the ``qemu.qmp`` library.

Guest NUMA nodes may be colored (``--numa 0-1:768/-:256@0-15``): such a node is backed by
``memory-backend-colored`` of the patched QEMU (``make qemu``), else by 2 MiB hugepages with
one line saying so (:mod:`unicache.host.colors`, docs/coloring.md "QEMU memory backend").

Every running VM has a JSON record in the state directory (env ``UNICACHE_STATE_DIR``,
default ``/run/unicache/vms``) so ``unicache vm list`` and the daemon find it:
``<state>/<name>.json`` plus a run directory ``<state>/<name>/`` with the sockets and logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from qemu.qmp import QMPClient
from qemu.qmp import QMPError as _QMPError

from unicache.cpulist import format_list, parse_list
from unicache.errors import ConfigError, ProtocolError, StateError, UnicacheError, VmError
from unicache.host import colors as hostcolors
from unicache.host.accel import QEMU_BINARY, AccelChoice, cache_dir, choose_accel
from unicache.host.colors import COLORED_BACKEND, QemuBinary

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())

#: default registry of running VMs (overridden by env ``UNICACHE_STATE_DIR``)
DEFAULT_STATE_DIR = Path("/run/unicache/vms")
#: the guest image ``make image`` builds, relative to the repository
DEFAULT_IMAGE_SUBDIR = Path("build/images/debian12")
#: virtio-serial port names (the agent's is fixed by docs/protocol.md)
AGENT_PORT = "org.unicache.agent.0"
CONTROL_PORT = "org.unicache.control.0"
#: VM names: used in file names and on QEMU's command line
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: the largest reply line the control client accepts (runner caps stdout+stderr at 2 MiB)
MAX_REPLY_BYTES = 16 << 20
#: qboot (QEMU's minimal firmware for -kernel boots) saves about 1 s of SeaBIOS under TCG
QBOOT = Path("/usr/share/qemu/qboot.rom")
#: seconds QEMU may take to create its QMP socket after exec
QEMU_START_TIMEOUT_S = 15.0

_T = TypeVar("_T")


# --------------------------------------------------------------------------- values


#: how a node's memory is backed (``NumaNode.backing``, decided at start)
BACKING_RAM = "ram"
BACKING_COLORED = "colored"
BACKING_HUGEPAGE = "hugepage"
_BACKINGS = ("", BACKING_RAM, BACKING_COLORED, BACKING_HUGEPAGE)


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One guest NUMA node: the vCPUs on it (none: a memory-only node) and its memory.

    :param node: node id (0, 1, ...).
    :param cpus: vCPU indexes on the node.
    :param memory_mib: memory of the node.
    :param colors: host LLC page colors its memory must come from (empty: not colored).
    :param ncolors: the host LLC's colors ``colors`` refer to (0: not known yet; set at start).
    :param backing: how the memory is backed, set at start: ``ram``, ``colored``
        (``memory-backend-colored`` of the patched QEMU) or ``hugepage`` (the fallback:
        2 MiB hugepages, guest colors equal host colors within each 2 MiB page).
    """

    node: int
    cpus: frozenset[int]
    memory_mib: int
    colors: frozenset[int] = frozenset()
    ncolors: int = 0
    backing: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form: ``{"node": 0, "cpus": "0-1", "memory_mib": 512}``, plus ``colors``,
        ``ncolors`` and ``backing`` when set."""
        out: dict[str, Any] = {"node": self.node, "cpus": format_list(self.cpus),
                               "memory_mib": self.memory_mib}
        if self.colors:
            out["colors"] = format_list(self.colors)
        if self.ncolors:
            out["ncolors"] = self.ncolors
        if self.backing:
            out["backing"] = self.backing
        return out

    @classmethod
    def from_json(cls, obj: object) -> NumaNode:
        """Parse :meth:`to_json`'s form (records without colors are uncolored nodes).

        :raises ConfigError: when a member is missing or of the wrong type.
        """
        if not isinstance(obj, dict):
            raise ConfigError("a numa node record must be an object")
        node, cpus, mem = obj.get("node"), obj.get("cpus"), obj.get("memory_mib")
        if not isinstance(node, int) or not isinstance(cpus, str) or not isinstance(mem, int):
            raise ConfigError("a numa node record needs node (int), cpus (str), memory_mib (int)")
        colors, ncolors, backing = obj.get("colors", ""), obj.get("ncolors", 0), obj.get(
            "backing", "")
        if not isinstance(colors, str) or not isinstance(ncolors, int) or backing not in _BACKINGS:
            raise ConfigError("a numa node record's colors (str), ncolors (int) or backing "
                              f"({', '.join(b for b in _BACKINGS if b)}) is malformed")
        return cls(node, parse_list(cpus), mem, parse_list(colors), ncolors, str(backing))

    def guest_colors(self) -> frozenset[int]:
        """The host colors the daemon's policies see for this node (``GuestNode.colors``).

        A ``colored`` node: its colors. A ``hugepage`` node: all ``ncolors`` colors (within a
        2 MiB page guest colors equal host colors, so the guest can color it itself; which
        colors its pages hold is not chosen). Any other node: none (not colored).
        """
        if self.backing == BACKING_COLORED:
            return self.colors
        if self.backing == BACKING_HUGEPAGE and self.ncolors:
            return frozenset(range(self.ncolors))
        return frozenset()


def parse_numa(spec: str, vcpus: int, memory_mib: int) -> tuple[NumaNode, ...]:
    """Parse a guest NUMA layout.

    Grammar: ``node ("/" node)*`` with ``node ::= cpulist ":" MiB ["@" colorlist]``; an empty
    cpulist (or ``-``) is a memory-only node, ``@colorlist`` (e.g. ``@0-15``) builds the
    node's memory from host pages of those LLC page colors. Example for 2 vCPUs and
    1024 MiB with a colored memory-only node: ``0-1:768/-:256@0-15``. With a colored node,
    every node's memory must be a multiple of 2 MiB (hugepage fallback and alignment).

    :param spec: the layout.
    :param vcpus: the VM's vCPU count (every vCPU must be on exactly one node).
    :param memory_mib: the VM's memory (the nodes' memory must add up to it).
    :returns: the nodes, in order (node ids 0, 1, ...).
    :raises ConfigError: on a syntax error or a layout QEMU would refuse.
    """
    nodes: list[NumaNode] = []
    seen: set[int] = set()
    for i, part in enumerate(spec.strip().split("/")):
        body, at, colors_text = part.strip().partition("@")
        cpus_text, sep, mem_text = body.strip().partition(":")
        if not sep or not mem_text.strip().isdigit():
            raise ConfigError(
                f"numa node {i} {part!r}: expected CPULIST:MIB[@COLORS] (e.g. 0-1:512 or "
                "-:256@0-15)")
        cpus_text = cpus_text.strip()
        cpus = frozenset() if cpus_text in ("", "-") else parse_list(cpus_text)
        colors: frozenset[int] = frozenset()
        if at:
            try:
                colors = parse_list(colors_text.strip())
            except (ConfigError, ValueError) as err:
                raise ConfigError(f"numa node {i}: bad color list {colors_text!r} "
                                  "(e.g. 0-15 or 0,4-7)") from err
            if not colors:
                raise ConfigError(f"numa node {i}: '@' needs colors (e.g. @0-15)")
        bad = sorted(c for c in cpus if c >= vcpus)
        if bad:
            raise ConfigError(f"numa node {i}: vCPU {bad[0]} does not exist ({vcpus} vCPUs)")
        if cpus & seen:
            raise ConfigError(f"numa node {i}: vCPU {min(cpus & seen)} is on two nodes")
        seen |= cpus
        mem = int(mem_text)
        if mem <= 0:
            raise ConfigError(f"numa node {i}: memory must be positive")
        nodes.append(NumaNode(i, cpus, mem, colors))
    missing = sorted(set(range(vcpus)) - seen)
    if missing:
        raise ConfigError(f"numa layout {spec!r} leaves vCPU {missing[0]} on no node")
    total = sum(n.memory_mib for n in nodes)
    if total != memory_mib:
        raise ConfigError(f"numa layout {spec!r} has {total} MiB, the VM has {memory_mib} MiB")
    if any(n.colors for n in nodes):
        odd = [n for n in nodes if n.memory_mib % 2]
        if odd:
            raise ConfigError(f"numa node {odd[0].node}: {odd[0].memory_mib} MiB is odd; with "
                              "a colored node every node needs a multiple of 2 MiB")
    return tuple(nodes)


def plan_nodes(nodes: Sequence[NumaNode], colored_backend: bool,
               ncolors: int) -> tuple[NumaNode, ...]:
    """Decide each node's backing (pure): uncolored nodes ``ram``; colored nodes ``colored``
    when the QEMU has ``memory-backend-colored``, else the ``hugepage`` fallback.

    :param nodes: the nodes.
    :param colored_backend: whether the QEMU offers ``memory-backend-colored``.
    :param ncolors: the host LLC's page colors (0: unknown; the backend probes sysfs).
    :returns: the nodes with ``backing`` (and for colored ones ``ncolors``) set.
    :raises ConfigError: when a node asks for a color the host does not have.
    """
    out = []
    for n in nodes:
        if not n.colors:
            out.append(replace(n, backing=BACKING_RAM, ncolors=0))
            continue
        if ncolors and max(n.colors) >= ncolors:
            raise ConfigError(f"numa node {n.node}: color {max(n.colors)} does not exist "
                              f"(the host LLC has {ncolors} page colors, 0-{ncolors - 1})")
        out.append(replace(n, backing=BACKING_COLORED if colored_backend else BACKING_HUGEPAGE,
                           ncolors=ncolors or n.ncolors))
    return tuple(out)


def _memdev(n: NumaNode) -> str:
    """The ``-object`` of a planned node's memory."""
    size = f"id=mem{n.node},size={n.memory_mib}M"
    if n.backing == BACKING_COLORED:
        # QEMU's option syntax escapes a comma inside a value by doubling it
        spec = f"{COLORED_BACKEND},{size},colors={format_list(n.colors).replace(',', ',,')}"
        return spec + (f",ncolors={n.ncolors}" if n.ncolors else "")
    if n.backing == BACKING_HUGEPAGE:
        return f"memory-backend-memfd,{size},hugetlb=on,hugetlbsize=2M"
    return f"memory-backend-ram,{size}"


@dataclass(frozen=True, slots=True)
class GuestImage:
    """A built guest image (``image.json`` of ``make image``).

    :param directory: where it is.
    :param kernel: the kernel.
    :param initrd: the initramfs.
    :param disk: the root disk (raw ext4).
    :param kernel_version: the guest kernel's release.
    """

    directory: Path
    kernel: Path
    initrd: Path
    disk: Path
    kernel_version: str


def _repo_root() -> Path:
    # hypervisor/unicache/host/qemu.py -> repository root
    return Path(__file__).resolve().parents[3]


def default_image_dir() -> Path:
    """The guest image directory: env ``UNICACHE_IMAGE_DIR``, else the repository's build dir."""
    env = os.environ.get("UNICACHE_IMAGE_DIR")
    if env:
        return Path(env)
    for base in (Path.cwd(), _repo_root()):
        if (base / DEFAULT_IMAGE_SUBDIR / "image.json").exists():
            return base / DEFAULT_IMAGE_SUBDIR
    return _repo_root() / DEFAULT_IMAGE_SUBDIR


def load_image(directory: Path | None = None) -> GuestImage:
    """Load a built guest image.

    :param directory: the image directory (default :func:`default_image_dir`).
    :returns: the image.
    :raises ConfigError: when it is not built or incomplete (the message says ``make image``).
    """
    d = directory or default_image_dir()
    meta = d / "image.json"
    try:
        obj = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ConfigError(f"no guest image at {d}: run `make image`") from err
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot read {meta}") from err
    if not isinstance(obj, dict):
        raise ConfigError(f"{meta} is not a JSON object")
    try:
        image = GuestImage(d, d / str(obj["kernel"]), d / str(obj["initrd"]),
                           d / str(obj["disk"]), str(obj["kernel_version"]))
    except KeyError as err:
        raise ConfigError(
            f"{meta} lacks member {err.args[0]!r}: rebuild with `make image`") from err
    for path in (image.kernel, image.initrd, image.disk):
        if not path.is_file():
            raise ConfigError(f"guest image incomplete, {path} missing: run `make image`")
    return image


def ensure_image(progress: Callable[[str], None] | None = None,
                 repo: Path | None = None) -> GuestImage:
    """Build the guest image with ``make image`` when needed (make skips an up-to-date one).

    :param progress: called with each line of the build's output (default: discarded).
    :param repo: the repository (default: the one this package lives in).
    :returns: the built image.
    :raises ConfigError: when the build fails (the message has the last output line).
    """
    root = repo or _repo_root()
    if os.environ.get("UNICACHE_IMAGE_DIR") or not (root / "images" / "images.mk").exists():
        return load_image()
    top = (root / "Makefile").read_text(encoding="utf-8", errors="replace")
    if "images.mk" in top:
        cmds = [["make", "--no-print-directory", "image"]]
    else:  # the fragment alone (the shim has its rule in the top Makefile's fragments)
        cmds = [["make", "--no-print-directory", "shim-build"],
                ["make", "--no-print-directory", "-f", "images/images.mk", "image"]]
    last = ""
    for cmd in cmds:
        with subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                last = line.rstrip() or last
                if progress is not None:
                    progress(line.rstrip())
        if proc.returncode != 0:
            raise ConfigError(f"`{' '.join(cmd)}` failed: {last}")
    return load_image(root / DEFAULT_IMAGE_SUBDIR)


def state_dir() -> Path:
    """The VM registry directory: env ``UNICACHE_STATE_DIR``, default ``/run/unicache/vms``."""
    env = os.environ.get("UNICACHE_STATE_DIR")
    return Path(env) if env else DEFAULT_STATE_DIR


def check_name(name: str) -> str:
    """Check a VM name (letters, digits, ``_.-``, at most 63 characters).

    :raises ConfigError: when it is not usable.
    """
    if not _NAME_RE.match(name):
        raise ConfigError(f"bad VM name {name!r}: use letters, digits, '_', '.', '-' (max 63)")
    return name


@dataclass(frozen=True, slots=True)
class VmConfig:
    """What a VM is started with.

    :param name: the VM's name (also QEMU's ``-name guest=``).
    :param vcpus: number of vCPUs.
    :param memory_mib: guest memory.
    :param numa: guest NUMA nodes (empty: none).
    :param accel: ``auto`` (probe), ``kvm`` or ``tcg``; ``None`` reads env ``UNICACHE_ACCEL``.
    :param agent_socket: the agent channel's unix socket (default ``<run dir>/agent.sock``).
    :param agent_listen: QEMU listens on ``agent_socket`` instead of connecting to it.
    :param image_dir: the guest image (default :func:`default_image_dir`).
    :param append: extra kernel command-line words.
    """

    name: str
    vcpus: int = 2
    memory_mib: int = 1024
    numa: tuple[NumaNode, ...] = ()
    accel: str | None = None
    agent_socket: Path | None = None
    agent_listen: bool = False
    image_dir: Path | None = None
    append: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 1 <= self.vcpus <= 255:
            raise ConfigError(f"vcpus must be 1..255, not {self.vcpus}")
        if not 64 <= self.memory_mib <= 1 << 20:
            raise ConfigError(f"memory must be 64..1048576 MiB, not {self.memory_mib}")


@dataclass(frozen=True, slots=True)
class VmRecord:
    """A running VM as the registry knows it (``<state>/<name>.json``).

    :param name: the VM.
    :param pid: QEMU's pid.
    :param start_ticks: QEMU's start time (``/proc/PID/stat`` field 22), against pid reuse.
    :param qmp_socket: QMP unix socket.
    :param agent_socket: the agent channel's unix socket.
    :param agent_listen: whether QEMU listens on it (else the host channel does).
    :param control_socket: the demo/test command runner's socket.
    :param console_log: the guest's serial console.
    :param vcpus: number of vCPUs.
    :param memory_mib: guest memory.
    :param accel: ``kvm`` or ``tcg``.
    :param numa: guest NUMA nodes.
    :param run_dir: the VM's run directory.
    :param started: start time (Unix seconds).
    :param qemu: the QEMU executable it runs.
    :param hugepages_added: 2 MiB hugepages unicache reserved for it (given back at stop).
    :param max_map_count_added: how much unicache raised ``vm.max_map_count`` for it.
    """

    name: str
    pid: int
    start_ticks: int
    qmp_socket: str
    agent_socket: str
    agent_listen: bool
    control_socket: str
    console_log: str
    vcpus: int
    memory_mib: int
    accel: str
    numa: tuple[NumaNode, ...]
    run_dir: str
    started: float
    qemu: str = QEMU_BINARY
    hugepages_added: int = 0
    max_map_count_added: int = 0

    def to_json(self) -> dict[str, Any]:
        """The registry's JSON form (``unicache vm list --json`` prints it)."""
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks,
                "qmp_socket": self.qmp_socket, "agent_socket": self.agent_socket,
                "agent_listen": self.agent_listen, "control_socket": self.control_socket,
                "console_log": self.console_log, "vcpus": self.vcpus,
                "memory_mib": self.memory_mib, "accel": self.accel,
                "numa": [n.to_json() for n in self.numa], "run_dir": self.run_dir,
                "started": self.started, "qemu": self.qemu,
                "hugepages_added": self.hugepages_added,
                "max_map_count_added": self.max_map_count_added}

    @classmethod
    def from_json(cls, obj: object) -> VmRecord:
        """Parse a registry record.

        :raises ConfigError: when a member is missing or of the wrong type.
        """
        if not isinstance(obj, dict):
            raise ConfigError("a VM record must be a JSON object")
        types: dict[str, type | tuple[type, ...]] = {
            "name": str, "pid": int, "start_ticks": int, "qmp_socket": str,
            "agent_socket": str, "agent_listen": bool, "control_socket": str,
            "console_log": str, "vcpus": int, "memory_mib": int, "accel": str, "numa": list,
            "run_dir": str, "started": (int, float)}
        for key, typ in types.items():
            if not isinstance(obj.get(key), typ):
                raise ConfigError(f"VM record requires {key!r} member of type {typ}")
        # members added later are optional (records of older versions)
        qemu, hp, maps = (obj.get("qemu", QEMU_BINARY), obj.get("hugepages_added", 0),
                          obj.get("max_map_count_added", 0))
        if not isinstance(qemu, str) or not isinstance(hp, int) or not isinstance(maps, int):
            raise ConfigError("VM record's qemu (str), hugepages_added or max_map_count_added "
                              "(int) is malformed")
        return cls(obj["name"], obj["pid"], obj["start_ticks"], obj["qmp_socket"],
                   obj["agent_socket"], obj["agent_listen"], obj["control_socket"],
                   obj["console_log"], obj["vcpus"], obj["memory_mib"], obj["accel"],
                   tuple(NumaNode.from_json(n) for n in obj["numa"]), obj["run_dir"],
                   float(obj["started"]), qemu, hp, maps)


@dataclass(frozen=True, slots=True)
class GuestResult:
    """What a command run in the guest produced.

    :param argv: the command.
    :param exit_code: its exit status (-1: it could not be started; negative: killed by signal).
    :param stdout: standard output (cut at the runner's bound).
    :param stderr: standard error (cut at the runner's bound).
    :param truncated: whether output was cut.
    :param timed_out: whether the guest killed it at its timeout.
    :param duration_s: run time measured in the guest.
    :param error: why it could not run, if it could not.
    """

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The command ran and exited 0."""
        return self.exit_code == 0 and not self.timed_out and self.error is None


# --------------------------------------------------------------------------- processes


def _proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or ``None`` when the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after the last ')' are plain
    rest = stat[stat.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def _alive(pid: int, start_ticks: int) -> bool:
    return _proc_start_ticks(pid) == start_ticks


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    t = threading.Thread(target=worker, name="unicache-qmp")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def parse_cpus_fast(reply: object) -> dict[int, int]:
    """Validate a ``query-cpus-fast`` reply (QMP reference, "query-cpus-fast": a list of
    ``CpuInfoFast`` with ``cpu-index`` and ``thread-id``) into vCPU index -> host thread id.

    :param reply: the ``return`` value.
    :returns: vCPU index -> thread id.
    :raises ProtocolError: kind ``qmp-reply`` when the reply has the wrong shape.
    """
    if not isinstance(reply, list):
        raise ProtocolError("'query-cpus-fast' reply must be a list", "qmp-reply")
    out: dict[int, int] = {}
    for item in reply:
        if not isinstance(item, dict):
            raise ProtocolError("'query-cpus-fast' reply items must be objects", "qmp-reply")
        for key in ("cpu-index", "thread-id"):
            val = item.get(key)
            if not isinstance(val, int) or isinstance(val, bool) or val < 0:
                raise ProtocolError(f"'query-cpus-fast' reply requires '{key}' member",
                                    "qmp-reply")
        out[item["cpu-index"]] = item["thread-id"]
    return out


class _Waiter:
    """One request waiting for its reply."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.error: UnicacheError | None = None


class _ControlMux:
    """The host end of the control port: requests of all threads share one connection.

    QEMU's socket chardev serves one client at a time, so the connection is closed again as
    soon as no request waits: other processes (``unicache vm exec``) get their turn.
    Replies are matched to requests by ``id``; replies to abandoned requests are dropped.
    """

    def __init__(self, vm: str, path: str) -> None:
        self.vm = vm
        self.path = path
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._waiters: dict[str, _Waiter] = {}

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        rid = str(request["id"])
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(min(5.0, max(0.1, timeout)))
                try:
                    sock.connect(self.path)
                except OSError as err:
                    sock.close()
                    raise VmError("cannot reach the guest command runner", self.vm) from err
                sock.settimeout(None)
                self._sock = sock
                threading.Thread(target=self._reader, args=(sock,), daemon=True,
                                 name=f"unicache-control-{self.vm}").start()
            waiter = self._waiters[rid] = _Waiter(self._sock)
            try:
                self._sock.sendall(line)
            except OSError as err:
                self._waiters.pop(rid, None)
                self._drop(self._sock)
                raise VmError("cannot send to the guest command runner", self.vm) from err
        waiter.event.wait(timeout)
        with self._lock:
            self._waiters.pop(rid, None)
            if not self._waiters and self._sock is not None:
                self._drop(self._sock)
        if waiter.reply is not None:
            return waiter.reply
        if waiter.error is not None:
            raise waiter.error
        raise TimeoutError(f"no reply from the guest in {timeout:.0f} s")

    def _drop(self, sock: socket.socket) -> None:
        """Close ``sock`` (lock held); its reader thread then exits."""
        if self._sock is sock:
            self._sock = None
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _reader(self, sock: socket.socket) -> None:
        buf = b""
        why = "guest command runner closed the connection"
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            # a reply may span many reads: look for line ends only in what is new
            while b"\n" in data and b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(reply, dict):
                    continue
                with self._lock:
                    waiter = self._waiters.get(str(reply.get("id")))
                    if waiter is not None and waiter.sock is sock:
                        waiter.reply = reply
                        waiter.event.set()
            if len(buf) > MAX_REPLY_BYTES:
                why = "guest command runner reply too long"
                break
        with self._lock:
            for waiter in self._waiters.values():
                if waiter.sock is sock and not waiter.event.is_set():
                    waiter.error = VmError(why, self.vm)
                    waiter.event.set()
            self._drop(sock)
        sock.close()


# --------------------------------------------------------------------------- the VM


@dataclass
class _Live:
    """Mutable bits of a started VM (kept off the frozen values)."""

    proc: subprocess.Popen[bytes] | None = None
    record: VmRecord | None = None
    accel: AccelChoice | None = None
    control: _ControlMux | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class QemuVm:
    """One QEMU guest: start it, talk to it, stop it.

    Create with a :class:`VmConfig` and :meth:`start`, or :meth:`attach` to a VM another
    process started (from its registry record).

    :param config: the VM's configuration.
    :param state: the registry directory (default :func:`state_dir`).
    :param progress: told in one line about slow steps (the accelerator probe).
    """

    def __init__(self, config: VmConfig, state: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.state = state or state_dir()
        self.progress = progress
        self._live = _Live()
        self.log = log.getChild(config.name)

    # -- paths ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The VM's name."""
        return self.config.name

    @property
    def run_dir(self) -> Path:
        """``<state>/<name>/``: sockets and logs."""
        return self.state / self.name

    @property
    def record_path(self) -> Path:
        """``<state>/<name>.json``."""
        return self.state / f"{self.name}.json"

    @property
    def agent_socket(self) -> Path:
        """The agent channel's unix socket (the host channel listens on it by default)."""
        if self._live.record is not None:
            return Path(self._live.record.agent_socket)
        return self.config.agent_socket or self.run_dir / "agent.sock"

    @property
    def qmp_socket(self) -> Path:
        """QEMU's QMP socket."""
        return self.run_dir / "qmp.sock"

    @property
    def control_socket(self) -> Path:
        """The command runner's socket (QEMU listens)."""
        return self.run_dir / "control.sock"

    @property
    def console_log(self) -> Path:
        """The guest's serial console log."""
        return self.run_dir / "console.log"

    @property
    def qemu_log(self) -> Path:
        """QEMU's own stdout/stderr."""
        return self.run_dir / "qemu.log"

    @property
    def record(self) -> VmRecord:
        """The registry record of the running VM.

        :raises StateError: when the VM was not started or attached.
        """
        if self._live.record is None:
            raise StateError(f"vm {self.name} has no record", "stopped", "running")
        return self._live.record

    @property
    def pid(self) -> int:
        """QEMU's pid."""
        return self.record.pid

    @property
    def accel(self) -> AccelChoice | None:
        """The accelerator chosen at start (``None`` for an attached VM)."""
        return self._live.accel

    # -- attach ---------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str, state: Path | None = None) -> QemuVm:
        """A handle on a VM started elsewhere, from its registry record.

        :param name: the VM.
        :param state: the registry directory.
        :returns: the handle.
        :raises VmError: when no such VM is running.
        """
        st = state or state_dir()
        rec = read_record(st / f"{check_name(name)}.json")
        if rec is None or not _alive(rec.pid, rec.start_ticks):
            raise VmError("is not running", name)
        vm = cls(VmConfig(rec.name, rec.vcpus, rec.memory_mib, rec.numa,
                          agent_socket=Path(rec.agent_socket), agent_listen=rec.agent_listen),
                 st)
        vm._live.record = rec
        return vm

    # -- command line ---------------------------------------------------------------
    def command_line(self, image: GuestImage, accel: str,
                     qemu: QemuBinary | None = None) -> list[str]:
        """QEMU's argv for this VM (pure: no side effects).

        :param image: the guest image.
        :param accel: ``kvm`` or ``tcg``.
        :param qemu: the QEMU to run (default ``qemu-system-x86_64`` without the colored
            backend); colored nodes not planned yet (:func:`plan_nodes`) are planned for it.
        :returns: the argv.
        """
        c = self.config
        qb = qemu or QemuBinary(QEMU_BINARY, False)
        nodes = c.numa if all(n.backing for n in c.numa) else plan_nodes(c.numa, qb.colored, 0)
        append = ["console=ttyS0", "root=/dev/vda", "rw", "quiet", "panic=-1",
                  f"unicache.name={c.name}", *c.append]
        if c.agent_listen:
            agent_chr = f"socket,id=uc0,path={self.agent_socket},server=on,wait=off"
        else:
            agent_chr = f"socket,id=uc0,path={self.agent_socket},reconnect=1"
        argv = [
            qb.path, "-name", f"guest={c.name},debug-threads=on",
            "-accel", accel, "-smp", str(c.vcpus), "-m", f"{c.memory_mib}M",
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            *(["-bios", QBOOT.name] if QBOOT.exists() else []),
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-append", " ".join(append),
            # snapshot=on: writes go to a temporary file, the base image stays clean
            "-drive", f"file={image.disk},format=raw,if=virtio,snapshot=on",
            "-device", "virtio-serial-pci,id=vser0",
            "-chardev", agent_chr,
            "-device", f"virtserialport,bus=vser0.0,chardev=uc0,name={AGENT_PORT}",
            "-chardev", f"socket,id=ctl0,path={self.control_socket},server=on,wait=off",
            "-device", f"virtserialport,bus=vser0.0,chardev=ctl0,name={CONTROL_PORT}",
            "-qmp", f"unix:{self.qmp_socket},server=on,wait=off",
            "-serial", f"file:{self.console_log}",
        ]
        for n in nodes:
            argv += ["-object", _memdev(n)]
            spec = f"node,nodeid={n.node},memdev=mem{n.node}"
            for part in format_list(n.cpus).split(",") if n.cpus else []:
                spec += f",cpus={part}"
            argv += ["-numa", spec]
        return argv

    # -- start ----------------------------------------------------------------------
    def start(self) -> VmRecord:
        """Start QEMU and register the VM (returns once QMP answers; the guest still boots:
        see :meth:`wait_for_boot`).

        :returns: the registry record.
        :raises ConfigError: when the image is not built or QEMU is missing.
        :raises VmError: when a VM of that name runs already or QEMU fails to start.
        """
        with self._live.lock:
            old = read_record(self.record_path)
            if old is not None and _alive(old.pid, old.start_ticks):
                raise VmError(f"is already running (pid {old.pid})", self.name)
            image = load_image(self.config.image_dir)
            colored = any(n.colors for n in self.config.numa)
            qb = hostcolors.find_qemu(colored)
            if shutil.which(qb.path) is None:
                raise ConfigError(f"{qb.path} not found: install qemu-system-x86")
            if colored:
                self.config = replace(self.config, numa=plan_nodes(
                    self.config.numa, qb.colored, hostcolors.host_page_colors()))
                fallback = [n.node for n in self.config.numa if n.backing == BACKING_HUGEPAGE]
                if fallback:
                    self._say(hostcolors.fallback_line(fallback))
            choice = choose_accel(image.kernel, image.initrd, cache_dir(self.state),
                                  self.config.accel, progress=self.progress)
            self._live.accel = choice
            self.log.info("vm=%s %s", self.name, choice.line())
            argv = self.command_line(image, choice.accel, qb)
            hugepages, maps = self._reserve_host()
            try:
                proc = self._spawn(argv)
            except BaseException:
                hostcolors.release_hugepages(hugepages)
                hostcolors.release_map_count(maps)
                raise
            self._live.proc = proc
            try:
                self._wait_qmp(proc)
                ticks = _proc_start_ticks(proc.pid)
                if ticks is None:
                    raise VmError(f"QEMU exited at start: {self._qemu_error()}", self.name)
                rec = VmRecord(
                    self.name, proc.pid, ticks, str(self.qmp_socket), str(self.agent_socket),
                    self.config.agent_listen, str(self.control_socket), str(self.console_log),
                    self.config.vcpus, self.config.memory_mib, choice.accel, self.config.numa,
                    str(self.run_dir), time.time(), qb.path, hugepages, maps)
                tmp = self.record_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(rec.to_json(), indent=1) + "\n", encoding="utf-8")
                tmp.replace(self.record_path)
            except BaseException:
                self._kill(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
                hostcolors.release_hugepages(hugepages)
                hostcolors.release_map_count(maps)
                raise
            self._live.record = rec
            self.log.info("vm=%s pid=%d started vcpus=%d memory=%dM accel=%s", self.name,
                          proc.pid, self.config.vcpus, self.config.memory_mib, choice.accel)
            return rec

    def _say(self, line: str) -> None:
        """Tell the user one line (through ``progress``, else the log)."""
        if self.progress is not None:
            self.progress(line)
        else:
            self.log.warning("%s", line)

    def _reserve_host(self) -> tuple[int, int]:
        """Reserve what the planned colored nodes need on the host.

        :returns: (2 MiB hugepages added, ``vm.max_map_count`` added).
        :raises ConfigError: when it cannot be had.
        """
        nodes = self.config.numa
        hugepages = sum(n.memory_mib for n in nodes if n.backing == BACKING_HUGEPAGE) // 2
        colored_pages = sum(n.memory_mib for n in nodes if n.backing == BACKING_COLORED) * 256
        added = hostcolors.reserve_hugepages(hugepages)
        try:
            return added, hostcolors.reserve_map_count(colored_pages)
        except BaseException:
            hostcolors.release_hugepages(added)
            raise

    def _spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        try:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir.mkdir(parents=True, mode=0o700)
            self.record_path.unlink(missing_ok=True)
            (self.run_dir / "cmdline").write_text(" ".join(argv) + "\n", encoding="utf-8")
            with open(self.qemu_log, "wb") as out:
                return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=out, start_new_session=True, close_fds=True)
        except OSError as err:
            raise ConfigError(f"cannot start VM {self.name} in {self.run_dir} (set "
                              "UNICACHE_STATE_DIR to a writable directory)") from err

    def _qemu_error(self) -> str:
        try:
            lines = [ln for ln in self.qemu_log.read_text(errors="replace").splitlines()
                     if ln.strip() and "Unable to connect character device uc0" not in ln]
        except OSError:
            return "no output"
        return lines[-1][:300] if lines else "no output"

    def _wait_qmp(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + QEMU_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise VmError(f"QEMU exited with {proc.returncode}: {self._qemu_error()}",
                              self.name)
            if self.qmp_socket.exists():
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(1.0)
                    try:
                        s.connect(str(self.qmp_socket))
                        # QEMU greets every new QMP client; reading it proves it serves
                        if s.recv(1):
                            return
                    except OSError:
                        pass
            time.sleep(0.05)
        raise VmError(f"QEMU did not open its QMP socket in {QEMU_START_TIMEOUT_S:.0f} s",
                      self.name)

    # -- state ----------------------------------------------------------------------
    def is_running(self) -> bool:
        """Whether QEMU still runs (a zombie counts as gone)."""
        rec = self._live.record
        if rec is None:
            return False
        if self._live.proc is not None and self._live.proc.poll() is not None:
            return False
        return _alive(rec.pid, rec.start_ticks)

    def _require_running(self) -> VmRecord:
        if not self.is_running():
            raise StateError(f"vm {self.name} is not running", "stopped", "running")
        return self.record

    # -- QMP ------------------------------------------------------------------------
    async def qmp_async(self, command: str, arguments: Mapping[str, object] | None = None,
                        timeout: float = 10.0) -> object:
        """Run one QMP command (connects, runs, disconnects).

        :param command: e.g. ``query-cpus-fast``.
        :param arguments: its arguments.
        :param timeout: seconds for connect + command.
        :returns: the ``return`` member.
        :raises VmError: when QMP cannot be reached or the command fails.
        """
        rec = self._require_running()
        client = QMPClient(self.name)
        try:
            async with asyncio.timeout(timeout):
                await client.connect(rec.qmp_socket)
                return await client.execute(command, arguments)
        except (_QMPError, OSError, TimeoutError) as err:
            raise VmError(f"QMP {command} failed", self.name) from err
        finally:
            with contextlib.suppress(Exception):
                await client.disconnect()

    def qmp(self, command: str, arguments: Mapping[str, object] | None = None,
            timeout: float = 10.0) -> object:
        """Sync form of :meth:`qmp_async`."""
        return _run_sync(self.qmp_async(command, arguments, timeout))

    async def vcpu_threads_async(self) -> dict[int, int]:
        """vCPU index -> host thread id, from QMP ``query-cpus-fast``.

        :raises VmError: when QMP cannot be reached.
        :raises ProtocolError: when the reply lacks ``cpu-index``/``thread-id``.
        """
        return parse_cpus_fast(await self.qmp_async("query-cpus-fast"))

    def vcpu_threads(self) -> dict[int, int]:
        """Sync form of :meth:`vcpu_threads_async`."""
        return _run_sync(self.vcpu_threads_async())

    # -- the command runner ----------------------------------------------------------
    def _control_call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request to the guest's command runner and wait for its reply."""
        rec = self._require_running()
        with self._live.lock:
            mux = self._live.control
            if mux is None or mux.path != rec.control_socket:
                mux = self._live.control = _ControlMux(self.name, rec.control_socket)
        return mux.call(request, timeout)

    def ping(self, timeout: float = 2.0) -> float | None:
        """Ask the guest's command runner for its uptime.

        :returns: the guest's uptime in seconds, or ``None`` without an answer in time.
        """
        try:
            reply = self._control_call({"id": uuid.uuid4().hex, "op": "ping"}, timeout)
        except (TimeoutError, VmError):
            return None
        up = reply.get("uptime_s")
        return float(up) if isinstance(up, int | float) else None

    def wait_for_boot(self, timeout: float = 120.0) -> float:
        """Wait until the guest's command runner answers.

        :param timeout: seconds to wait.
        :returns: seconds waited.
        :raises VmError: when QEMU exits or the guest does not answer in time (the message
            carries the last console line).
        """
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not self.is_running():
                qemu = self._qemu_error()
                qemu = "" if qemu == "no output" else f"QEMU: {qemu}; "
                raise VmError(f"QEMU exited during boot: {qemu}console: {self.boot_failure()}",
                              self.name)
            if self.ping(timeout=min(2.0, max(0.1, timeout - (time.monotonic() - t0)))) is not None:
                waited = time.monotonic() - t0
                self.log.info("vm=%s booted (runner answered after %.1f s)", self.name, waited)
                return waited
            time.sleep(0.2)
        raise VmError(f"guest did not boot in {timeout:.0f} s; console: {self.boot_failure()}",
                      self.name)

    def boot_failure(self) -> str:
        """The console line that best says why a boot failed (initramfs error, kernel panic),
        else the last two lines."""
        try:
            text = Path(self.record.console_log if self._live.record else self.console_log)
            got = [ln.strip() for ln in text.read_text(errors="replace").splitlines()
                   if ln.strip()]
        except OSError:
            return "no console output"
        for marker in ("UNICACHE-INITRAMFS-FAILED", "Kernel panic", "unicache-init: fatal"):
            hits = [ln for ln in got if marker in ln]
            if hits:
                return hits[-1][:300]
        return " | ".join(got[-2:])[:300] or "no console output"

    def console_tail(self, lines: int = 1) -> str:
        """The last lines of the guest console ('' when there is none)."""
        try:
            text = Path(self.record.console_log if self._live.record else self.console_log)
            got = [ln for ln in text.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(got[-lines:])

    def run_in_guest(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                     timeout: float = 60.0, stdin: str | None = None,
                     cwd: str | None = None) -> GuestResult:
        """Run a command in the guest through the demo/test command runner.

        :param argv: the command.
        :param env: extra environment (on top of PATH, HOME, LANG).
        :param timeout: the guest kills the command after this many seconds.
        :param stdin: text fed to its standard input.
        :param cwd: its working directory (default ``/``).
        :returns: exit code and (bounded) output.
        :raises VmError: when the runner cannot be reached or does not answer in time.
        """
        if not argv:
            raise ConfigError("run_in_guest needs a command")
        req: dict[str, Any] = {"id": uuid.uuid4().hex, "argv": list(argv),
                               "env": dict(env or {}), "timeout": timeout}
        if stdin is not None:
            req["stdin"] = stdin
        if cwd is not None:
            req["cwd"] = cwd
        try:
            reply = self._control_call(req, timeout + 15.0)
        except TimeoutError as err:
            raise VmError(f"no reply to {argv[0]} from the guest", self.name) from err
        code = reply.get("exit")
        if not isinstance(code, int):
            raise ProtocolError("guest command runner reply requires 'exit' member", "bad-reply")
        err_text = reply.get("error")
        return GuestResult(tuple(argv), code, str(reply.get("stdout", "")),
                           str(reply.get("stderr", "")), bool(reply.get("truncated", False)),
                           bool(reply.get("timed_out", False)),
                           float(reply.get("duration_s", 0.0)),
                           str(err_text) if err_text is not None else None)

    # -- stop -----------------------------------------------------------------------
    def _wait_gone(self, rec: VmRecord, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._live.proc is not None and self._live.proc.poll() is not None:
                return True
            if not _alive(rec.pid, rec.start_ticks):
                return True
            time.sleep(0.05)
        return False

    def _kill(self, pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

    def stop(self, timeout: float = 15.0, force: bool = False) -> str:
        """Stop the VM and drop its record; no process is left behind.

        Order: QMP ``system_powerdown`` (the guest init powers off cleanly) and wait up to
        ``timeout``; QMP ``quit``; SIGTERM; SIGKILL.

        :param timeout: seconds for the clean power-off.
        :param force: skip the clean power-off.
        :returns: how it stopped: ``powerdown``, ``quit``, ``sigterm``, ``sigkill`` or
            ``not-running``.
        """
        rec = self._live.record or read_record(self.record_path)
        how = "not-running"
        if rec is not None and _alive(rec.pid, rec.start_ticks):
            self._live.record = rec
            how = self._stop_steps(rec, timeout, force)
            self.log.info("vm=%s stopped (%s)", self.name, how)
        if self._live.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._live.proc.wait(5)
        try:
            self.record_path.unlink()
            # whoever removes the record gives back its reservations (list_vms may have)
            if rec is not None:
                release_host(rec)
        except FileNotFoundError:
            pass
        for sock in (self.qmp_socket, self.control_socket):
            sock.unlink(missing_ok=True)
        if rec is not None and rec.agent_listen:
            Path(rec.agent_socket).unlink(missing_ok=True)
        self._live.record = None
        self._live.control = None
        return how

    def _stop_steps(self, rec: VmRecord, timeout: float, force: bool) -> str:
        steps: list[tuple[str, float]] = [] if force else [("powerdown", timeout)]
        steps += [("quit", 3.0), ("sigterm", 3.0), ("sigkill", 5.0)]
        for how, wait in steps:
            try:
                if how == "powerdown":
                    self.qmp("system_powerdown", timeout=3.0)
                elif how == "quit":
                    self.qmp("quit", timeout=3.0)
                elif how == "sigterm":
                    self._kill(rec.pid, signal.SIGTERM)
                else:
                    self._kill(rec.pid, signal.SIGKILL)
            except (VmError, StateError) as err:
                if not _alive(rec.pid, rec.start_ticks):
                    return how
                self.log.debug("vm=%s %s failed: %s", self.name, how, err)
                continue
            if self._wait_gone(rec, wait):
                return how
        raise VmError(f"QEMU pid {rec.pid} survives SIGKILL", self.name)


# --------------------------------------------------------------------------- registry


def read_record(path: Path) -> VmRecord | None:
    """Read one registry record.

    :returns: the record, or ``None`` when the file is missing or unreadable.
    """
    try:
        return VmRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ConfigError) as err:
        log.warning("ignoring unreadable VM record %s: %s", path, err)
        return None


def release_host(rec: VmRecord) -> None:
    """Give back the hugepages and ``vm.max_map_count`` a stopped VM's start reserved."""
    hostcolors.release_hugepages(rec.hugepages_added)
    hostcolors.release_map_count(rec.max_map_count_added)


def list_vms(state: Path | None = None) -> list[VmRecord]:
    """The running VMs of the registry, by name; records of dead QEMUs are dropped.

    :param state: the registry directory (default :func:`state_dir`).
    :returns: the live records.
    """
    st = state or state_dir()
    out = []
    try:
        paths = sorted(st.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        rec = read_record(path)
        if rec is None:
            continue
        if _alive(rec.pid, rec.start_ticks):
            out.append(rec)
        else:
            log.info("vm=%s pid=%d is gone: dropping its record", rec.name, rec.pid)
            with contextlib.suppress(OSError):
                path.unlink()
                release_host(rec)
    return out
