#!/usr/bin/env bash
# Expert parallelism's communication measured, by hand: qwen3
# debugmodel_moe (64 experts, top 8) cut to 2 layers, 4 ranks of FSDP 4,
# with the experts FSDP-sharded like every parameter (EP 1), or owned by
# pairs (EP 2: 32 experts a rank, FSDP 2 of them) or by one rank each (EP 4:
# 16 experts a rank, no FSDP of experts); bf16, batch 2 x 256 a rank, the
# Markov corpus, 12 steps of which the last 8 are measured. Prints per
# layout the step time, tokens/s a rank, peak memory, the EP token imbalance
# and the communication per mesh dimension (in flight / exposed, ms a step,
# from summary.json's comm_by_dim). Run it alone: the 4 ranks share the cores.
#
#   tests/scripts/ep_comm.sh [BUILD_DIR] [OUT_DIR]     (about 3 minutes on 2 cores)
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
ctitan="$build/ctitan"
[[ -x $ctitan ]] || { echo "ep_comm: no $ctitan; build first (cmake --build $build --target ctitan)" >&2; exit 2; }
mkdir -p "$out"
echo "| layout | step s | tokens/s a rank | peak memory MiB | EP imbalance | dp_shard ms (exposed) | ep ms (exposed) | world ms (exposed) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for ep in 1 2 4; do
  "$ctitan" train --nproc 4 --model.name qwen3 --model.flavor debugmodel_moe --model.n_layers 2 \
    --training.dataset markov --training.seq_len 256 --training.local_batch_size 2 --training.steps 12 \
    --metrics.warmup_steps 4 --metrics.log_freq 1 --parallelism.data_parallel_shard_degree 4 \
    --parallelism.expert_parallel_degree "$ep" --job.dump_folder "$out/ep$ep" > "$out/ep$ep.log" 2>&1 ||
    { echo "ep_comm: EP $ep failed; see $out/ep$ep.log" >&2; exit 1; }
  python3 - "$ep" "$out/ep$ep/summary.json" "$out/ep$ep/metrics.jsonl" <<'PY'
import json, statistics, sys
ep, s = sys.argv[1], json.load(open(sys.argv[2]))
steps = [json.loads(l) for l in open(sys.argv[3])][4:]
step_s = statistics.median(r["step_time_s"] for r in steps if "step_time_s" in r) if steps and "step_time_s" in steps[0] else float("nan")
d = s.get("comm_by_dim", {})
def ms(k):
    v = d.get(k)
    return f"{1e3 * v['comm_s']:.0f} ({1e3 * v['exposed_comm_s']:.0f})" if v else "-"
imb = s.get("moe_ep_imbalance")
name = "FSDP 4, experts FSDP 4" if ep == "1" else f"FSDP 4, EP {ep}"
print(f"| {name} | {step_s:.3f} | {s['tps_median']:.0f} | {s['mem_peak_bytes'] / 2**20:.0f} | "
      f"{'-' if imb is None else f'{imb:.3f}'} | {ms('dp_shard')} | {ms('ep')} | {ms('world')} |")
PY
done
