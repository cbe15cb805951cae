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
# Every test binary works in a scratch folder of its own that it removes when
# its tests pass (tests/test_process_environment.cpp); all of them live in
# one folder per run, removed after a green run, so that what a crashed or
# timed-out test leaves does not pile up either. A red run keeps it.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/ctitan-tests.XXXXXX")"
rc=0
TMPDIR="$scratch" ctest --output-on-failure --timeout 900 -j2 "$@" || rc=$?
if [ "$rc" = 0 ]; then
  rm -rf "$scratch"
else
  echo "test.sh: the tests' scratch files are kept in $scratch (remove it when done)" >&2
fi
exit "$rc"
