#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds unicache's packages with nfpm, each from one description (`make packages` runs it):
#
#   packaging/build-packages.sh [agent|host|wheel|all] [OUT_DIR]     (default: all into
#                                                                     build/packages)
#   agent  unicache-agent_V-1_ARCH.deb and unicache-agent-V-1.ARCH.rpm
#          (guest-agent/packaging/nfpm.yaml); env UC_SHIM=FILE packages that file as the
#          shim instead of guest-agent/shim/libunicache.so (the broken-shim test does)
#   host   unicache_V-1_ARCH.deb (packaging/host/nfpm.yaml): a virtualenv at
#          /opt/unicache/.venv made with the Debian python3 it runs on
#   wheel  unicache-V-py3-none-any.whl (pip install unicache-V-py3-none-any.whl)
#
# V is the top-level VERSION file. Needs what `make setup` installs (the shim, the
# simulator's wheel, the .venv) and nfpm (NFPM, `make packages` installs it).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHAT=${1:-all}
OUT=$(mkdir -p "${2:-$REPO/build/packages}" && cd "${2:-$REPO/build/packages}" && pwd)
NFPM=${NFPM:-$(ls "$REPO"/build/tools/nfpm-*/nfpm 2>/dev/null | tail -n 1)}
VENV_PY=$REPO/.venv/bin/python
# the host package's venv is made by the python3 it will run on (Debian's, not a pyenv one)
SYSTEM_PY=/usr/bin/python3
export UC_VERSION UC_ARCH UC_STAGE UC_SHIM
UC_VERSION=$(tr -d '[:space:]' < "$REPO/VERSION")
UC_ARCH=$(dpkg --print-architecture)

T0=$(date +%s)
step() { printf '[packages %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf 'packages: error: %s\n' "$*" >&2; exit 1; }

[ -x "$NFPM" ] || die "no nfpm in build/tools: run 'make packages' (it installs nfpm first)"
[ -x "$VENV_PY" ] || die "no .venv: run 'make setup' first"
STAGES=$(mktemp -d "${TMPDIR:-/tmp}/unicache-packages.XXXXXX")
trap 'rm -rf "$STAGES"' EXIT
cd "$REPO"

agent() {
    UC_STAGE=$STAGES/agent
    UC_SHIM=${UC_SHIM:-$REPO/guest-agent/shim/libunicache.so}
    mkdir -p "$UC_STAGE/unicache_agent"
    [ -f "$UC_SHIM" ] || die "no shim at $UC_SHIM: run 'make shim-build'"
    [ -x guest-agent/shim/uc_selftest ] || die "no guest-agent/shim/uc_selftest: run 'make shim-build'"
    for built in uc_bench libuc_null.so libuc_floor.so; do
        [ -f "guest-agent/shim/$built" ] || die "no guest-agent/shim/$built: run 'make shim-build'"
    done
    install -m 0644 guest-agent/unicache_agent/*.py "$UC_STAGE/unicache_agent/"
    install -m 0755 guest-agent/shim/uc_selftest "$UC_STAGE/uc_selftest"
    # the man page is the agent's own --help (help2man), so the two never disagree
    help2man -N --no-discard-stderr -s 8 -S "unicache $UC_VERSION" \
        -n "unicache guest agent: reports file-chunk reads, publishes placement tables" \
        "env PYTHONPATH=$REPO/guest-agent $VENV_PY -m unicache_agent" \
        | sed 's/^\.TH "\?ENV[^ ]*"\? /.TH UNICACHE-AGENT /' | gzip -9n > "$UC_STAGE/unicache-agent.8.gz"
    for packager in deb rpm; do
        "$NFPM" package -f guest-agent/packaging/nfpm.yaml -p "$packager" -t "$OUT/" | grep -v '^using'
    done
    step "agent: $(cd "$OUT" && ls unicache-agent[-_]"$UC_VERSION"*.{deb,rpm} | tr '\n' ' ')"
}

wheel() {
    rm -f "$OUT"/unicache-*.whl
    "$VENV_PY" -m pip wheel -q --no-deps -w "$OUT" ./hypervisor
    rm -rf hypervisor/build hypervisor/*.egg-info
    step "wheel: $(cd "$OUT" && ls unicache-"$UC_VERSION"-*.whl)"
}

host() {
    UC_STAGE=$STAGES/host
    local venv=$UC_STAGE/venv final=/opt/unicache/.venv sim_wheel
    sim_wheel=$(ls tools/sim/target/wheels/unicache_sim-"$UC_VERSION"-*.whl 2>/dev/null | head -n 1)
    [ -n "$sim_wheel" ] || die "no simulator wheel in tools/sim/target/wheels: run 'make sim-build'"
    [ -x "$SYSTEM_PY" ] || die "no $SYSTEM_PY (Debian's python3) to make the venv with"
    ls "$OUT"/unicache-"$UC_VERSION"-*.whl >/dev/null 2>&1 || wheel
    step "host: venv with $($SYSTEM_PY --version) (unicache, unicache-sim, their pinned dependencies)"
    "$SYSTEM_PY" -m venv "$venv" || die "$SYSTEM_PY -m venv failed (apt-get install python3-venv)"
    # the same pins as the development .venv (requirements.txt, the simulator's without
    # their extras: pip takes none in a constraint); libvirt-python is built against the
    # host's libvirt (libvirt-dev)
    sed 's/\[[^]]*\]//' tools/sim/requirements.txt > "$STAGES/sim-constraints.txt"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        -c requirements.txt -c hypervisor/requirements-libvirt.txt -c images/requirements.txt \
        -c "$STAGES/sim-constraints.txt" \
        "$OUT"/unicache-"$UC_VERSION"-*.whl "$sim_wheel" libvirt-python
    # made at $venv, run at $final: the paths pip and venv wrote (script shebangs,
    # activate, pyvenv.cfg) move there, as dh-virtualenv does
    grep -rlI --exclude-dir=__pycache__ "$venv" "$venv" | xargs sed -i "s#$venv#$final#g"
    find "$venv" -name __pycache__ -prune -exec rm -rf {} +
    # bytecode the package owns (removed with it), valid whatever mtime the archive gives
    "$venv/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
        -s "$venv" -p "$final" "$venv/lib" >/dev/null
    mkdir -p "$UC_STAGE/docs"
    cp docs/*.md "$UC_STAGE/docs/"
    "$NFPM" package -f packaging/host/nfpm.yaml -p deb -t "$OUT/" | grep -v '^using'
    step "host: $(cd "$OUT" && ls unicache_"$UC_VERSION"*.deb) ($(du -sh "$venv" | cut -f1) venv)"
}

case "$WHAT" in
    agent) agent ;;
    host) host ;;
    wheel) wheel ;;
    all) rm -f "$OUT"/unicache*.deb "$OUT"/unicache*.rpm; agent; wheel; host ;;
    *) echo "usage: $0 [agent|host|wheel|all] [OUT_DIR]" >&2; exit 2 ;;
esac
