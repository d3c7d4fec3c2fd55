"""State files: written whole or not at all, readable by their owner only.

Journals (what unicache changed, to undo it), the daemon's status: a crash mid-write
leaves the previous version (written beside it, then renamed over it), and the file is
created 0600, so no other user reads what the host runs or edits what it will restore.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
