#!/usr/bin/env bash
# The pipeline bubble measured beside the schedule's: PP 4 on debugmodel,
# every schedule (GPipe, 1F1B, LoopedBFS, Interleaved1F1B and the
# zero-bubble ones, two stages per rank for the multi-stage ones), 4 and 8
# micro-batches (local batch 4 and 8, micro-batches of one sequence), fp32,
# seq 256. Prints per run the measured bubble (mean over ranks, and per
# rank), the theory (simulated with nominal action times) and its formula,
# the median step time and the first stage's peak activation memory.
#   scripts/pipeline_bubble.sh [OUT_DIR]      (default: a fresh temp dir)
# Uses build/ctitan (CTITAN=path overrides). Takes ~8 minutes on 2 cores;
# SCHEDULES="1F1B ZBVZeroBubble" runs fewer.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ctitan="${CTITAN:-$root/build/ctitan}"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
[ -x "$ctitan" ] || { echo "pipeline_bubble: $ctitan is not built; run scripts/build.sh first" >&2; exit 2; }
echo "pipeline_bubble: runs in $out"
for schedule in ${SCHEDULES:-1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble GPipe LoopedBFS}; do
  for m in 4 8; do
    d="$out/pp4-$schedule-m$m"
    "$ctitan" train --nproc 4 --model.flavor debugmodel --training.dataset markov \
      --training.mixed_precision_param float32 --training.seq_len 256 --training.local_batch_size "$m" \
      --training.steps 8 --metrics.warmup_steps 3 --metrics.log_freq 100 \
      --parallelism.pipeline_parallel_degree 4 --parallelism.pipeline_parallel_schedule "$schedule" \
      --job.dump_folder "$d" > "$d.log" 2>&1 || { echo "pipeline_bubble: $d failed, see $d.log" >&2; exit 1; }
    python3 - "$d/summary.json" "$schedule" "$m" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
p = s["pipeline"]
print("%-21s m %s  bubble measured %.3f (ranks %s)  theory %.3f %s  step %.3f s  stage-0 activations %.1f MB"
      % (sys.argv[2], sys.argv[3], s["pipeline_bubble"], " ".join("%.2f" % b for b in p["bubble_by_rank"]),
         s["pipeline_bubble_theory"], p["bubble_formula"], s["step_time_median_s"],
         s["mem_by_category"]["activations"]["max_bytes"] / 1e6))
EOF
  done
done
