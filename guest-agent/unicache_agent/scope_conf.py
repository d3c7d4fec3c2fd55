"""shim.conf: the scopes of libunicache.so as lines of a file, parsed, edited and written
atomically (``unicache-agent scope``; docs/agent.md "Scopes").

The shim reads the file once per process; the format is one directive a line, ``#``
comments::

    off                                  the kill switch (processes that start from now on)
    everywhere                           with /etc/ld.so.preload: every process
    cgroup /system.slice/nginx.service   with /etc/ld.so.preload: this cgroup v2 path or below
    exe /usr/sbin/nginx                  with /etc/ld.so.preload: this /proc/self/exe
    unit nginx.service                   the CLI's bookkeeping: the unit's drop-in sets LD_PRELOAD

Editing keeps every other line byte for byte (comments, lines this version does not
know), so an administrator's notes survive and a package's conffile differs only by the
lines the CLI added.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .errors import UsageError

#: where the package installs the shim: what a drop-in's LD_PRELOAD and /etc/ld.so.preload name
SHIM = "/usr/lib/unicache-agent/libunicache.so"
#: the file the shim reads (inside the root the CLI acts on)
CONF = "/etc/unicache-agent/shim.conf"

#: the kinds of scope; all but ``unit`` need the shim in /etc/ld.so.preload
UNIT, CGROUP, EXE, EVERYWHERE = "unit", "cgroup", "exe", "everywhere"
GLOBAL_KINDS = (CGROUP, EXE, EVERYWHERE)
#: the kill switch's directive (not a scope: it turns every scope off)
OFF = "off"

# systemd's unit name characters (systemd.unit(5)), a service, optionally a template instance
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.service")
_UNIT_NAME_MAX = 255
#: the agent must never run under its own shim (its unit sets UNICACHE_DISABLE=1 too)
_AGENT_UNIT = "unicache-agent.service"


@dataclass(frozen=True)
class Scope:
    """One scope: what the operator named, as a directive of shim.conf."""

    kind: str
    #: the unit name, cgroup path or executable path; "" for everywhere
    value: str = ""

    @property
    def target(self) -> str:
        """How the command line names it: ``unit:NAME``, ``exe:/PATH``, ``everywhere``."""
        return self.kind if self.kind == EVERYWHERE else f"{self.kind}:{self.value}"

    @property
    def line(self) -> str:
        """Its line in shim.conf."""
        return self.kind if self.kind == EVERYWHERE else f"{self.kind} {self.value}"

    @property
    def is_global(self) -> bool:
        """Whether it works through /etc/ld.so.preload (every kind but ``unit``)."""
        return self.kind in GLOBAL_KINDS


def _clean_path(what: str, text: str, target: str) -> str:
    """An absolute path as the kernel reports it (no ``.``, ``..``, ``//``, trailing ``/``)
    and with no blank or control character (it is one word of a line)."""
    if not text.startswith("/"):
        raise UsageError(f"{target}: the {what} must be an absolute path (/...)")
    if any(c.isspace() or ord(c) < 32 or c == "#" for c in text):
        raise UsageError(f"{target}: the {what} may hold no blank, control character or '#'")
    if os.path.normpath(text) != text or text.startswith("//"):
        raise UsageError(f"{target}: write the {what} as the kernel does: "
                         f"{os.path.normpath(text)!r} (no '.', '..', '//' or trailing '/')")
    return text


def parse_target(text: str) -> Scope:
    """A scope from its command-line name.

    :raises UsageError: a name that is no scope, in one line that says what would be.
    """
    if text == EVERYWHERE:
        return Scope(EVERYWHERE)
    kind, sep, value = text.partition(":")
    if not sep or kind not in (UNIT, CGROUP, EXE):
        raise UsageError(f"{text!r} is no scope: use unit:NAME.service, cgroup:/PATH, "
                         f"exe:/ABS/PATH or everywhere")
    if kind == UNIT:
        name = value if "." in value else value + ".service"
        if not _UNIT_NAME.fullmatch(name) or len(name) > _UNIT_NAME_MAX:
            raise UsageError(f"{text}: not a service's name (NAME.service: letters, digits "
                             f"and :_.\\- only; a socket's or timer's program runs in its "
                             f"service)")
        if name == _AGENT_UNIT:
            raise UsageError(f"{text}: the agent never runs under its own shim")
        return Scope(UNIT, name)
    path = _clean_path("cgroup" if kind == CGROUP else "program", value, text)
    if kind == CGROUP and path == "/":
        raise UsageError(f"{text}: the root cgroup holds every process: that is "
                         f"`scope add everywhere` (which checks the shim's measured cost first)")
    return Scope(kind, path)


def _directive(line: str) -> Tuple[str, str]:
    """A line's directive and its argument ("", "" for a blank or comment line)."""
    words = line.split("#", 1)[0].split()
    if not words:
        return "", ""
    return words[0], " ".join(words[1:])


@dataclass
class ShimConf:
    """shim.conf as its lines (each without its newline)."""

    path: str
    lines: List[str]

    @classmethod
    def read(cls, path: str) -> ShimConf:
        """The file at ``path``; a missing one is an empty one (no scope, not off)."""
        try:
            with open(path, encoding="utf-8") as f:
                return cls(path, f.read().splitlines())
        except FileNotFoundError:
            return cls(path, [])

    def scopes(self) -> List[Scope]:
        """The scopes it names, in its order, each once."""
        found: List[Scope] = []
        for line in self.lines:
            scope = _scope_of(line)
            if scope is not None and scope not in found:
                found.append(scope)
        return found

    @property
    def off(self) -> bool:
        """Whether the kill switch is on."""
        return any(_directive(line) == (OFF, "") for line in self.lines)

    def unknown(self) -> List[str]:
        """Lines that are neither blank, comments nor a directive this version knows."""
        return [line for line in self.lines
                if _directive(line)[0] and _directive(line) != (OFF, "")
                and _scope_of(line) is None]

    def has(self, scope: Scope) -> bool:
        return scope in self.scopes()

    def add(self, scope: Scope) -> bool:
        """Append the scope's line unless it is there; whether the file changes."""
        if self.has(scope):
            return False
        self.lines.append(scope.line)
        return True

    def remove(self, scope: Scope) -> bool:
        """Drop every line naming the scope (``unit nginx`` names nginx.service too);
        whether the file changes."""
        kept = [line for line in self.lines if _scope_of(line) != scope]
        changed = len(kept) != len(self.lines)
        self.lines = kept
        return changed

    def set_off(self, off: bool) -> bool:
        """Add or drop the kill switch's line; whether the file changes."""
        if off == self.off:
            return False
        if off:
            self.lines.append(OFF)
        else:
            self.lines = [line for line in self.lines if _directive(line) != (OFF, "")]
        return True

    def write(self) -> None:
        """Replace the file by a new one renamed over it (mode 0644, root's when run as
        root): the shim of a process starting meanwhile reads the old file or the new one,
        never half of one."""
        write_atomically(self.path, "".join(line + "\n" for line in self.lines))


def _scope_of(line: str) -> Optional[Scope]:
    """The scope a line of shim.conf names (None: no scope, or one the CLI would refuse)."""
    word, arg = _directive(line)
    if word == EVERYWHERE and not arg:
        return Scope(EVERYWHERE)
    if word in (UNIT, CGROUP, EXE) and arg and " " not in arg:
        try:
            return parse_target(f"{word}:{arg}")
        except UsageError:
            return None
    return None


def write_atomically(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it
    over ``path``; the directory is made (0755) when missing. A failure leaves ``path`` as
    it was and no temporary file."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if os.geteuid() == 0:  # the shim trusts only a file of root's
                os.fchown(f.fileno(), 0, 0)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)
