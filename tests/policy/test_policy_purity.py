"""The policies are pure (no I/O, no clock, no threads) and each cites its paper section."""

from __future__ import annotations

import ast
from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parents[2] / "hypervisor/unicache/policy"
FORBIDDEN_MODULES = {
    "os", "socket", "subprocess", "threading", "asyncio", "time", "datetime", "random",
    "pathlib", "io", "shutil", "signal", "multiprocessing", "ctypes", "libvirt", "logging",
}


def _modules() -> list[Path]:
    """Every module of policy/ and of its packages by technique."""
    paths = sorted(POLICY_DIR.rglob("*.py"))
    assert len(paths) > 40  # the packages were found
    return paths


def test_policy_modules_do_no_io_and_read_no_clock() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"open", "print", "input"}, f"{path.name}: I/O call"
                continue
            else:
                continue
            assert not names & FORBIDDEN_MODULES, f"{path.name} imports {names & FORBIDDEN_MODULES}"


def test_every_policy_module_cites_its_paper_section() -> None:
    for path in _modules():
        if path == POLICY_DIR / "__init__.py" or path.name == "round.py":
            continue
        text = path.read_text()
        assert "§" in text or "Policy:" in text, f"{path.name} cites no paper section"
