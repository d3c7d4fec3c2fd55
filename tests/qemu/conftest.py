"""tests/qemu: on-demand tests of the patched QEMU (``make qemu-test``, after ``make qemu``).

They boot a guest with the QEMU that ``make qemu`` builds (a slow build, not part of
``make setup``), so a plain ``pytest tests`` leaves this directory out: its tests are
collected only when this directory (or a file in it) is named on the command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent.resolve()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Ignore this directory unless it was asked for by path."""
    for arg in config.args:
        asked = Path(arg.split("::")[0]).resolve()
        if asked == HERE or HERE in asked.parents:
            return None
    return True
