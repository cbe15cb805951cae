#!/usr/bin/env bash
# README command 2: set everything up, then run the whole test suite (CTest).
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "${CTITAN_BUILD_DIR:-$root/build}"
exec ctest --output-on-failure --timeout 900 -j2 "$@"
