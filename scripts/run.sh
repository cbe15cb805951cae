#!/usr/bin/env bash
# README command 1: set everything up, then run ctitan's main job: the shipped
# debug sweep (recipes/sweeps/debug.toml) into results/out/debug.db and the
# MoE debug sweep (recipes/sweeps/moe_debug.toml: Qwen3 and DeepSeek-V3
# experts x top_k x load balancing) into results/out/moe_debug.db, and a
# markdown + HTML report of each. A second invocation resumes: finished
# points are skipped. Extra arguments go to both `ctitan sweep`s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CTITAN_BUILD_TARGETS="${CTITAN_BUILD_TARGETS:-ctitan}" "$root/scripts/bootstrap.sh"  # the main job needs ctitan only
cd "$root"
ctitan="${CTITAN_BUILD_DIR:-$root/build}/ctitan"
mkdir -p "$root/results/out"
rc=0
for sweep in debug moe_debug; do
  db="$root/results/out/$sweep.db"
  "$ctitan" sweep "$root/recipes/sweeps/$sweep.toml" --db "$db" "$@" || rc=$?
  "$ctitan" report --db "$db" --format md --out "$root/results/out/${sweep}_report.md"
  "$ctitan" report --db "$db" --format html --out "$root/results/out/${sweep}_report.html"
  echo "results: $db (query with sqlite3, or: $ctitan db ls --db $db)"
  echo "report:  $root/results/out/${sweep}_report.md and .html"
done
exit "$rc"
