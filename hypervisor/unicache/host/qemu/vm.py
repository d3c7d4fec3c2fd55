"""The VM: :class:`QemuVm` starts a QEMU guest, talks to it, and stops it (no libvirt).

One :class:`QemuVm` per guest. :meth:`QemuVm.start` plans the guest NUMA nodes
(:mod:`.numa`), chooses the accelerator, reserves what colored nodes need on the host
(:mod:`.colored`), runs QEMU (:mod:`.cmdline`, :mod:`.process`) and writes the
VM's registry record (:mod:`.registry`); :meth:`QemuVm.attach` is a handle on a VM another
process started. QMP goes through :mod:`.qmp`, the guest's command runner through
:mod:`.control`. :meth:`QemuVm.stop` leaves no process behind and gives back what the start
reserved.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from unicache.errors import ConfigError, StateError, VmError
from unicache.host.qemu import colored as hostcolors
from unicache.host.qemu import control, process, qmp
from unicache.host.qemu.accel import AccelChoice, cache_dir, choose_accel
from unicache.host.qemu.cmdline import VmConfig, command_line
from unicache.host.qemu.colored import QemuBinary
from unicache.host.qemu.control import ControlMux, GuestResult
from unicache.host.qemu.image import GuestImage, load_image
from unicache.host.qemu.numa import BACKING_COLORED, BACKING_HUGEPAGE, plan_nodes
from unicache.host.qemu.registry import (
    VmRecord,
    check_name,
    read_record,
    release_host,
    state_dir,
    write_record,
)

#: the package's logger: each VM logs to its child ``unicache.host.qemu.<name>``
log = logging.getLogger("unicache.host.qemu")


@dataclass
class _Live:
    """Mutable bits of a started VM (kept off the frozen values)."""

    proc: subprocess.Popen[bytes] | None = None
    record: VmRecord | None = None
    accel: AccelChoice | None = None
    control: ControlMux | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class QemuVm:
    """One QEMU guest: start it, talk to it, stop it.

    Create with a :class:`VmConfig` and :meth:`start`, or :meth:`attach` to a VM another
    process started (from its registry record).

    :param config: the VM's configuration.
    :param state: the registry directory (default :func:`.registry.state_dir`).
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
        if rec is None or not process.alive(rec.pid, rec.start_ticks):
            raise VmError("is not running", name)
        vm = cls(VmConfig(rec.name, rec.vcpus, rec.memory_mib, rec.numa,
                          agent_socket=Path(rec.agent_socket), agent_listen=rec.agent_listen),
                 st)
        vm._live.record = rec
        return vm

    # -- command line ---------------------------------------------------------------
    def command_line(self, image: GuestImage, accel: str,
                     qemu: QemuBinary | None = None) -> list[str]:
        """QEMU's argv for this VM (pure: no side effects; :func:`.cmdline.command_line`).

        :param image: the guest image.
        :param accel: ``kvm`` or ``tcg``.
        :param qemu: the QEMU to run (default ``qemu-system-x86_64`` without the colored
            backend); colored nodes not planned yet (:func:`.numa.plan_nodes`) are planned
            for it.
        :returns: the argv.
        """
        return command_line(self.config, image, accel, qemu, agent_socket=self.agent_socket,
                            control_socket=self.control_socket, qmp_socket=self.qmp_socket,
                            console_log=self.console_log)

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
            if old is not None and process.alive(old.pid, old.start_ticks):
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
                proc = process.spawn(self.name, argv, self.run_dir, self.qemu_log,
                                     stale=(self.record_path,))
            except BaseException:
                hostcolors.release_hugepages(hugepages)
                hostcolors.release_map_count(maps)
                raise
            self._live.proc = proc
            try:
                process.wait_qmp(self.name, proc, self.qmp_socket, self.qemu_log)
                ticks = process.proc_start_ticks(proc.pid)
                if ticks is None:
                    raise VmError(f"QEMU exited at start: {process.qemu_error(self.qemu_log)}",
                                  self.name)
                rec = VmRecord(
                    self.name, proc.pid, ticks, str(self.qmp_socket), str(self.agent_socket),
                    self.config.agent_listen, str(self.control_socket), str(self.console_log),
                    self.config.vcpus, self.config.memory_mib, choice.accel, self.config.numa,
                    str(self.run_dir), time.time(), qb.path, hugepages, maps)
                write_record(self.record_path, rec)
            except BaseException:
                process.kill(proc.pid)
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

    # -- state ----------------------------------------------------------------------
    def is_running(self) -> bool:
        """Whether QEMU still runs (a zombie counts as gone)."""
        rec = self._live.record
        if rec is None:
            return False
        if self._live.proc is not None and self._live.proc.poll() is not None:
            return False
        return process.alive(rec.pid, rec.start_ticks)

    def _require_running(self) -> VmRecord:
        if not self.is_running():
            raise StateError(f"vm {self.name} is not running", "stopped", "running")
        return self.record

    # -- QMP ------------------------------------------------------------------------
    async def qmp_async(self, command: str, arguments: Mapping[str, object] | None = None,
                        timeout: float = 10.0) -> object:
        """Run one QMP command (connects, runs, disconnects; :func:`.qmp.execute`).

        :param command: e.g. ``query-cpus-fast``.
        :param arguments: its arguments.
        :param timeout: seconds for connect + command.
        :returns: the ``return`` member.
        :raises VmError: when QMP cannot be reached or the command fails.
        """
        rec = self._require_running()
        return await qmp.execute(self.name, rec.qmp_socket, command, arguments, timeout)

    def qmp(self, command: str, arguments: Mapping[str, object] | None = None,
            timeout: float = 10.0) -> object:
        """Sync form of :meth:`qmp_async`."""
        return qmp.run_sync(self.qmp_async(command, arguments, timeout))

    async def vcpu_threads_async(self) -> dict[int, int]:
        """vCPU index -> host thread id, from QMP ``query-cpus-fast``.

        :raises VmError: when QMP cannot be reached.
        :raises ProtocolError: when the reply lacks ``cpu-index``/``thread-id``.
        """
        return qmp.parse_cpus_fast(await self.qmp_async("query-cpus-fast"))

    def vcpu_threads(self) -> dict[int, int]:
        """Sync form of :meth:`vcpu_threads_async`."""
        return qmp.run_sync(self.vcpu_threads_async())

    # -- the command runner ----------------------------------------------------------
    def _control_call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request to the guest's command runner and wait for its reply."""
        rec = self._require_running()
        with self._live.lock:
            mux = self._live.control
            if mux is None or mux.path != rec.control_socket:
                mux = self._live.control = ControlMux(self.name, rec.control_socket)
        return mux.call(request, timeout)

    def ping(self, timeout: float = 2.0) -> float | None:
        """Ask the guest's command runner for its uptime.

        :returns: the guest's uptime in seconds, or ``None`` without an answer in time.
        """
        try:
            reply = self._control_call(control.ping_request(), timeout)
        except (TimeoutError, VmError):
            return None
        return control.uptime_of(reply)

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
                qemu = process.qemu_error(self.qemu_log)
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

    def _console(self) -> Path:
        return Path(self.record.console_log if self._live.record else self.console_log)

    def boot_failure(self) -> str:
        """The console line that best says why a boot failed (initramfs error, kernel panic),
        else the last two lines."""
        return process.boot_failure(self._console())

    def console_tail(self, lines: int = 1) -> str:
        """The last lines of the guest console ('' when there is none)."""
        return process.console_tail(self._console(), lines)

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
        req = control.run_request(argv, env, timeout, stdin, cwd)
        try:
            reply = self._control_call(req, timeout + 15.0)
        except TimeoutError as err:
            raise VmError(f"no reply to {argv[0]} from the guest", self.name) from err
        return control.result_of(argv, reply)

    # -- stop -----------------------------------------------------------------------
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
        if rec is not None and process.alive(rec.pid, rec.start_ticks):
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
                    process.kill(rec.pid, signal.SIGTERM)
                else:
                    process.kill(rec.pid, signal.SIGKILL)
            except (VmError, StateError) as err:
                if not process.alive(rec.pid, rec.start_ticks):
                    return how
                self.log.debug("vm=%s %s failed: %s", self.name, how, err)
                continue
            if process.wait_gone(self._live.proc, rec.pid, rec.start_ticks, wait):
                return how
        raise VmError(f"QEMU pid {rec.pid} survives SIGKILL", self.name)
