#!/usr/bin/env bash
# Async TP against synchronous TP at TP 2, side by side on this machine:
# debugmodel and 125M, fp32, runs alternating sync / async, two rounds.
# Prints per run the median step time, tokens/s per device, and the TP
# communication in flight and exposed per step (summary.json comm_by_dim.tp).
#   scripts/async_tp_compare.sh [OUT_DIR]      (default: a fresh temp dir)
# Uses build/ctitan (CTITAN=path overrides). Takes ~4 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ctitan="${CTITAN:-$root/build/ctitan}"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
[ -x "$ctitan" ] || { echo "async_tp_compare: $ctitan is not built; run scripts/build.sh first" >&2; exit 2; }
echo "async_tp_compare: runs in $out"
for flavor in debugmodel 125M; do
  if [ "$flavor" = debugmodel ]; then
    args=(--training.local_batch_size 4 --training.seq_len 256 --training.steps 14 --metrics.warmup_steps 4)
  else
    args=(--training.local_batch_size 2 --training.seq_len 256 --training.steps 9 --metrics.warmup_steps 3)
  fi
  for round in 1 2; do
    for async in false true; do
      d="$out/$flavor-async-$async-$round"
      "$ctitan" train --nproc 2 --model.flavor "$flavor" --training.dataset markov \
        --training.mixed_precision_param float32 "${args[@]}" --parallelism.tensor_parallel_degree 2 \
        --parallelism.enable_async_tensor_parallel "$async" --metrics.log_freq 100 --job.dump_folder "$d" \
        > "$d.log" 2>&1 || { echo "async_tp_compare: $d failed, see $d.log" >&2; exit 1; }
      python3 - "$d/summary.json" "$flavor" "$async" "$round" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["comm_by_dim"]["tp"]
print("%-10s async=%-5s round %s  step %.3f s  tps %.0f  tp comm %.1f ms  tp exposed %.1f ms  loss %.4f"
      % (sys.argv[2], sys.argv[3], sys.argv[4], s["step_time_median_s"], s["tps_median"],
         1e3 * t["comm_s"], 1e3 * t["exposed_comm_s"], s["loss_final"]))
EOF
    done
  done
done
