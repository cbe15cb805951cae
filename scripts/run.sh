#!/usr/bin/env bash
# README command 1: set everything up, then run ctitan's main job on its
# embedded default (for now: train the Llama 3 debug model and print metrics).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
exec "${CTITAN_BUILD_DIR:-$root/build}/ctitan" train "$@"
