"""The daemon's config file (unicache.config): every key takes exactly its type, and a
wrong one is one ConfigError naming the key (issue #34: ``always_place = "false"`` was
true)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicache.config import CONFIG_KEYS, DaemonConfig, load_config
from unicache.errors import ConfigError
from unicache.policy.place.options import PlaceOptions
from unicache.topology import Unify

#: each key: a good value in TOML, what it loads as, and a value of the wrong type
KEYS: dict[str, tuple[str, object, str]] = {
    "interval_s": ("0.5", 0.5, '"0.5"'),
    "unify": ('"l2"', Unify.L2, '"l3"'),
    "always_place": ("true", True, '"false"'),
    "model": ('"opteron-16"', "opteron-16", "16"),
    "model_file": ('"/etc/unicache/host.toml"', Path("/etc/unicache/host.toml"), "1"),
    "state_dir": ('"/var/lib/unicache"', Path("/var/lib/unicache"), "false"),
    "decision_log": ('"/var/log/u.jsonl"', Path("/var/log/u.jsonl"), "[1]"),
    "log_max_mib": ("8", 8, "8.5"),
    "log_chunks": ("true", True, "1"),
    "dry_run": ("false", False, '"no"'),
    "metrics_port": ("9300", 9300, "true"),
    "connect": ('"qemu:///system"', "qemu:///system", "3"),
    "place": ("{ cpu_overcommit = 2.0 }", PlaceOptions(cpu_overcommit=2.0), "7"),
}


def test_the_test_covers_every_key_a_file_may_hold() -> None:
    assert set(KEYS) == CONFIG_KEYS


def _load(tmp_path: Path, text: str) -> DaemonConfig:
    cfg = tmp_path / "unicache.toml"
    cfg.write_text(text + "\n")
    return load_config(cfg)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_each_key_loads_a_value_of_its_type(tmp_path: Path, key: str) -> None:
    good, expected, _bad = KEYS[key]
    config = _load(tmp_path, f"{key} = {good}")
    assert getattr(config, key) == expected
    # every other key keeps its default
    defaults = DaemonConfig()
    assert all(getattr(config, k) == getattr(defaults, k) for k in CONFIG_KEYS - {key})


@pytest.mark.parametrize("key", sorted(KEYS))
def test_a_value_of_the_wrong_type_is_an_error_naming_its_key(tmp_path: Path, key: str) -> None:
    _good, _expected, bad = KEYS[key]
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"{key} = {bad}")
    message = str(err.value)
    assert message.startswith(f"config {tmp_path / 'unicache.toml'}: ")
    assert key in message and "\n" not in message and "structuring" not in message


def test_a_string_false_is_not_true(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"always_place must be true or false, not 'false'"):
        _load(tmp_path, 'always_place = "false"')


def test_unknown_keys_bounds_and_the_rounds_flag_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'interval'"):
        _load(tmp_path, "interval = 1")
    with pytest.raises(ConfigError, match="unknown key 'rounds'"):  # the demo's flag only
        _load(tmp_path, "rounds = 3")
    with pytest.raises(ConfigError, match=r"interval_s must be within 0.05..3600"):
        _load(tmp_path, "interval_s = 0.01")
    with pytest.raises(ConfigError, match=r"metrics_port must be within 1..65535"):
        _load(tmp_path, "metrics_port = 70000")
    with pytest.raises(ConfigError, match=r"\[place\]: unknown option 'cpus'"):
        _load(tmp_path, "[place]\ncpus = 2")
