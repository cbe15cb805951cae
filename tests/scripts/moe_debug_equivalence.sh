#!/usr/bin/env bash
# Issue 34's equivalence at TorchTitan's debug flavors, by hand (CI checks
# the same layouts on the tiny flavors as thread ranks, in seconds:
# tests/unit/layout_threads_test.cpp): qwen3 debugmodel_moe and deepseek_v3
# debugmodel, fp32, 10 steps of the same global batch (4 x 64 tokens of
# the Markov corpus), every layout's losses against one process of the same
# activation checkpointing and compile settings, within 1e-5 relative.
#
#   tests/scripts/moe_debug_equivalence.sh [BUILD_DIR] [OUT_DIR]
#   LAYOUTS='ep' tests/scripts/moe_debug_equivalence.sh ...   # only the layouts whose name matches
#
# Layouts: FSDP 2, TP 2, PP 2, CP 2, FSDP 2 x TP 2 with full AC, PP 2 x
# FSDP 2 x TP 2 with compile (8 processes); issue 35's expert parallelism:
# EP 2, EP 4 with full AC, FSDP 2 x EP 2 (4 ranks) with
# moe_force_load_balance (against one process with it), EP 2 x TP 2 (ep
# spans tp), FSDP 2 x EP 2 x ETP 2 and PP 2 x EP 2. About 25 minutes on 2
# cores for both models.
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
ctitan="$build/ctitan"
[[ -x $ctitan ]] || { echo "moe_debug_equivalence: no $ctitan; build first (cmake --build $build --target ctitan)" >&2; exit 2; }
export OMP_NUM_THREADS=1

layouts=${LAYOUTS:-.}
run() {  # name model flavor nproc local_batch [args...]
  local name=$1 model=$2 flavor=$3 nproc=$4 lb=$5
  shift 5
  [[ $name == single* || $name =~ $layouts ]] || return 0
  "$ctitan" train --nproc "$nproc" --model.name "$model" --model.flavor "$flavor" \
    --training.mixed_precision_param float32 --training.dataset markov --training.seq_len 64 \
    --training.local_batch_size "$lb" --training.steps 10 --metrics.log_freq 1 \
    --job.dump_folder "$out/$model/$name" "$@" > "$out/$model/$name.log" 2>&1 ||
    { echo "moe_debug_equivalence: $model $name failed; see $out/$model/$name.log" >&2; exit 1; }
}

status=0
for mf in "qwen3 debugmodel_moe" "deepseek_v3 debugmodel"; do
  set -- $mf
  model=$1 flavor=$2
  mkdir -p "$out/$model"
  echo "== $model $flavor"
  run single "$model" "$flavor" 1 4
  run single_ac_full "$model" "$flavor" 1 4 --activation_checkpoint.mode full
  run single_compile "$model" "$flavor" 1 4 --compile.enable
  run single_forced "$model" "$flavor" 1 4 --debug.moe_force_load_balance true
  run fsdp2 "$model" "$flavor" 2 2 --parallelism.data_parallel_shard_degree 2
  run tp2 "$model" "$flavor" 2 4 --parallelism.tensor_parallel_degree 2
  run pp2 "$model" "$flavor" 2 4 --parallelism.pipeline_parallel_degree 2 \
    --parallelism.pipeline_parallel_microbatch_size 1
  run cp2 "$model" "$flavor" 2 4 --parallelism.context_parallel_degree 2
  run fsdp2_tp2_ac_full "$model" "$flavor" 4 2 --parallelism.data_parallel_shard_degree 2 \
    --parallelism.tensor_parallel_degree 2 --activation_checkpoint.mode full
  run pp2_fsdp2_tp2_compile "$model" "$flavor" 8 2 --parallelism.pipeline_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 2 --parallelism.tensor_parallel_degree 2 \
    --parallelism.pipeline_parallel_microbatch_size 1 --compile.enable
  run ep2 "$model" "$flavor" 2 2 --parallelism.data_parallel_shard_degree 2 --parallelism.expert_parallel_degree 2
  run ep4_ac_full "$model" "$flavor" 4 1 --parallelism.data_parallel_shard_degree 4 \
    --parallelism.expert_parallel_degree 4 --activation_checkpoint.mode full
  run fsdp2_ep2_forced "$model" "$flavor" 4 1 --parallelism.data_parallel_shard_degree 4 \
    --parallelism.expert_parallel_degree 2 --debug.moe_force_load_balance true
  run ep2_tp2 "$model" "$flavor" 2 4 --parallelism.tensor_parallel_degree 2 --parallelism.expert_parallel_degree 2
  run fsdp2_ep2_etp2 "$model" "$flavor" 4 2 --parallelism.data_parallel_shard_degree 2 \
    --parallelism.tensor_parallel_degree 2 --parallelism.expert_parallel_degree 2 \
    --parallelism.expert_tensor_parallel_degree 2
  run pp2_ep2 "$model" "$flavor" 4 2 --parallelism.pipeline_parallel_degree 2 \
    --parallelism.data_parallel_shard_degree 2 --parallelism.expert_parallel_degree 2 \
    --parallelism.pipeline_parallel_microbatch_size 1
  LAYOUTS=$layouts python3 - "$out/$model" <<'EOF' || status=1
import json, os, re, sys
from pathlib import Path
root = Path(sys.argv[1])
def losses(name):
    rows = [json.loads(l) for l in (root / name / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}
golden = {"ac_full": losses("single_ac_full"), "compile": losses("single_compile"), "forced": losses("single_forced"),
          "": losses("single")}
ok = True
names = ["fsdp2", "tp2", "pp2", "cp2", "fsdp2_tp2_ac_full", "pp2_fsdp2_tp2_compile", "ep2", "ep4_ac_full",
         "fsdp2_ep2_forced", "ep2_tp2", "fsdp2_ep2_etp2", "pp2_ep2"]
for name in [n for n in names if re.search(os.environ["LAYOUTS"], n)]:
    want = next((g for k, g in golden.items() if k and name.endswith(k)), golden[""])
    got = losses(name)
    worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    good = len(got) == len(want) == 10 and worst <= 1e-5
    ok &= good
    print(f"  {name:24s} max |loss - one process| / loss over 10 steps: {worst:.2e}  {'ok' if good else 'FAIL'}")
first, last = golden[""][1], golden[""][10]
print(f"  one process: loss {first:.4f} -> {last:.4f}")
sys.exit(0 if ok else 1)
EOF
done
exit $status
