"""State files: written whole or not at all, readable by their owner only, checked on load.

Journals (what unicache changed, to undo it), the daemon's status: a crash mid-write
leaves the previous version (written beside it, then renamed over it), and the file is
created 0600, so no other user reads what the host runs or edits what it will restore.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.errors import StateError

#: the mode of every state file
PRIVATE = 0o600


def write_private_json(path: Path, payload: Any, indent: int | None = 1) -> None:
    """Replace ``path`` with ``payload`` as JSON, atomically, mode 0600.

    :raises OSError: when the directory or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)  # an older tmp file may have had another mode
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            fd = -1
            json.dump(payload, out, indent=indent)
    finally:
        if fd >= 0:
            os.close(fd)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One state file of a kind and version: saved whole with a checksum, loaded checked.

    Every journal (affinities, libvirt pins, cgroup moves, libvirt shares), the status
    file and the VM registry's records go through one of these, so that a restore never
    acts on a file that is torn, edited, of another kind or of another version. Saved as
    ``{"kind", "version", "sha256", "payload"}``; the checksum is over the payload's
    canonical JSON.

    :param path: the file.
    :param kind: what it holds (e.g. ``affinity-journal``).
    :param version: the payload's format version.
    :param legacy_version: a version written before checkpoints (a bare payload with this
        ``version`` member) that :meth:`load` still accepts, so an upgrade after a crash
        still restores what the older daemon changed.
    :param legacy_unversioned: :meth:`load` also accepts a bare payload without a
        ``version`` member, for a file whose format had none before checkpoints (the VM
        registry's records), so what an older unicache started is still found.
    """

    path: Path
    kind: str
    version: int
    legacy_version: int | None = None
    legacy_unversioned: bool = False

    def save(self, payload: dict[str, Any]) -> None:
        """Replace the file atomically, mode 0600.

        :raises OSError: when it cannot be written.
        """
        envelope = {"kind": self.kind, "version": self.version, "sha256": _digest(payload),
                    "payload": payload}
        write_private_json(self.path, envelope)

    def load(self) -> dict[str, Any] | None:
        """The payload, or ``None`` when there is no file.

        :raises StateError: when the file is unreadable, torn, of another kind or version,
            or its checksum does not match, naming the file and what to do.
        """
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise self._broken("is unreadable") from err
        if not isinstance(data, dict):
            raise self._broken("is not a JSON object")
        if "kind" not in data and self.legacy_unversioned and "version" not in data:
            return data
        if "kind" not in data and self.legacy_version is not None:
            if data.get("version") == self.legacy_version:
                return data
            raise StateError(f"{self.kind} {self.path} has another version", "foreign",
                             f"v{self.version}")
        if data.get("kind") != self.kind:
            raise self._broken(f"holds {data.get('kind')!r}, not a {self.kind}")
        if data.get("version") != self.version:
            raise StateError(f"{self.kind} {self.path} has another version", "foreign",
                             f"v{self.version}")
        payload = data.get("payload")
        if not isinstance(payload, dict) or data.get("sha256") != _digest(payload):
            raise self._broken("does not match its checksum")
        return payload

    def _broken(self, what: str) -> StateError:
        return StateError(
            f"{self.kind} {self.path} {what}; inspect it, then remove it to start afresh "
            "(what it recorded will not be restored)",
            "corrupt",
            "readable",
        )


def _digest(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def status_checkpoint(state_dir: Path) -> Checkpoint:
    """The daemon's status file, ``STATE_DIR/status.json`` (``unicache status``,
    ``explain``, ``place`` and the libvirt hook read it)."""
    return Checkpoint(state_dir / "status.json", "daemon-status", 1)

