"""libvirt-python, which is optional (and untyped), and the calls every libvirt module shares.

Without libvirt-python :func:`unicache.host.libvirt.choose.choose_vm_source` falls back to
unicache's own QEMU; everything else here is only reached with it installed.
"""

from __future__ import annotations

import errno
import importlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _optional(module: str) -> Any:
    # libvirt-python is optional (and untyped): without it choose_vm_source falls back
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - exercised only where libvirt-python is missing
        return None


libvirt: Any = _optional("libvirt")
libvirt_qemu: Any = _optional("libvirt_qemu")

log = logging.getLogger(__name__)

#: virDomainEventType names, by value (libvirt-domain.h)
EVENT_NAMES = (
    "defined", "undefined", "started", "suspended", "resumed", "stopped", "shutdown",
    "pmsuspended", "crashed",
)
#: virDomainEventStoppedDetailType names, by value
STOPPED_DETAILS = (
    "shutdown", "destroyed", "crashed", "migrated", "saved", "failed", "from-snapshot",
)


def libvirt_available() -> bool:
    """Whether libvirt-python can be imported."""
    return libvirt is not None


def _quiet_errors(_ctx: object, _err: object) -> None:
    # libvirt prints every error to stderr by default; unicache reports them itself
    return None


_event_lock = threading.Lock()
_event_thread: threading.Thread | None = None


def ensure_event_loop() -> None:
    """Register libvirt's default event loop once per process and run it in a thread.

    It must exist before a connection is opened, or no event (lifecycle, close, keepalive)
    is ever delivered.
    """
    global _event_thread
    with _event_lock:
        if _event_thread is not None:
            return
        libvirt.registerErrorHandler(_quiet_errors, None)
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                if libvirt.virEventRunDefaultImpl() < 0:
                    log.error("libvirt event loop iteration failed")
                    time.sleep(0.1)

        _event_thread = threading.Thread(target=run, name="libvirt-events", daemon=True)
        _event_thread.start()


def _message(err: Any) -> str:
    text = err.get_error_message() if hasattr(err, "get_error_message") else None
    return str(text or err).splitlines()[0]


def _as_oserror(err: Exception, what: str) -> OSError:
    # the live host retries actions that fail with OSError; libvirt errors become those
    return OSError(errno.EAGAIN, f"libvirt: {what}: {_message(err)}")


def _live(call: Callable[..., Any], *args: Any) -> None:
    # VIR_DOMAIN_AFFECT_LIVE; a driver that refuses the flag (libvirt's test driver, some
    # older ones) gets VIR_DOMAIN_AFFECT_CURRENT, which for a running domain is the same
    try:
        call(*args, libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError as err:
        if err.get_error_code() != libvirt.VIR_ERR_INVALID_ARG:
            raise
        call(*args, libvirt.VIR_DOMAIN_AFFECT_CURRENT)


def _tgid(tid: int) -> int:
    try:
        for line in Path(f"/proc/{tid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _vcpu_times(dom: Any) -> dict[int, tuple[frozenset[int], int]]:
    """vCPU -> (its CPUs, CPU time ns) from ``virDomainGetVcpus``; empty if it fails."""
    try:
        infos, maps = dom.vcpus()
    except libvirt.libvirtError as err:
        log.info("domain %s: no vCPU times this round: %s", dom.name(), _message(err))
        return {}
    return {
        int(info[0]): (frozenset(i for i, on in enumerate(cpumap) if on), int(info[2]))
        for info, cpumap in zip(infos, maps, strict=False)
    }


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()
