"""The root daemon and paths another user controls (issue #12), as root on a temporary tree.

The connect-mode channel socket is given to QEMU's user (``_share_socket``); the placeholder
socket keeps a domain startable. Whatever QEMU's user puts at those paths (a link to a
root file, a plain file), root changes the owner of nothing but its own socket.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.libvirt.channel import make_placeholder_socket
from unicache.host.libvirt.source import LibvirtVmSource

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

NOBODY = pwd.getpwnam("nobody")


def _drop() -> None:
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


@pytest.fixture
def qemu_as_nobody() -> Iterator[int]:
    """A process of another user, standing for QEMU (libvirt-qemu)."""
    proc = subprocess.Popen(["sleep", "60"], preexec_fn=_drop)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def tree() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="uc-paths-", dir="/tmp"))
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=True)


def _bound(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def test_the_socket_is_given_to_qemus_user_and_nothing_else_is(
        tree: Path, qemu_as_nobody: int) -> None:
    source = LibvirtVmSource("qemu:///system")  # not connected: only its path handling runs
    sock = tree / "vm.sock"
    _bound(sock)
    source._share_socket(sock, qemu_as_nobody)
    assert (sock.stat().st_uid, sock.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    # a link where the socket was, to a root file: neither the file nor the link changes
    secret = tree / "secret"
    secret.write_text("root's")
    sock.unlink()
    sock.symlink_to(secret)
    source._share_socket(sock, qemu_as_nobody)
    assert secret.stat().st_uid == 0 and os.lstat(sock).st_uid == 0
    # a plain file where the socket was: left as it is
    sock.unlink()
    sock.write_text("plain")
    source._share_socket(sock, qemu_as_nobody)
    assert sock.stat().st_uid == 0


def test_a_placeholder_never_replaces_or_follows_what_is_there(tree: Path) -> None:
    secret = tree / "secret"
    secret.write_text("root's")
    dangling = tree / "dangling.sock"
    dangling.symlink_to(tree / "nowhere")
    # a dangling link reads as absent, but bind() never follows it: nothing is created
    with pytest.raises(OSError):
        make_placeholder_socket(dangling)
    assert not (tree / "nowhere").exists()
    linked = tree / "linked.sock"
    linked.symlink_to(secret)
    assert make_placeholder_socket(linked) is False
    assert secret.read_text() == "root's"
    made = tree / "new.sock"
    assert make_placeholder_socket(made) is True and made.is_socket()
