#!/usr/bin/env bash
# README command 1: set everything up, then run ctitan's main job on its
# embedded default (for now: train the Llama 3 debug model and print metrics).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
# The debug-model recipe: a few dozen steps with metrics on every step.
exec "${CTITAN_BUILD_DIR:-$root/build}/ctitan" train --job.config_file "$root/recipes/llama3_debugmodel.toml" "$@"
