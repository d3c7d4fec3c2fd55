"""The daemon's settings: :class:`DaemonConfig`, read from its TOML file
(:func:`load_config`) and then the command line (:func:`with_overrides`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import cattrs

from unicache.errors import ConfigError
from unicache.policy.place.options import PlaceOptions, place_options_from
from unicache.topology import Unify

#: journals, channel sockets, VM registry (memory on most hosts: tmpfs)
DEFAULT_STATE_DIR = Path("/run/unicache")
#: where decisions go with the default state directory: on disk, not in memory
DEFAULT_DECISION_LOG = Path("/var/log/unicache/decisions.jsonl")
#: the decision log is rotated at this size (MiB); docs/daemon.md
DEFAULT_LOG_MAX_MIB = 64
#: keys a config file may hold (an unknown key is an error, not a warning): every field
#: of :class:`DaemonConfig` but ``rounds``
CONFIG_KEYS = frozenset(
    {
        "interval_s",
        "unify",
        "always_place",
        "model",
        "model_file",
        "state_dir",
        "decision_log",
        "log_max_mib",
        "log_chunks",
        "dry_run",
        "metrics_port",
        "connect",
        "place",
    }
)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Daemon settings (TOML file, then command-line overrides).

    :param interval_s: seconds between rounds.
    :param unify: the unification level.
    :param model: a machine model instead of sysfs (experiments only).
    :param model_file: a model file instead of sysfs.
    :param state_dir: journals, channel sockets, VM registry.
    :param decision_log: the JSON-lines decision log (default: :func:`default_decision_log`).
    :param log_max_mib: the log is rotated at this size; three old files are kept.
    :param log_chunks: log every chunk of every guest report and every chunk decision
        (default: a summary per report and per VM's rules; a guest decides how many
        chunks it reports).
    :param dry_run: decide and log, change nothing.
    :param rounds: stop after this many rounds (tests and the demo); ``None`` = forever.
    :param metrics_port: serve Prometheus metrics on 127.0.0.1:PORT (``None`` = off).
    :param connect: libvirt URI; ``None`` tries qemu:///system, then unicache's own QEMU.
    :param always_place: SCU places every VM, SRM colors every stream, NCC replicates every
        chunk read twice from a remote node and OBS pins every vCPU, without their cost
        models, watches and step-asides (checks the mechanisms where they cannot gain;
        "never slower" no longer holds).
    :param place: the ``[place]`` table: capacity and profile of VM placement
        (``unicache place`` and the libvirt hook; docs/placement.md "Capacity").
    """

    interval_s: float = 1.0
    unify: Unify = Unify.LLC
    model: str | None = None
    model_file: Path | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    decision_log: Path | None = None
    log_max_mib: int = DEFAULT_LOG_MAX_MIB
    log_chunks: bool = False
    dry_run: bool = False
    rounds: int | None = None
    metrics_port: int | None = None
    connect: str | None = None
    always_place: bool = False
    place: PlaceOptions = field(default_factory=PlaceOptions)

    @property
    def log_path(self) -> Path:
        """Where decisions go."""
        return self.decision_log or default_decision_log(self.state_dir)


def default_decision_log(state_dir: Path) -> Path:
    """``DEFAULT_DECISION_LOG`` for the default state directory (``/run`` is memory: a log
    there grows in RAM), else ``decisions.jsonl`` beside the state (tests, experiments)."""
    return DEFAULT_DECISION_LOG if state_dir == DEFAULT_STATE_DIR else state_dir / "decisions.jsonl"


def load_config(path: Path | None) -> DaemonConfig:
    """Read a TOML config; unknown keys and bad values are one ``ConfigError`` each.

    Every value is checked against its key's type (:func:`_schema`): ``always_place =
    "false"`` is an error naming ``always_place``, not true.

    :param path: the file, or ``None`` for defaults.
    """
    if path is None:
        return DaemonConfig()
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read config {path}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config {path} is not valid TOML") from err
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise ConfigError(
            f"config {path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(CONFIG_KEYS))})"
        )
    place = data.pop("place", {})
    if not isinstance(place, dict):
        raise ConfigError(f"config {path}: 'place' must be a table ([place])")
    try:
        config = _SCHEMA.structure(data, DaemonConfig)
    except cattrs.ClassValidationError as err:
        raise _config_error(err, path) from None  # the message names the key and why
    config = replace(config, place=place_options_from(place, f"config {path} [place]"))
    for key, (_flag, low, high) in LIMITS.items():
        value = getattr(config, key)
        if value is not None and not low <= value <= high:
            raise ConfigError(f"config {path}: {key} must be within {low:g}..{high:g}")
    return config


def _strict(kind: type | tuple[type, ...], what: str) -> Callable[[Any, Any], Any]:
    """A hook that takes a value of exactly ``kind`` (TOML's own types: a bool is no
    number here), converted to the field's type."""

    def hook(value: Any, field_type: Any) -> Any:
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            raise TypeError(f"must be {what}, not {value!r}")
        return field_type(value) if field_type not in (Any, str) else value

    return hook


def _schema() -> cattrs.Converter:
    """The converter from a parsed TOML file (but its ``[place]`` table, which
    :func:`~unicache.policy.place.options.place_options_from` checks) to
    :class:`DaemonConfig`: each key its type, strictly (cattrs' own hooks would take
    ``"false"`` for true and ``"8"`` for 8)."""
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(int, _strict(int, "a whole number"))
    conv.register_structure_hook(float, _strict((int, float), "a number"))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(Path, _strict(str, "a path (a string)"))
    conv.register_structure_hook(Unify, _one_of(Unify))
    return conv


def _one_of(enum: type[Enum]) -> Callable[[Any, Any], Any]:
    """A hook that takes one of the enumeration's values, by name, and nothing else."""

    def hook(value: Any, _type: Any) -> Any:
        names = [m.value for m in enum]
        if not isinstance(value, str) or value not in names:
            raise TypeError(f"must be one of {', '.join(map(repr, names))}, not {value!r}")
        return enum(value)

    return hook


def _config_error(err: BaseException, path: Path) -> ConfigError:
    """One line for the first bad key of a file cattrs refused: ``config PATH: KEY must
    be ...``."""
    first = cattrs.transform_error(err, path="", format_exception=lambda e, _t: str(e))[0]
    message, _, where = first.rpartition(" @ ")
    key = where.lstrip(".").removeprefix("config.")
    return ConfigError(f"config {path}: {key} {message}" if key else f"config {path}: {message}")


_SCHEMA = _schema()


#: bounded settings: (command-line flag, lowest, highest)
LIMITS: dict[str, tuple[str, float, float]] = {
    "interval_s": ("--interval", 0.05, 3600),
    "log_max_mib": ("--log-max-mib", 1, 1 << 20),
    "metrics_port": ("--metrics-port", 1, 65535),
}


def with_overrides(config: DaemonConfig, **overrides: Any) -> DaemonConfig:
    """The config with the command-line values that were given (``None`` = not given).

    :raises ConfigError: naming the flag whose value is out of its bounds.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    for key, value in given.items():
        if key in LIMITS:
            flag, low, high = LIMITS[key]
            if not low <= value <= high:
                raise ConfigError(f"{flag} must be within {low:g}..{high:g}, not {value:g}")
    return replace(config, **given)
