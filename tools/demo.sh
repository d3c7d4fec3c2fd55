#!/usr/bin/env bash
# `make demo`: a real VM managed by unicache on this machine, then the modelled machines.
set -euo pipefail
cd "$(dirname "$0")/.."
U=.venv/bin/unicache
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "This machine, as sysfs describes it (cache units with --unify l2: each core and its private L2)"
$U topology --unify l2

.venv/bin/python tools/demo.py

step "Policies on a modelled machine: a reader of 256 KiB files (Zipf) on opteron-16, recorded in the simulator, replayed"
$U replay --model opteron-16 --trace examples/opteron16-zipf.jsonl | tail -n 25
