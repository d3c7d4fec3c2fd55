"""Which VMs the daemon manages: libvirt's domains when a libvirtd answers, else its own QEMU."""

from __future__ import annotations

from pathlib import Path

from unicache.errors import ConfigError, UnicacheError
from unicache.host.libvirt.binding import libvirt
from unicache.host.libvirt.source import DEFAULT_URI, LibvirtVmSource
from unicache.host.ports import VmSource


def choose_vm_source(connect_uri: str | None, state_dir: Path) -> tuple[VmSource, str]:
    """libvirt when a libvirtd is reachable, unicache's own QEMU otherwise.

    :param connect_uri: ``--connect URI``; ``None`` tries :data:`DEFAULT_URI` and falls
        back quietly, ``"none"`` means unicache's own QEMU only, an explicit URI that
        cannot be reached is an error.
    :param state_dir: the daemon's state directory (for the fallback).
    :returns: the source and one line saying which and why.
    :raises ConfigError: when an explicit ``--connect`` URI is unreachable.
    """
    if connect_uri == "none":
        return _fallback(state_dir, "--connect none")
    uri = connect_uri or DEFAULT_URI
    if libvirt is None:
        if connect_uri is not None:
            raise ConfigError("--connect needs libvirt-python (pip install libvirt-python)")
        return _fallback(state_dir, "libvirt-python is not installed")
    source = LibvirtVmSource(uri)
    try:
        source.connect()
    except ConfigError as err:
        if connect_uri is not None:
            raise
        return _fallback(state_dir, f"no libvirtd at {uri} ({_short(err)})")
    return source, (
        f"VMs: libvirt domains at {uri} (driver {source.driver}; pinning through vcpupin, "
        "restored on exit)"
    )


def _short(err: UnicacheError) -> str:
    return str(err).rsplit(": ", 1)[-1]


def _fallback(state_dir: Path, why: str) -> tuple[VmSource, str]:
    from unicache.host.qemu.source import QemuRegistrySource

    return QemuRegistrySource(state_dir), f"VMs: unicache's own QEMU ({why})"
