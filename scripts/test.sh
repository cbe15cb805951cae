#!/usr/bin/env bash
# README command 2: set everything up, then run the whole test suite (CTest).
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "${CTITAN_BUILD_DIR:-$root/build}"
# Two tests at once (-j2) each run ctitan with an OpenMP team on the same two
# cores; libgomp's default spin-waiting then starves the other process. Idle
# threads sleep instead (unless the caller chose): TrainRun.LossFalls… beside
# Techniques.CompileAndFloat8… took 310 s together by default, 55 s passive.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec ctest --output-on-failure --timeout 900 -j2 "$@"
