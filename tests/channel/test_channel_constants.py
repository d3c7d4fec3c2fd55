"""Host and guest mirror the protocol constants of docs/protocol.md; the three must agree."""

from __future__ import annotations

import re
from pathlib import Path

import unicache_agent.protocol as guest
from unicache.channel import protocol as host

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
NAMES = [n for n in dir(host) if n.isupper() and not n.startswith("_") and n != "HOST_CAPS"]
#: the host's own limits: what it accepts from a guest, never what a guest sends or reads
HOST_ONLY = {"MAX_MESSAGES_PER_SECOND", "RATE_BURST", "MAX_CHUNKS_PER_VM",
             "MAX_ERRORS_PER_SECOND", "MAX_CAPS", "GUEST_TYPES"}


def test_every_host_constant_of_the_wire_exists_in_the_guest_with_the_same_value() -> None:
    assert len(NAMES) > 30 and set(NAMES) >= HOST_ONLY
    for name in sorted(set(NAMES) - HOST_ONLY):
        assert getattr(guest, name) == getattr(host, name), name
    # the guest keeps within the host's limits on its own
    assert len(guest.CAPS) + len(guest.SHIM_CAPS) <= host.MAX_CAPS


def test_guest_has_no_constant_the_host_lacks() -> None:
    extra = {n for n in dir(guest) if n.isupper() and not n.startswith("_")} - set(NAMES)
    assert extra == {"CAPS", "SHIM_CAPS"}
    # the guest announces colors/replicas only when its shim enforces them
    assert tuple(guest.CAPS) + tuple(guest.SHIM_CAPS) == host.HOST_CAPS
    assert (guest.CAP_COLORS, guest.CAP_REPLICAS) == guest.SHIM_CAPS


def test_doc_constants_table_matches_the_code() -> None:
    rows = re.findall(r"^\|\s*`([A-Z_0-9]+)`\s*\|\s*`?([^|`]+?)`?\s*\|", DOC.read_text(),
                      re.M)
    documented = {name: value for name, value in rows}
    numeric = [n for n in NAMES if isinstance(getattr(host, n), int | float)
               and not isinstance(getattr(host, n), bool)]
    assert set(numeric) <= set(documented), set(numeric) - set(documented)
    for name in numeric:
        assert float(eval(documented[name], {})) == float(getattr(host, name)), name
    assert documented["PORT_NAME"] == host.PORT_NAME
    for kind in host.ERROR_KINDS:
        assert f"`{kind}`" in DOC.read_text(), kind
