#!/usr/bin/env bash
# Power and A/A false-alarm rate of `ctitan gate --run` on this machine
# (docs/reports.md): ATTEMPTS attempts each of an A/A comparison of one
# build with itself and of full activation checkpointing (the candidate)
# against none, 6 pairs each, one fresh database per attempt in OUT.
#   scripts/gate_power.sh [OUT=/tmp/gate_power] [ATTEMPTS=10] [BIN=build/ctitan]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-/tmp/gate_power}
attempts=${2:-10}
bin=${3:-build/ctitan}
spec=recipes/sweeps/gate_debugmodel.toml
mkdir -p "$out"
for k in $(seq 1 "$attempts"); do
  for side in aa ac; do
    extra=()
    [ "$side" = ac ] && extra=(--candidate-override activation_checkpoint.mode=full)
    set +e
    "$bin" gate --run "$spec" --db "$out/$side$k.db" --seed "$k" "${extra[@]}" >"$out/$side$k.md" 2>"$out/$side$k.err"
    rc=$?
    set -e
    echo "$side $k exit $rc" | tee -a "$out/results.txt"
  done
done
echo "A/A passes (exit 0):      $(grep -c '^aa .* exit 0$' "$out/results.txt") of $attempts"
echo "AC regressions (exit 1):  $(grep -c '^ac .* exit 1$' "$out/results.txt") of $attempts"
