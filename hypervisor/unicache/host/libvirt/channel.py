"""The unicache agent channel of a libvirt domain: ``unicache attach`` and placeholder sockets.

``attach`` adds the bind-mode channel (QEMU listens, the daemon dials); a placeholder socket
keeps a domain with an older connect-mode channel startable while the daemon is down.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from unicache.errors import ConfigError
from unicache.host.libvirt.binding import _message, _quiet_errors, libvirt
from unicache.host.libvirt.domain_xml import add_agent_channel, agent_channel_xml, parse_domain


def make_placeholder_socket(path: Path) -> bool:
    """Create a unix socket file nobody listens on, if ``path`` does not exist.

    libvirt refuses to start a domain whose ``mode='connect'`` channel path does not exist;
    QEMU with ``reconnect`` then simply retries until unicache's channel server listens.

    :returns: ``True`` when it created one.
    :raises OSError: when the directory or socket cannot be created.
    """
    if path.exists():
        return False
    if not path.parent.is_dir():
        # QEMU's user must be able to reach the socket: a directory made here is 0755
        # (an existing one is left as it is)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    finally:
        sock.close()
    return True



@dataclass(frozen=True, slots=True)
class AttachResult:
    """What ``unicache attach`` did.

    :param domain: the domain.
    :param socket: the socket QEMU listens on, which the daemon dials (from the live XML;
        ``None`` until the domain runs with the channel: libvirt picks it at each start).
    :param mode: the channel's source mode: ``bind`` (what attach adds), or ``connect`` for
        a channel defined earlier where the daemon listens.
    :param persistent: ``added``, ``present`` or ``transient`` (no persistent config).
    :param live: ``added``, ``present``, ``not running`` or ``impossible: WHY``.
    """

    domain: str
    socket: Path | None
    mode: str
    persistent: str
    live: str


def attach_channel(uri: str, domain: str) -> AttachResult:
    """Add the unicache agent channel to a domain, persistently and live; idempotent.

    The channel is ``mode='bind'`` (:func:`agent_channel_xml`): QEMU listens on a socket
    libvirt makes in its channel directory, and the daemon dials it. A domain with the
    channel already (either mode) is left as it is.

    :param uri: the libvirt URI.
    :param domain: the domain name.
    :raises ConfigError: when libvirt is unreachable, the domain is unknown or the
        persistent definition is refused.
    """
    if libvirt is None:
        raise ConfigError("attach needs libvirt-python (pip install libvirt-python)")
    if not domain or "/" in domain or len(domain) > 64:
        raise ConfigError(f"bad domain name {domain!r}")
    libvirt.registerErrorHandler(_quiet_errors, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise ConfigError(f"cannot connect to libvirt at {uri}: {_message(err)}") from err
    try:
        try:
            dom = conn.lookupByName(domain)
        except libvirt.libvirtError as err:
            raise ConfigError(f"no domain {domain!r} at {uri}") from err
        persistent = "transient"
        mode = "bind"
        if dom.isPersistent():
            inactive = parse_domain(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
            if inactive.agent_mode is not None:
                persistent, mode = "present", inactive.agent_mode
            else:
                try:
                    conn.defineXML(
                        add_agent_channel(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
                    )
                except libvirt.libvirtError as err:
                    raise ConfigError(f"libvirt refused the new definition of {domain}") from err
                persistent = "added"
        live = "not running"
        sock = None
        if dom.isActive():
            running = parse_domain(dom.XMLDesc(0))
            if running.agent_mode is not None:
                live, mode = "present", running.agent_mode
            else:
                try:
                    # QEMU listens: the hot-plugged chardev needs nobody on the other side
                    dom.attachDeviceFlags(agent_channel_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE)
                    live = "added"
                except libvirt.libvirtError as err:
                    live = f"impossible: {_message(err)}"
            sock = parse_domain(dom.XMLDesc(0)).agent_socket
        return AttachResult(domain, sock, mode, persistent, live)
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()
