"""The recipes of docs/agent.md, read from the page, so that the tests run what it says."""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

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


def cloud_init_package_path() -> str:
    """The path of the cloud-init recipe's package URL (its last ``curl`` word)."""
    return urlsplit(cloud_init_runcmd()[0][-1]).path


def cloud_init_user_data(origin: str) -> str:
    """The cloud-init recipe as user-data, with its package URL's origin (``https://host``)
    replaced by ``origin`` (a test server's ``http://10.0.2.2:PORT``) and nothing else."""
    url = cloud_init_runcmd()[0][-1]
    text = recipe("cloud-init")
    assert text.count(url) == 1, url
    return text.replace(url, origin + cloud_init_package_path())


def virt_customize() -> tuple[list[tuple[str, str]], list[str]]:
    """The virt-customize recipe: its ``--upload SRC:DST`` pairs and ``--run-command`` texts."""
    argv = shlex.split(recipe("virt-customize"))
    assert argv[0] == "virt-customize"
    uploads = [tuple(argv[i + 1].split(":", 1)) for i, a in enumerate(argv) if a == "--upload"]
    commands = [argv[i + 1] for i, a in enumerate(argv) if a == "--run-command"]
    return [(src, dst) for src, dst in uploads], commands


def virt_customize_argv(disk: str) -> list[str]:
    """The virt-customize recipe as an argv, its image (the word after ``-a``) replaced by
    ``disk`` and nothing else (run it where the package is: its ``--upload`` source is the
    package's file name)."""
    argv = shlex.split(recipe("virt-customize"))
    assert argv.count("-a") == 1, argv
    at = argv.index("-a") + 1
    return [*argv[:at], disk, *argv[at + 1:]]
