#!/usr/bin/env bash
# `make demo`: what unicache sees on this machine and what its policies decide on a modelled one.
# (The real-VM demo grows here as the QEMU backend lands; see README "Status".)
set -euo pipefail
cd "$(dirname "$0")/.."
U=.venv/bin/unicache
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "This machine, as sysfs describes it (cache units with --unify l2: each core and its private L2)"
$U topology --unify l2

step "The MFC paper's 16-core Opteron (model opteron-16)"
$U topology --model opteron-16

step "Replay: four VMs reading 256 KiB files with Zipf popularity on opteron-16 (SCU + OBS)"
$U replay --model opteron-16 --trace examples/opteron16-zipf.jsonl

step "Replay: the observations paper's cachebuster/spinloop mix on xeon-5300-quad (OBS-X/L/C)"
$U replay --trace examples/xeon5300-cachebuster-spinloop.jsonl

if .venv/bin/unicache-sim mfc --help >/dev/null 2>&1; then
  step "Simulator: read microbenchmark on opteron-16, 2 and 8 MiB working sets"
  .venv/bin/unicache-sim mfc --model opteron-16 --workload read --dist uniform --ws-mb 2,8
fi
