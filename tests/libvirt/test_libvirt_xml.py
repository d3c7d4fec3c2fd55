"""Domain XML and QMP replies are checked at the boundary (no libvirtd needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from unicache.errors import ProtocolError
from unicache.host.libvirt.domain_xml import (
    AGENT_PORT_NAME,
    add_agent_channel,
    parse_domain,
    parse_query_cpus_fast,
)

DOMAIN = f"""<domain type='kvm' id='7'>
  <name>web1</name>
  <uuid>8f1c7e44-2b1d-4a8e-9f57-0c1d2e3f4a5b</uuid>
  <memory unit='KiB'>4194304</memory>
  <currentMemory unit='GiB'>2</currentMemory>
  <vcpu placement='static' current='3'>4</vcpu>
  <cputune>
    <vcpupin vcpu='1' cpuset='4-7,^5'/>
    <vcpupin vcpu='0' cpuset='0-3'/>
    <emulatorpin cpuset='8'/>
  </cputune>
  <numatune><memory mode='preferred' nodeset='1'/></numatune>
  <cpu><numa>
    <cell id='0' cpus='0-1' memory='1' unit='GiB'/>
    <cell id='1' cpus='2-3' memory='1048576'/>
    <cell id='2' memory='512' unit='MiB'/>
  </numa></cpu>
  <devices>
    <controller type='virtio-serial' index='0'/>
    <channel type='unix'>
      <source mode='bind' path='/var/lib/libvirt/qemu/channel/target/org.qemu.guest_agent.0'/>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <channel type='unix'>
      <source mode='connect' path='/var/lib/unicache/channels/web1.sock'/>
      <target type='virtio' name='{AGENT_PORT_NAME}'/>
    </channel>
  </devices>
  <seclabel type='dynamic' model='dac' relabel='yes'><label>+64055:+108</label></seclabel>
</domain>"""


def test_parse_domain_reads_everything_unicache_needs() -> None:
    xml = parse_domain(DOMAIN)
    assert (xml.name, xml.driver, xml.vcpus) == ("web1", "kvm", 3)
    assert xml.uuid == "8f1c7e44-2b1d-4a8e-9f57-0c1d2e3f4a5b"
    assert xml.memory_bytes == 2 << 30  # currentMemory wins over memory
    assert xml.agent_socket == Path("/var/lib/unicache/channels/web1.sock")
    assert xml.agent_mode == "connect"
    assert xml.vcpupin == ((0, frozenset({0, 1, 2, 3})), (1, frozenset({4, 6, 7})))
    assert xml.emulatorpin == frozenset({8})
    assert xml.numatune is not None
    assert (xml.numatune.mode, xml.numatune.nodeset) == ("preferred", frozenset({1}))
    assert [(c.id, sorted(c.vcpus), c.memory_bytes) for c in xml.cells] == [
        (0, [0, 1], 1 << 30), (1, [2, 3], 1 << 30), (2, [], 512 << 20)
    ]
    assert xml.has_virtio_serial


def test_the_qemu_guest_agent_channel_is_not_taken_for_unicaches() -> None:
    text = DOMAIN.replace(AGENT_PORT_NAME, "org.example.other")
    assert parse_domain(text).agent_socket is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<domain", "does not parse"),
        ("<network><name>x</name></network>", "expected <domain>"),
        ("<domain type='kvm'/>", "requires a 'name'"),
        ("<domain><name>x</name><vcpu>two</vcpu></domain>", "bad vcpu count"),
        ("<domain><name>x</name><memory unit='parsec'>1</memory></domain>", "bad memory"),
        ("<domain><name>x</name><cputune><vcpupin vcpu='0' cpuset='3-1'/></cputune></domain>",
         "bad cpuset"),
    ],
    ids=["truncated", "not-a-domain", "no-name", "bad-vcpu", "bad-unit", "reversed-cpuset"],
)
def test_malformed_domain_xml_is_one_protocol_error(text: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        parse_domain(text)
    assert info.value.kind == "bad-xml"


def test_add_agent_channel_is_bind_mode_without_a_path_and_idempotent() -> None:
    # QEMU listens on a socket libvirt makes; the daemon dials it (issue #12: the root
    # daemon creates no file where QEMU can reach)
    bare = "<domain type='qemu'><name>a</name><devices/></domain>"
    once = add_agent_channel(bare)
    twice = add_agent_channel(once)
    assert once.count(AGENT_PORT_NAME) == 1 and twice.count(AGENT_PORT_NAME) == 1
    parsed = parse_domain(twice)
    assert (parsed.agent_socket, parsed.agent_mode) == (None, "bind")
    assert "path=" not in once
    # a channel defined earlier in connect mode is kept as it is
    assert add_agent_channel(DOMAIN).count(AGENT_PORT_NAME) == 1
    assert parse_domain(add_agent_channel(DOMAIN)).agent_mode == "connect"


def _reply(cpus: list[object]) -> str:
    return json.dumps({"return": cpus, "id": "libvirt-1"})


def test_query_cpus_fast_gives_index_to_thread() -> None:
    reply = _reply([
        {"cpu-index": 0, "thread-id": 4101, "props": {"node-id": 0}, "target": "x86_64"},
        {"cpu-index": 1, "thread-id": 4102, "props": {"node-id": 1}, "target": "x86_64"},
    ])
    assert parse_query_cpus_fast(reply) == {0: 4101, 1: 4102}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("not json", "is not JSON"),
        (json.dumps({"error": {"class": "GenericError"}}), "requires a 'return' list"),
        (_reply(["cpu"]), "must be an object"),
        (_reply([{"cpu-index": 0}]), "requires an integer 'thread-id'"),
        (_reply([{"cpu-index": 0, "thread-id": "12"}]), "requires an integer 'thread-id'"),
        (_reply([{"cpu-index": True, "thread-id": 12}]), "requires an integer 'cpu-index'"),
        (_reply([{"cpu-index": 0, "thread-id": -1}]), "requires an integer 'thread-id'"),
    ],
    ids=["not-json", "error-reply", "not-object", "missing-tid", "string-tid", "bool-index",
         "negative-tid"],
)
def test_bad_query_cpus_fast_replies_name_the_member(reply: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as info:
        parse_query_cpus_fast(reply)
    assert info.value.kind == "bad-qmp"


def test_placeholder_socket_lets_a_domain_start_without_the_daemon(tmp_path: Path) -> None:
    from unicache.host.libvirt.channel import make_placeholder_socket

    path = tmp_path / "channels" / "vm.sock"
    assert make_placeholder_socket(path)
    assert path.is_socket()
    assert oct(os.stat(path.parent).st_mode & 0o777) == "0o755"
    assert not make_placeholder_socket(path)  # idempotent
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    assert make_placeholder_socket(shared / "vm.sock")
    assert oct(os.stat(shared).st_mode & 0o7777) == "0o1777"  # an existing dir is left alone
