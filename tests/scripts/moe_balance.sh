#!/usr/bin/env bash
# The aux-loss-free expert bias in whole training runs, by hand (CI checks
# the rebalancing of a collapsed router: TrainRun.ExpertBiasRebalancesACollapsedRouter).
# qwen3 debugmodel_moe cut to 2 layers, 200 steps of Zipf(s)-skewed tokens
# (s = 0.8 and 1.0) at the flavor's lr 8e-4, load_balance_coeff 1e-3, 1e-2
# and 0; prints the experts' load CV (mean over layers) per 20-step window.
#
#   tests/scripts/moe_balance.sh [BUILD_DIR] [OUT_DIR]     (about 4 minutes on 2 cores)
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
ctitan="$build/ctitan"
[[ -x $ctitan ]] || { echo "moe_balance: no $ctitan; build first (cmake --build $build --target ctitan)" >&2; exit 2; }
mkdir -p "$out"
for s in 0.8 1.0; do
  python3 - "$s" "$out/zipf$s.bin" <<'PY'
import random, struct, sys
s, path = float(sys.argv[1]), sys.argv[2]
rng = random.Random(0)
tokens = rng.choices(range(2048), weights=[1 / (r + 1) ** s for r in range(2048)], k=200000)
open(path, "wb").write(struct.pack("<%dH" % len(tokens), *tokens))
PY
  for coeff in 1e-3 1e-2 0; do
    [[ $s == 0.8 && $coeff == 1e-2 ]] && continue
    "$ctitan" train --model.name qwen3 --model.flavor debugmodel_moe --model.n_layers 2 \
      --model.moe_load_balance_coeff "$coeff" --training.dataset bin --training.dataset_path "$out/zipf$s.bin" \
      --training.seq_len 32 --training.local_batch_size 4 --training.steps 200 --metrics.log_freq 1 \
      --job.dump_folder "$out/s$s-c$coeff" > "$out/s$s-c$coeff.log" 2>&1 ||
      { echo "moe_balance: s $s coeff $coeff failed; see $out/s$s-c$coeff.log" >&2; exit 1; }
    python3 - "$s" "$coeff" "$out/s$s-c$coeff/metrics.jsonl" <<'PY'
import json, sys
cv = [json.loads(l)["moe_load_cv"] for l in open(sys.argv[3])]
w = [sum(cv[i:i + 20]) / 20 for i in range(0, len(cv), 20)]
print(f"zipf s {sys.argv[1]}  coeff {sys.argv[2]:>5}  CV per 20 steps: " + " ".join(f"{x:.2f}" for x in w))
PY
  done
done
