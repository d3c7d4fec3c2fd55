"""The density experiment's tenant catalogue and mixes: what ships, what is refused, how mixes
grow."""

from __future__ import annotations

from collections import Counter

import pytest
from unicache_sim.density.mixes import file_heavy, mix_vms, parse_mixes, random_mixes
from unicache_sim.density.tenants import (
    DEFAULT_K,
    CatalogueError,
    Kind,
    Mix,
    SloKind,
    load_catalogue,
    parse_catalogue,
)

GOOD_FLAVOR = """
[flavor.web]
vcpus = 2
memory_mib = 1024
slo = "latency"
utilization = 0.4
[flavor.web.workload]
kind = "files"
files = 8
file_kib = 16
popularity = "zipf"
access = "whole"
"""


def test_the_shipped_catalogue_has_every_tenant_the_issue_names() -> None:
    cat = load_catalogue()
    kinds = {f.name: (f.workload.kind, f.slo) for f in cat.flavors}
    assert kinds == {
        "web": (Kind.FILES, SloKind.LATENCY),
        "analytics": (Kind.FILES, SloKind.LATENCY),
        "kv": (Kind.FILES, SloKind.LATENCY),
        "build": (Kind.MERGESORT, SloKind.THROUGHPUT),
        "stream": (Kind.STREAM, SloKind.THROUGHPUT),
        "idle": (Kind.IDLE, SloKind.NONE),
    }
    web, kv = cat.get("web").workload, cat.get("kv").workload
    assert web.popularity == "zipf" and web.access == "whole" and web.files >= 1000
    assert kv.popularity == "zipf" and kv.access == "random"
    assert cat.get("analytics").workload.access == "whole"
    # latency tenants default to the issue's k = 2
    assert all(f.k == DEFAULT_K for f in cat.flavors if f.latency_critical)


def test_a_flavor_without_k_gets_two() -> None:
    cat = parse_catalogue(GOOD_FLAVOR, "t.toml")
    assert cat.get("web").k == 2.0 and cat.get("web").workload.file_bytes == 16 * 1024


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("flavor = 3", ["t.toml: [flavor]: no flavors (expected [flavor.NAME] tables)"]),
        ("[other]\n" + GOOD_FLAVOR, ["t.toml: table 'other': unknown"]),
        (GOOD_FLAVOR.replace("vcpus = 2", "vcpus = 0"),
         ["'vcpus' must be a whole number within 1..64, not 0"]),
        (GOOD_FLAVOR.replace("vcpus = 2", "vcpus = 2\ncolor = 1"), ["unknown key 'color'"]),
        (GOOD_FLAVOR.replace('slo = "latency"', 'slo = "fast"'),
         ["'slo' must be one of latency, throughput, none"]),
        (GOOD_FLAVOR.replace("utilization = 0.4\n", ""),
         ["a latency tenant needs 'utilization'"]),
        (GOOD_FLAVOR.replace('kind = "files"', 'kind = "files"\nsize_mib = 3'),
         ["unknown key 'size_mib' for kind files"]),
        (GOOD_FLAVOR.replace('popularity = "zipf"', 'popularity = "pareto"'),
         ["'popularity' must be zipf or uniform"]),
        (GOOD_FLAVOR.replace('slo = "latency"\nutilization = 0.4',
                             'slo = "throughput"\nfloor = 0.5'),
         ["a throughput tenant needs a 'mergesort' or 'stream' workload"]),
        (GOOD_FLAVOR.replace("[flavor.web.workload]", "[flavor.web.load]"),
         ["unknown key 'load'", "workload: missing"]),
        ("[flavor.x\n", ["t.toml: not valid TOML"]),
    ],
    ids=[
        "no-flavors",
        "unknown-table",
        "vcpus-out-of-bounds",
        "unknown-flavor-key",
        "unknown-slo",
        "latency-without-utilization",
        "key-of-another-kind",
        "unknown-popularity",
        "batch-slo-on-requests",
        "misnamed-workload",
        "bad-toml",
    ],
)
def test_a_bad_catalogue_is_one_line_per_problem(text: str, lines: list[str]) -> None:
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(text, "t.toml")
    problems = info.value.problems
    assert len(problems) == len(lines), problems
    for line, expected in zip(problems, lines, strict=True):
        assert "\n" not in line and line.startswith("t.toml: ")
        assert expected in line
    assert str(info.value) == "\n".join(problems)


def test_every_problem_is_reported_at_once() -> None:
    text = GOOD_FLAVOR.replace("vcpus = 2", "vcpus = -1").replace("memory_mib = 1024", "")
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(text, "t.toml")
    assert len(info.value.problems) == 2


def test_mixes_are_parsed_and_checked_against_the_catalogue() -> None:
    cat = load_catalogue()
    (mix,) = parse_mixes('[[mix]]\nname = "a"\nflavors = { web = 2, kv = 1 }\n', "m.toml", cat)
    assert mix == Mix("a", (("kv", 1), ("web", 2)))
    with pytest.raises(CatalogueError) as info:
        parse_mixes('[[mix]]\nname = "a"\nflavors = { db = 1, web = 0 }\n', "m.toml", cat)
    assert [p.split(": ", 2)[2] for p in info.value.problems] == [
        "no flavor 'db' in " + cat.source,
        "weight of 'web' must be a whole number within 1..1000",
    ]


def test_a_mix_grows_by_one_vm_in_proportion_to_its_weights() -> None:
    mix = Mix("m", (("kv", 1), ("web", 2)))
    vms = mix_vms(mix, 30)
    assert vms[:6] == ("web", "kv", "web", "web", "kv", "web")
    for n in range(1, 31):
        counts = Counter(vms[:n])
        # within one VM of its share at every size, and N + 1 is N plus one VM
        assert abs(counts["web"] - 2 * n / 3) <= 1 and abs(counts["kv"] - n / 3) <= 1
        assert mix_vms(mix, n) == vms[:n]


def test_random_mixes_are_reproducible_and_independent_of_their_count() -> None:
    cat = load_catalogue()
    five = random_mixes(cat, 5, seed=1)
    assert five == random_mixes(cat, 5, seed=1)
    assert random_mixes(cat, 3, seed=1) == five[:3]
    assert five != random_mixes(cat, 5, seed=2)
    for mix in five:
        assert 2 <= len(mix.weights) <= 4 and all(1 <= w <= 3 for _, w in mix.weights)


def test_a_mix_is_file_heavy_when_two_thirds_of_it_reads_files() -> None:
    cat = load_catalogue()
    assert file_heavy(Mix("a", (("analytics", 1), ("kv", 1), ("web", 1))), cat)
    assert file_heavy(Mix("b", (("build", 1), ("web", 2))), cat)
    assert not file_heavy(Mix("c", (("build", 1), ("web", 1))), cat)
