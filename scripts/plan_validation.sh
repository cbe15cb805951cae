#!/usr/bin/env bash
# The planner's measured mode, out of sample, in one command: six short
# calibration runs of debugmodel at world sizes 1-2 (profiled), the 18
# recipes of recipes/sweeps/plan_validation.toml (world sizes 2-8, FSDP,
# DDP, HSDP, TP, PP, CP, 2-D mixes, full AC, the 125M model), then each
# predicted from the calibration runs and scored against its measurement
# (scripts/validate_plan_profile.py; a calibration run's own recipe is left
# out as in sample).
#
# The calibration runs (seq 256, 12 steps, traces at steps 4, 8, 12):
#   calib_b4      1 process, 1 thread, batch 4   the compute, unit by unit
#   calib_b1      1 process, 1 thread, batch 1   the size curve
#   fsdp2_b4      FSDP 2, batch 4                ranks side by side; the link
#   fsdp2_b1      FSDP 2, batch 1                the link (its bandwidth: gathers dominate)
#   tp2_b4        TP 2, batch 4                  the link (latency: many small collectives)
#   ddp2_b4       DDP 2, batch 4                 the link (one large all-reduce)
#
#   scripts/plan_validation.sh [OUT_DIR]      (default: a fresh temp dir)
# Uses build/ctitan (CTITAN=path overrides). About 4 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ctitan="${CTITAN:-$root/build/ctitan}"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
[ -x "$ctitan" ] || { echo "plan_validation: $ctitan is not built; run scripts/build.sh first" >&2; exit 2; }
[ -e "$out/validation.db" ] && { echo "plan_validation: $out/validation.db exists; give an empty folder" >&2; exit 2; }
echo "plan_validation: runs in $out"
calibrate() {
  local name="$1"; shift
  echo "plan_validation: calibration run $name"
  "$ctitan" train --job.config_file "$root/recipes/llama3_debugmodel_markov.toml" --training.seq_len 256 \
    --training.steps 12 --profiling.enable_profiling --profiling.profile_freq 4 --metrics.warmup_steps 3 \
    --metrics.log_freq 100 --job.dump_folder "$out/$name" "$@" > "$out/$name.log" 2>&1 ||
    { echo "plan_validation: $name failed, see $out/$name.log" >&2; exit 1; }
}
OMP_NUM_THREADS=1 calibrate calib_b4 --training.local_batch_size 4
OMP_NUM_THREADS=1 calibrate calib_b1 --training.local_batch_size 1
calibrate fsdp2_b4 --nproc 2 --training.local_batch_size 4
calibrate fsdp2_b1 --nproc 2 --training.local_batch_size 1
calibrate tp2_b4 --nproc 2 --training.local_batch_size 4 --parallelism.tensor_parallel_degree 2
calibrate ddp2_b4 --nproc 2 --training.local_batch_size 4 --parallelism.data_parallel_replicate_degree 2
"$ctitan" sweep "$root/recipes/sweeps/plan_validation.toml" --db "$out/validation.db"
python3 "$root/scripts/validate_plan_profile.py" --ctitan "$ctitan" "$out/validation.db" \
  "$out/calib_b4" "$out/calib_b1" "$out/fsdp2_b4" "$out/tp2_b4" "$out/ddp2_b4" "$out/fsdp2_b1"
