"""Hardened systemd services that run under the shim, for the systemd guest's package test
(tests/integration/test_agent_package_vm.py, which adds them to the boot it already makes).

Each service has systemd's usual hardening (``SystemCallFilter=@system-service``,
``MemoryDenyWriteExecute=yes``, ``ProtectSystem=strict`` and more, a different set each), is
scoped with ``unicache-agent scope add unit:NAME`` and runs a python3 reader that reads one
file with ``os.read``, ``os.pread``, ``os.readv``, ``os.preadv`` and ``os.sendfile`` (libc's
read, pread64, readv, preadv, sendfile: calls the shim interposes), checks every byte
against the file's ``mmap`` (which the shim never sees) and prints, one flushed line each,
whether libunicache.so is mapped in it and which calls gave the file's bytes. A shim that
makes a system call the filter forbids gets the process killed by SIGSYS (the filter's
default action): the service fails and the lines stop there.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SHIM = "/usr/lib/unicache-agent/libunicache.so"
DIR = "/srv/uc-hardened"
DATA = f"{DIR}/data"
READER = f"{DIR}/reader.py"
#: a size no buffer divides: every reader ends on a short read
DATA_BYTES = (1 << 20) + 12345
#: the reader's last line when every call gave the file's bytes and the shim is mapped
ALL_OK = "uc-hardened all=ok"

READER_PY = r'''"""Reads one file with libc's read, pread64, readv, preadv and sendfile; checks each
against the file's mmap; prints a line per step (the journal keeps what a killed process
said up to its death); exits 0 only when all match and libunicache.so is mapped."""
import mmap
import os
import sys


def say(*words):
    print("uc-hardened", *words, flush=True)


def by_read(fd, size):
    os.lseek(fd, 0, os.SEEK_SET)
    got = bytearray()
    while True:
        b = os.read(fd, 70001)
        if not b:
            return bytes(got)
        got += b


def by_pread(fd, size):
    return b"".join(os.pread(fd, 99991, off) for off in range(0, size, 99991))


def by_readv(fd, size):
    os.lseek(fd, 0, os.SEEK_SET)
    bufs = [bytearray(4096), bytearray(100000), bytearray(7)]
    got = bytearray()
    while True:
        n = os.readv(fd, bufs)
        if n == 0:
            return bytes(got)
        got += b"".join(bufs)[:n]


def by_preadv(fd, size):
    got = bytearray()
    for off in range(0, size, 150000):
        bufs = [bytearray(50000), bytearray(100000)]
        n = os.preadv(fd, bufs, off)
        got += b"".join(bufs)[:n]
    return bytes(got)


def by_sendfile(fd, size):
    r, w = os.pipe()
    got = bytearray()
    off = 0
    while off < size:
        n = os.sendfile(w, fd, off, min(32768, size - off))
        if n == 0:
            break
        off += n
        while n:
            chunk = os.read(r, n)
            n -= len(chunk)
            got += chunk
    os.close(r)
    os.close(w)
    return bytes(got)


def main(path):
    with open("/proc/self/maps") as f:
        mapped = any("libunicache.so" in line for line in f)
    say("shim=" + ("mapped" if mapped else "absent"),
        "LD_PRELOAD=" + os.environ.get("LD_PRELOAD", ""), "uid=%d" % os.getuid())
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
        want = bytes(m)
    good = mapped
    for name, how in (("read", by_read), ("pread", by_pread), ("readv", by_readv),
                      ("preadv", by_preadv), ("sendfile", by_sendfile)):
        ok = how(fd, size) == want
        good = good and ok
        say("%s=%s" % (name, "ok" if ok else "WRONG"))
    say("all=" + ("ok" if good else "WRONG"), "bytes=%d" % size)
    return 0 if good else 1


sys.exit(main(sys.argv[1]))
'''

#: every service has these (the brief's three) and more of its own below
COMMON = ("SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes",
          "ProtectSystem=strict")


@dataclass(frozen=True)
class HardenedUnit:
    name: str
    #: what it adds to COMMON, and why
    why: str
    extra: tuple[str, ...]

    def text(self) -> str:
        lines = ["[Unit]", f"Description=unicache test: a hardened reader under the shim "
                 f"({self.why})", "", "[Service]", "Type=oneshot",
                 # a reader that hangs fails here, not in the test's runner
                 "TimeoutStartSec=120",
                 f"ExecStart=/usr/bin/python3 {READER} {DATA}", *COMMON, *self.extra]
        return "\n".join(lines) + "\n"


UNITS = (
    HardenedUnit("uc-hard-plain.service", "the usual set, run as root",
                 ("NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectHome=yes",
                  "SystemCallArchitectures=native", "RestrictRealtime=yes",
                  "LockPersonality=yes")),
    # a user of its own (its own counters file), a private /dev (with /dev/shm), and none of
    # @resources: sched_setaffinity, set_mempolicy, move_pages kill it
    HardenedUnit("uc-hard-dynuser.service", "a dynamic user, private /dev, no @resources",
                 ("DynamicUser=yes", "PrivateDevices=yes", "RestrictAddressFamilies=AF_UNIX",
                  "ProtectKernelTunables=yes", "ProtectControlGroups=yes",
                  "SystemCallFilter=~@privileged @resources")),
    # @system-service allows process_vm_readv (it is in @ipc, systemd 252); docker's default
    # seccomp profile does not, and a service may deny it too: the shim must not need it
    HardenedUnit("uc-hard-novm.service", "no process_vm_readv, no capabilities, /proc pids only",
                 ("CapabilityBoundingSet=", "RestrictNamespaces=yes", "ProtectProc=invisible",
                  "ProcSubset=pid", "SystemCallFilter=~process_vm_readv process_vm_writev")),
)

#: run a shell command in the guest, with optional stdin: (exit code, stdout, stderr)
Runner = Callable[[str, str | None], tuple[int, str, str]]


@dataclass
class UnitSeen:
    """One service's run, as the guest reported it."""

    start_exit: int
    start_err: str
    #: Result ("success", "exit-code", "signal" for a SIGSYS, ...), and ExecMainCode and
    #: ExecMainStatus (reset to 0 once a oneshot is inactive: for the record only)
    props: dict[str, str]
    #: what the reader printed (its journal)
    output: str
    #: its drop-in, as the guest has it
    dropin: str


@dataclass
class HardenedSeen:
    """What the boot saw of the hardened services (filled by :func:`run_hardened_units`)."""

    reached: bool = False
    scope_add: tuple[int, str, str] = (-1, "", "")
    failed: str = ""
    units: dict[str, UnitSeen] = field(default_factory=dict)


def _put(run: Runner, path: str, text: str) -> None:
    data = base64.b64encode(text.encode()).decode()
    code, _, err = run(f"mkdir -p {path.rsplit('/', 1)[0]} && base64 -d > {path} && "
                       f"chmod 0644 {path}", data)
    assert code == 0, f"{path}: {err}"


def _journal(run: Runner, unit: str) -> str:
    """The service's journal, once it holds the reader's last line (journald may write the
    stream after the process ended) or 15 s passed."""
    deadline = time.monotonic() + 15.0
    while True:
        _, out, _ = run(f"journalctl -u {unit} -o cat --no-pager | grep '^uc-hardened'", None)
        if "all=" in out or time.monotonic() > deadline:
            return out
        time.sleep(1.0)


def run_hardened_units(run: Runner, seen: HardenedSeen) -> None:
    """Install the reader, its file and the services; scope each with the CLI; start each
    (after the scope was added) and record what happened in ``seen``."""
    _put(run, READER, READER_PY)
    code, _, err = run(f"head -c {DATA_BYTES} /dev/urandom > {DATA} && chmod 0644 {DATA} && "
                       f"chmod 0755 {DIR}", None)
    assert code == 0, err
    for unit in UNITS:
        _put(run, f"/etc/systemd/system/{unit.name}", unit.text())
    code, _, err = run("systemctl daemon-reload", None)
    assert code == 0, err
    seen.reached = True
    seen.scope_add = run("unicache-agent scope add "
                         + " ".join(f"unit:{u.name.removesuffix('.service')}" for u in UNITS),
                         None)
    for unit in UNITS:
        start_exit, _, start_err = run(f"systemctl start {unit.name}", None)
        _, props, _ = run(f"systemctl show -p Result -p ExecMainCode -p ExecMainStatus "
                          f"{unit.name}", None)
        _, dropin, _ = run(f"cat /etc/systemd/system/{unit.name}.d/50-unicache-shim.conf",
                           None)
        seen.units[unit.name] = UnitSeen(
            start_exit, start_err,
            dict(line.split("=", 1) for line in props.splitlines() if "=" in line),
            _journal(run, unit.name), dropin)
    seen.failed = run("systemctl --failed --plain --no-legend", None)[1].strip()


def remove_hardened_units(run: Runner) -> None:
    """Take the services and the reader away again, but not their drop-ins and shim.conf's
    lines: removing the package must (the test checks it did)."""
    names = " ".join(u.name for u in UNITS)
    code, _, err = run(f"systemctl reset-failed {names} 2>/dev/null; "
                       f"rm -f $(for u in {names}; do echo /etc/systemd/system/$u; done) && "
                       f"rm -rf {DIR} && systemctl daemon-reload", None)
    assert code == 0, err
