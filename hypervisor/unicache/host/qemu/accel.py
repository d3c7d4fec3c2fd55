"""Choosing QEMU's accelerator (KVM or TCG) by a short boot probe, cached per host boot.

``/dev/kvm`` existing is not enough: on a nested PVM host (docs/images.md "Accelerator") a
stock kernel under ``-accel kvm`` crawls through the instruction emulator and then dies. So
the probe boots the guest image's kernel with its initramfs in probe mode
(``unicache.probe=1``: the initramfs prints ``UNICACHE-PROBE-OK`` and powers off) under KVM
with a short timeout. Reaching userspace means KVM; anything else means TCG. The result is
cached in the state directory, keyed by the host's boot id, host kernel, QEMU version and
guest kernel, so the probe runs once per boot of the host.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from unicache.errors import ConfigError

log = logging.getLogger(__name__)

#: the QEMU binary (x86-64 guests only)
QEMU_BINARY = "qemu-system-x86_64"
#: what the probe initramfs prints on the console once it runs in guest userspace
PROBE_MARKER = "UNICACHE-PROBE-OK"
#: seconds the KVM probe may take; a real KVM host boots to the initramfs in 1-3 s
PROBE_TIMEOUT_S = 20.0
#: name of the cache file inside the state directory
CACHE_FILE = "accel-probe.cache"
#: where the probe result is cached (tmpfs: gone at the next boot anyway); a user who cannot
#: write there gets the VM state directory instead
DEFAULT_CACHE_DIR = Path("/run/unicache")
#: accelerators a user may ask for
ACCELS = ("auto", "kvm", "tcg")


@dataclass(frozen=True, slots=True)
class AccelChoice:
    """The accelerator to run guests with, and why.

    :param accel: ``kvm`` or ``tcg``.
    :param reason: one line saying why (probe result, override, missing /dev/kvm).
    :param cached: whether this came from the per-boot cache.
    """

    accel: str
    reason: str
    cached: bool = False

    def line(self) -> str:
        """The one line shown to users."""
        return f"accelerator: {self.accel} ({self.reason}{', cached' if self.cached else ''})"


def qemu_version(binary: str = QEMU_BINARY) -> str:
    """The first line of ``qemu-system-x86_64 --version``.

    :param binary: the QEMU binary.
    :returns: e.g. ``QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)``.
    :raises ConfigError: when QEMU is not installed.
    """
    path = shutil.which(binary)
    if path is None:
        raise ConfigError(f"{binary} not found: install qemu-system-x86 (make image does)")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise ConfigError(f"{binary} --version failed") from err
    return out.splitlines()[0].strip() if out else "unknown"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return "unknown"


def _cache_key(guest_kernel: Path) -> dict[str, str]:
    return {"boot_id": _boot_id(), "host_kernel": os.uname().release,
            "qemu": qemu_version(), "guest_kernel": str(guest_kernel.resolve())}


def kvm_usable() -> str | None:
    """Whether /dev/kvm can be opened.

    :returns: ``None`` when it can, else why not (one line).
    """
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return "no /dev/kvm"
    except OSError as err:
        return f"/dev/kvm cannot be opened: {err.strerror}"
    os.close(fd)
    return None


def probe_kvm(kernel: Path, initrd: Path, timeout_s: float = PROBE_TIMEOUT_S) -> AccelChoice:
    """Boot ``kernel`` + ``initrd`` in probe mode under KVM and see whether it reaches userspace.

    :param kernel: the guest kernel.
    :param initrd: an initramfs that understands ``unicache.probe=1``.
    :param timeout_s: how long to wait.
    :returns: ``kvm`` when the guest printed the probe marker, else ``tcg`` with the reason.
    """
    why = kvm_usable()
    if why is not None:
        return AccelChoice("tcg", why)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="unicache-probe-") as tmp:
        console = Path(tmp) / "console.log"
        cmd = [QEMU_BINARY, "-accel", "kvm", "-nodefaults", "-no-user-config", "-display", "none",
               "-m", "256", "-smp", "1", "-no-reboot", "-kernel", str(kernel), "-initrd",
               str(initrd), "-append", "console=ttyS0 quiet panic=-1 unicache.probe=1",
               "-serial", f"file:{console}"]
        with open(Path(tmp) / "qemu.log", "wb") as errf:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=errf, stderr=errf)
        ok = False
        try:
            while time.monotonic() - t0 < timeout_s:
                if console.exists() and PROBE_MARKER in console.read_text(errors="replace"):
                    ok = True
                    break
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        took = time.monotonic() - t0
        if ok:
            return AccelChoice("kvm", f"KVM probe reached guest userspace in {took:.1f} s")
        err_lines = (Path(tmp) / "qemu.log").read_text(errors="replace").strip().splitlines()
        if proc.returncode not in (None, 0, -9) and err_lines:
            return AccelChoice("tcg", f"KVM probe failed: {err_lines[-1][:160]}")
        return AccelChoice("tcg", f"KVM probe did not reach guest userspace in {timeout_s:.0f} s")


def cache_dir(fallback: Path) -> Path:
    """Where the probe result is cached: env ``UNICACHE_CACHE_DIR``, else /run/unicache when
    writable, else ``fallback``."""
    env = os.environ.get("UNICACHE_CACHE_DIR")
    if env:
        return Path(env)
    try:
        DEFAULT_CACHE_DIR.mkdir(parents=True, exist_ok=True)
    except OSError:
        return fallback
    return DEFAULT_CACHE_DIR if os.access(DEFAULT_CACHE_DIR, os.W_OK) else fallback


def choose_accel(kernel: Path, initrd: Path, state_dir: Path, requested: str | None = None,
                 timeout_s: float = PROBE_TIMEOUT_S,
                 progress: Callable[[str], None] | None = None) -> AccelChoice:
    """The accelerator to use: ``requested`` (or env ``UNICACHE_ACCEL``) unless ``auto``.

    :param kernel: the guest kernel (the probe boots it).
    :param initrd: the guest initramfs.
    :param state_dir: where the per-boot probe result is cached (see :func:`cache_dir`).
    :param requested: ``auto``, ``kvm`` or ``tcg``; ``None`` reads ``UNICACHE_ACCEL``.
    :param timeout_s: the probe's timeout.
    :param progress: told, in one line, that a probe starts (it takes up to ``timeout_s``).
    :returns: the choice with its reason.
    :raises ConfigError: on an unknown accelerator name, or ``kvm`` without usable /dev/kvm.
    """
    want = (requested or os.environ.get("UNICACHE_ACCEL") or "auto").strip().lower()
    if want not in ACCELS:
        raise ConfigError(f"unknown accelerator {want!r} (choose {', '.join(ACCELS)})")
    if want == "tcg":
        return AccelChoice("tcg", "requested")
    if want == "kvm":
        why = kvm_usable()
        if why is not None:
            raise ConfigError(f"accelerator kvm requested but {why}")
        return AccelChoice("kvm", "requested")
    key = _cache_key(kernel)
    cache = state_dir / CACHE_FILE
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if (isinstance(data, dict) and data.get("key") == key
                and data.get("accel") in ("kvm", "tcg")):
            return AccelChoice(str(data["accel"]), str(data.get("reason", "")), cached=True)
    except (OSError, ValueError):
        pass
    msg = f"probing KVM with a guest boot (up to {timeout_s:.0f} s, once per host boot)"
    log.info("%s", msg)
    if progress is not None:
        progress(msg)
    choice = probe_kvm(kernel, initrd, timeout_s)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, **asdict(choice)}), encoding="utf-8")
        tmp.replace(cache)
    except OSError as err:
        log.warning("cannot cache the accelerator probe in %s: %s", cache, err)
    return choice
