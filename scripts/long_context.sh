#!/usr/bin/env bash
# The longest sequence that trains within a per-rank memory budget, on one
# process and on context parallelism 2 and 4 — the shape of TorchTitan's CP
# table, on this CPU. Llama 3 debugmodel, fp32, one sequence per step,
# rotate method allgather, headtail balancing, 1 warm-up + 2 measured
# steps; seq_len doubles from 1024 until a rank's measured peak memory
# (live tensors, summary.json) passes the budget. Prints per run the peak
# per rank, the peak activation memory (rank 0) and tokens/s per rank.
#   scripts/long_context.sh [OUT_DIR]   (BUDGET_MIB=300 by default; METHOD=alltoall for the ring)
# Uses build/ctitan (CTITAN=path overrides). Takes ~10 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ctitan="${CTITAN:-$root/build/ctitan}"
out="${1:-$(mktemp -d)}"
budget_mib="${BUDGET_MIB:-300}"
method="${METHOD:-allgather}"
mkdir -p "$out"
[ -x "$ctitan" ] || { echo "long_context: $ctitan is not built; run scripts/build.sh first" >&2; exit 2; }
echo "long_context: runs in $out, budget $budget_mib MiB per rank, $method"
for cp in 1 2 4; do
  seq=1024
  while :; do
    d="$out/cp$cp-seq$seq"
    "$ctitan" train --nproc "$cp" --model.flavor debugmodel --training.dataset markov \
      --training.mixed_precision_param float32 --training.seq_len "$seq" --training.local_batch_size 1 \
      --training.steps 3 --metrics.warmup_steps 1 --metrics.log_freq 100 \
      --parallelism.context_parallel_degree "$cp" --parallelism.context_parallel_rotate_method "$method" \
      --job.dump_folder "$d" > "$d.log" 2>&1 || { echo "long_context: $d failed, see $d.log" >&2; exit 1; }
    fits=$(python3 - "$d/summary.json" "$cp" "$seq" "$budget_mib" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
peak = max(r["mem_peak_bytes"] for r in s.get("ranks", [s])) / 2**20
act = s["mem_by_category"]["activations"]["max_bytes"] / 2**20
fits = peak <= float(sys.argv[4])
print("cp %s  seq_len %6s  peak per rank %7.1f MiB  activations %7.1f MiB  tps per rank %7.0f  %s"
      % (sys.argv[2], sys.argv[3], peak, act, s["tps_median"], "fits" if fits else "over the budget"),
      file=sys.stderr)
print(1 if fits else 0)
PY
)
    [ "$fits" = 1 ] || break
    seq=$((seq * 2))
  done
done
