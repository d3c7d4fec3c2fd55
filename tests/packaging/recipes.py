"""The recipes of docs/agent.md, read from the page, so that the tests run what it says."""

from __future__ import annotations

import re
import shlex

from tests.packaging.chroot import ROOT

DOC = ROOT / "docs/agent.md"


def recipe(name: str) -> str:
    """The fenced code block after ``<!-- recipe: NAME -->`` in docs/agent.md."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert found, f"docs/agent.md has no recipe {name!r}"
    return found.group(1)


def cloud_init_runcmd() -> list[list[str]]:
    """The ``runcmd`` items of the cloud-init recipe (flow sequences of plain or quoted
    words), each as an argv."""
    items = re.findall(r"^  - \[(.*)\]$", recipe("cloud-init"), re.M)
    return [[w.strip().strip('"') for w in item.split(",")] for item in items]


def virt_customize() -> tuple[list[tuple[str, str]], list[str]]:
    """The virt-customize recipe: its ``--upload SRC:DST`` pairs and ``--run-command`` texts."""
    argv = shlex.split(recipe("virt-customize"))
    assert argv[0] == "virt-customize"
    uploads = [tuple(argv[i + 1].split(":", 1)) for i, a in enumerate(argv) if a == "--upload"]
    commands = [argv[i + 1] for i, a in enumerate(argv) if a == "--run-command"]
    return [(src, dst) for src, dst in uploads], commands
