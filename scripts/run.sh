#!/usr/bin/env bash
# README command 1: set everything up, then run ctitan's main job: the shipped
# debug sweep (recipes/sweeps/debug.toml) into results/debug.db, and a
# markdown + HTML report of it. A second invocation resumes: finished points
# are skipped. Extra arguments go to `ctitan sweep`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CTITAN_BUILD_TARGETS="${CTITAN_BUILD_TARGETS:-ctitan}" "$root/scripts/bootstrap.sh"  # the main job needs ctitan only
cd "$root"
ctitan="${CTITAN_BUILD_DIR:-$root/build}/ctitan"
mkdir -p "$root/results/out"
db="$root/results/out/debug.db"
rc=0
"$ctitan" sweep "$root/recipes/sweeps/debug.toml" --db "$db" "$@" || rc=$?
"$ctitan" report --db "$db" --format md --out "$root/results/out/debug_report.md"
"$ctitan" report --db "$db" --format html --out "$root/results/out/debug_report.html"
echo "results: $db (query with sqlite3, or: $ctitan db ls --db $db)"
echo "report:  $root/results/out/debug_report.md and .html"
exit "$rc"
