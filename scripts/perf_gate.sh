#!/usr/bin/env bash
# The pull-request performance gate as one command, run from inside a git
# checkout (the same flow as examples/ci/perf-gate.yml):
#
#   scripts/perf_gate.sh BASE_REF HEAD_REF SPEC [--out DIR] [--pairs N] [--losses] [-- GATE_ARGS...]
#
#   1. builds BASE_REF and HEAD_REF in one scratch worktree (OUT/src), each
#      commit once: its binary is kept as OUT/bin/ctitan-<sha>, and the
#      second build is incremental (ninja rebuilds what differs, ccache
#      serves what another checkout compiled before);
#   2. runs `ctitan gate --run SPEC` with the two binaries: paired,
#      interleaved runs into OUT/gate.db as sweeps base-<sha12> and
#      head-<sha12>, each run recording the build that made it;
#   3. writes OUT/verdict.md (the PR comment) and OUT/report.html (the
#      sweeps' report, with the paired speedups).
#
# --losses also requires bit-identical losses step by step (a refactor's
# check); differing losses make the exit code 1 and name the first step.
# GATE_ARGS go to `ctitan gate` (e.g. --threshold tps=8% --seed 3).
# The gate and the report run with BASE's binary: the pull request does not
# judge itself.
#
# Exit code: the gate's. 0 pass, 1 regression (or losses differ), 3 needs
# action (inconclusive, missing data), 4 improved (refresh the baseline),
# 2 bad input (unknown ref, missing spec, a build that fails).
set -euo pipefail
usage="usage: scripts/perf_gate.sh BASE_REF HEAD_REF SPEC [--out DIR] [--pairs N] [--losses] [-- GATE_ARGS...]"
die() { echo "perf_gate: $*" >&2; exit 2; }
log() { echo "[perf_gate] $*"; }

[ $# -ge 3 ] || die "$usage"
# The repository is the one the current directory is in (as for git itself).
root=$(git rev-parse --show-toplevel 2>/dev/null) || die "$(pwd) is not in a git checkout; run it from a clone of the repository"
base_ref=$1 head_ref=$2 spec=$3
shift 3
out="$root/build/perf-gate" pairs=6 losses=0 gate_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    --pairs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--pairs needs a positive whole number, got '${2:-}'"; pairs=$2; shift 2 ;;
    --losses) losses=1; shift ;;
    --) shift; gate_args=("$@"); break ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
done

resolve() { git -C "$root" rev-parse --verify --quiet "$1^{commit}" || die "'$1' is not a commit of $root (fetch it first: git fetch origin $1)"; }
base_sha=$(resolve "$base_ref")
head_sha=$(resolve "$head_ref")
[ -f "$spec" ] || die "sweep spec '$spec' not found"
spec=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
[ -x "$root/.venv/bin/python" ] || die "LibTorch is not set up in $root/.venv; run scripts/bootstrap.sh first"
case $out in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)

# One scratch worktree for every build. Its .venv points at this checkout's
# (LibTorch), and its build folder sits where bootstrap puts one (src/build):
# with ccache's base_dir at the source folder (CMakeLists.txt) the compiler
# sees the same relative paths as in any clone, so the cache hits.
wt="$out/src"
if [ ! -e "$wt/.git" ]; then
  git -C "$root" worktree prune
  log "scratch worktree $wt"
  git -C "$root" worktree add --detach --force -q "$wt" "$base_sha"
fi
[ -e "$wt/.venv" ] || ln -s "$root/.venv" "$wt/.venv"

# The compilers of the build ccache was filled from (this checkout's, else
# the one beside this script): CMake otherwise takes whichever nvcc comes
# first on PATH, and a wrapper in another folder changes the CUDA include
# path on every compile line, so nothing would hit.
same_compilers=()
for cache in "$root/build/CMakeCache.txt" "$(dirname "${BASH_SOURCE[0]}")/../build/CMakeCache.txt"; do
  [ -f "$cache" ] || continue
  for var in CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER; do
    val=$(sed -n "s/^$var:[A-Z]*=//p" "$cache")
    [ -n "$val" ] && same_compilers+=("-D$var=$val")
  done
  break
done

build() {  # build SHA -> prints the binary's path
  local sha=$1 bin="$out/bin/ctitan-$1"
  if [ -x "$bin" ]; then
    log "ctitan at ${sha:0:12}: built before ($bin)" >&2
  else
    log "building ctitan at ${sha:0:12} ($(git -C "$root" log -1 --format=%s "$sha" | cut -c1-60))" >&2
    git -C "$wt" checkout --detach --force -q "$sha"
    git -C "$wt" clean -fdq  # untracked files would mark the build dirty (ignored ones stay)
    local t0=$SECONDS logf="$out/build-${sha:0:12}.log"
    if ! { [ -f "$wt/build/build.ninja" ] ||
             cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${same_compilers[@]}" \
               -DCTITAN_BUILD_TESTS=OFF -DCTITAN_BUILD_BENCHMARKS=OFF >"$logf" 2>&1; } ||
       ! cmake --build "$wt/build" --target ctitan -- -j"$(nproc)" >>"$logf" 2>&1; then
      tail -n 20 "$logf" >&2
      die "building ${sha:0:12} failed; the whole log is $logf"
    fi
    cp "$wt/build/ctitan" "$bin.tmp" && mv "$bin.tmp" "$bin"
    log "built ${sha:0:12} in $((SECONDS - t0)) s" >&2
  fi
  echo "$bin"
}
base_bin=$(build "$base_sha")
head_bin=$(build "$head_sha")

base_sweep="base-${base_sha:0:12}" head_sweep="head-${head_sha:0:12}"
log "gate: $pairs pairs of $(basename "$spec"), results in $out/gate.db"
set +e
"$base_bin" gate --run "$spec" --db "$out/gate.db" --pairs "$pairs" \
  --baseline-bin "$base_bin" --candidate-bin "$head_bin" \
  --baseline-sweep "$base_sweep" --candidate-sweep "$head_sweep" \
  --md "$out/gate.md" "${gate_args[@]+"${gate_args[@]}"}"
rc=$?
set -e
[ "$rc" -eq 2 ] && exit 2
[ -f "$out/gate.md" ] || die "the gate wrote no verdict (exit $rc)"

loss_rc=0
if [ "$losses" -eq 1 ]; then
  set +e
  "$base_bin" gate --losses --db "$out/gate.db" --baseline "sweep:$base_sweep" --candidate "sweep:$head_sweep" \
    >"$out/losses.md"
  loss_rc=$?
  set -e
  [ "$loss_rc" -eq 2 ] && exit 2
fi

"$base_bin" report --db "$out/gate.db" --format html >"$out/report.html.tmp" && mv "$out/report.html.tmp" "$out/report.html"

{
  echo "### ctitan perf gate: \`$base_ref\` (${base_sha:0:12}) → \`$head_ref\` (${head_sha:0:12})"
  echo
  echo "Spec \`$(basename "$spec")\`, $pairs paired runs per point. Full report: report.html."
  echo
  cat "$out/gate.md"
  if [ "$losses" -eq 1 ]; then echo; cat "$out/losses.md"; fi
} >"$out/verdict.md.tmp"
mv "$out/verdict.md.tmp" "$out/verdict.md"
log "verdict: $out/verdict.md, report: $out/report.html (gate exit $rc$([ "$losses" -eq 1 ] && echo ", losses exit $loss_rc"))"

if [ "$rc" -eq 1 ] || [ "$loss_rc" -eq 1 ]; then exit 1; fi
if [ "$loss_rc" -ne 0 ]; then exit "$loss_rc"; fi
exit "$rc"
