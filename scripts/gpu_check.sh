#!/usr/bin/env bash
# The GPU check (docs/gpu.md): build on a GPU node, offline if need be, and
# measure ctitan there beside eager PyTorch and torch.compile, in under 9
# minutes on a 16-core node with one H100/H200.
#
#   scripts/gpu_check.sh [--offline DIR] [--peer-wheels DIR] [--out OUT] [--build-only] [--rehearse]
#
#   --offline DIR  build from the bundle scripts/offline_bundle.sh made (also:
#                  CTITAN_OFFLINE_BUNDLE=DIR): no apt, no pip; the bundle is
#                  unpacked into build-gpu/prefix and the build takes its
#                  headers and libraries from there alone (checked). Where
#                  scripts/gpu_prebuilt.sh put binaries built against this
#                  node's torch from these sources into DIR/prebuilt, they are
#                  used instead of building (minutes of GPU time saved), and
#                  only on the very tree of the commit they were built from
#                  (BUILT names it; every tracked file is checked): evidence
#                  of committed code, or exit 2
#   --peer-wheels DIR  scripts/gpu_peer_wheels.sh's folder (default .gpu-peers
#                  where it exists): TorchTitan and its needs, installed into
#                  the build folder for the TorchTitan peer
#   --out OUT      where logs, run folders and summary.md go (build/gpu-check)
#   --build-only   stop after the build
#   --rehearse     every step on the CPU at toy sizes (debugmodel for every model,
#                  4 steps, seq 128, batch 1, 2 Gloo ranks): checks the script's
#                  wiring before GPU time is spent on it; its numbers mean nothing
#   CTITAN_GPU_CHECK_STEPS  run only these steps (and inventory, build), e.g.
#                  "gpu_tests kernels_8B_4L": a rerun after a fix, when GPU time is short
#   CTITAN_GPU_CHECK_DEADLINE  the whole run's deadline in seconds (530)
#   CTITAN_GPU_ROUNDS, CTITAN_GPU_ROUNDS_CONFIGS  the `rounds` step's rounds (3)
#                  and configurations (scripts/lib/gpu_rounds.py's default list)
#   CTITAN_GPU_MIRROR_TAR  a .tgz the `rounds` step rewrites after every run
#                  (put it under the device tool's $OUT: it comes back even
#                  when the command is stopped at its limit)
#   CTITAN_TORCH_PYTHON  the Python whose torch is built against and runs the
#                  peers; default: offline, the `python3` on PATH; online, the
#                  project's .venv (scripts/bootstrap.sh)
#
# Each step runs under its own time budget (seconds, below) and the whole under
# a deadline (530 s); a step that fails, or times out, is recorded and the next
# one runs. The steps run in priority order and their budgets add up to more
# than the deadline: what the deadline leaves no time for is recorded skipped. Without a GPU: one line and exit 2 after the build. Exit 1 when a
# step failed, else 0. Everything is in OUT; OUT/summary.md is the one page.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/offline.sh
source "$root/scripts/lib/offline.sh"

bundle=${CTITAN_OFFLINE_BUNDLE:-}
peer_wheels_dir=
[ -d "$root/.gpu-peers" ] && peer_wheels_dir=$root/.gpu-peers
out=$root/build/gpu-check
build_only=0
rehearse=0
while (($#)); do
  case $1 in
    --offline) bundle=${2:?--offline needs the bundle folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --peer-wheels) peer_wheels_dir=${2:?--peer-wheels needs the folder of scripts/gpu_peer_wheels.sh}; shift 2
                   [ -d "$peer_wheels_dir" ] || { echo "gpu_check: peer wheels '$peer_wheels_dir' is not a folder; make it with scripts/gpu_peer_wheels.sh DIR" >&2; exit 2; }
                   peer_wheels_dir="$(cd "$peer_wheels_dir" && pwd)" ;;
    --build-only) build_only=1; shift ;;
    --rehearse) rehearse=1; shift ;;
    *) echo "gpu_check: unknown argument '$1'; usage: scripts/gpu_check.sh [--offline DIR] [--peer-wheels DIR] [--out OUT] [--build-only] [--rehearse]" >&2
       exit 2 ;;
  esac
done
if [ -n "$bundle" ]; then
  [ -d "$bundle" ] || { echo "gpu_check: offline bundle '$bundle' is not a folder; make it with scripts/offline_bundle.sh DIR" >&2; exit 2; }
  bundle="$(cd "$bundle" && pwd)"
fi

build=${CTITAN_BUILD_DIR:-$root/build-gpu}
prefix=$build/prefix
bin=$build/ctitan
rm -rf "$out"
mkdir -p "$out/runs"
t_start=$SECONDS
scale=$((rehearse ? 4 : 1))  # a rehearsal runs on 2 CPU cores, not a GPU: 4x the time
deadline_s=${CTITAN_GPU_CHECK_DEADLINE:-530}
[[ $deadline_s =~ ^[0-9]+$ ]] || { echo "gpu_check: CTITAN_GPU_CHECK_DEADLINE='$deadline_s' is not a number of seconds" >&2; exit 2; }
deadline=$((t_start + deadline_s * scale))
status_file=$out/steps.tsv
: >"$status_file"
log() { printf '[gpu_check %3ds] %s\n' $((SECONDS - t_start)) "$*"; }

# step NAME BUDGET FUNCTION [ARGS]: runs FUNCTION in a child bash under
# min(BUDGET, time left), output to OUT/NAME.log; one row in steps.tsv.
step() {
  local name=$1 budget=$2 fn=$3; shift 3
  local left=$((deadline - SECONDS)) rc t0=$SECONDS state
  budget=$((budget * scale))
  if [ -n "${CTITAN_GPU_CHECK_STEPS:-}" ] && [[ " inventory build $CTITAN_GPU_CHECK_STEPS " != *" $name "* ]]; then
    return 0  # not asked for (a rerun of some steps)
  fi
  if ((left < 15)); then
    printf '%s\tskipped\t0\t%s\tout of time: %ds of the %d s left\n' "$name" "$budget" "$left" $((deadline_s * scale)) >>"$status_file"
    log "$name: skipped, out of time"
    return 0
  fi
  ((budget < left)) || budget=$left
  log "$name (budget ${budget}s)"
  CTITAN_STEP_DEADLINE=$(($(date +%s) + budget - 5)) timeout -k 10 "$budget" bash -c 'source "$0"; "$@"' "$root/scripts/lib/gpu_check_steps.sh" "$fn" "$@" \
    >"$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) state=ok ;; 77) state=skipped ;; 124|137) state=timeout ;; *) state=failed ;;
  esac
  local why
  why=$(grep -v '^\s*$' "$out/$name.log" | tail -n 1 | cut -c1-160 | tr '\t' ' ')
  printf '%s\t%s\t%d\t%s\t%s\n' "$name" "$state" $((SECONDS - t0)) "$budget" "$why" >>"$status_file"
  log "$name: $state in $((SECONDS - t0))s${why:+ — $why}"
}

# --- which torch -------------------------------------------------------------
if [ -z "${CTITAN_TORCH_PYTHON:-}" ]; then
  if [ -n "$bundle" ]; then CTITAN_TORCH_PYTHON=$(command -v python3 || true); else CTITAN_TORCH_PYTHON=$root/.venv/bin/python; fi
fi
export CTITAN_TORCH_PYTHON root out bin build prefix bundle rehearse peer_wheels_dir deadline_s
[ -n "$bundle" ] && offline_env "$prefix"
# Prebuilt binaries (scripts/gpu_prebuilt.sh) were linked elsewhere: they find
# the node's torch and its CUDA libraries through the loader's path.
if [ -n "$bundle" ] && [ -f "$bundle/prebuilt/BUILT" ]; then
  LD_LIBRARY_PATH="$(torch_library_path "$CTITAN_TORCH_PYTHON")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
fi

# --- budgets (seconds): each a step's ceiling. The steps run in priority
# order; with the build prebuilt (5-6 s on the H200) the budgets after it add up
# to 1,160 s, over the 530 s deadline, which skips what it leaves no time for
# (steps.tsv says so). A window of one command runs, say,
# CTITAN_GPU_CHECK_STEPS="peer_wheels gpu_tests rounds" -----------------------
step inventory 15 inventory                       # nvidia-smi, torch, CUDA, the node
step build 200 build_ctitan                       # unpack, configure, ctitan + gpu tests on every core
if grep -q '^this tree is not commit' "$out/build.log" 2>/dev/null; then
  echo "gpu_check: $(grep -m1 '^this tree is not commit' "$out/build.log")" >&2
  exit 2
fi
if ((build_only)); then
  column -t -s $'\t' "$status_file"
  grep -q $'\tok\t' <(grep '^build' "$status_file") && exit 0 || exit 1
fi
if ((!rehearse)) && ! "$CTITAN_TORCH_PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no GPU: torch ($CTITAN_TORCH_PYTHON) sees no CUDA device on this machine; the build is checked, nothing else to run" >&2
  exit 2
fi
step peer_wheels 30 peer_wheels                   # TorchTitan and its needs, from --peer-wheels, into the build folder
step gpu_tests 120 gpu_tests                      # ctest -L gpu (one process per test)
# The 8B shapes with 4 layers, interleaved rounds of ctitan (eager, compile,
# compile + Float8 tensorwise and rowwise), TorchTitan (the same four) and the
# PyTorch peer with the step compiled; no activation checkpointing (the peers
# checkpoint nothing). scripts/lib/gpu_rounds.py; rounds.md.
step rounds 520 rounds
step ctitan_125M 25 ctitan_run 125M llama3_125m.toml 2048 8
step ctitan_125M_no_cupti 25 ctitan_run 125M_no_cupti llama3_125m.toml 2048 8 --profiling.no_enable_cupti
step ctitan_125M_compile 25 ctitan_run 125M_compile llama3_125m.toml 2048 8 --compile.enable
step eager_125M 25 peer eager 125M 2048 8
step compile_125M 90 peer compile 125M 2048 8
step kernels_8B_4L 30 kernels 8B_4L llama3_8b.toml 2048 2 --model.n_layers 4 --activation_checkpoint.mode none
step kernels_8B_4L_compile 30 kernels 8B_4L_compile llama3_8b.toml 2048 2 --model.n_layers 4 \
  --activation_checkpoint.mode none --compile.enable
# Qwen3's MoE debug flavor (issue 34): routing, the experts through at::_grouped_mm in bf16.
step ctitan_moe 30 ctitan_run moe llama3_debugmodel.toml 2048 8 --model.name qwen3 --model.flavor debugmodel_moe
step ctitan_moe_compile 30 ctitan_run moe_compile llama3_debugmodel.toml 2048 8 --model.name qwen3 \
  --model.flavor debugmodel_moe --compile.enable
step eager_moe 30 peer eager debugmodel_moe 2048 8    # TorchTitan's Qwen3 MoE in eager PyTorch, same shapes
step compile_moe 90 peer compile debugmodel_moe 2048 8
step sweep 30 sweep_and_report                    # debugmodel, 20 steps, into SQLite + report
step nccl_2gpu 30 two_gpus                        # FSDP over 2 GPUs through NCCL (skipped on 1)

"$CTITAN_TORCH_PYTHON" "$root/scripts/lib/gpu_check_summary.py" "$out" >"$out/summary.md" 2>"$out/summary.err" ||
  { echo "gpu_check: writing summary.md failed:"; cat "$out/summary.err"; } >&2
log "done in $((SECONDS - t_start))s: $out/summary.md"
cat "$out/summary.md"
! grep -qP '\t(failed|timeout)\t' "$status_file"
