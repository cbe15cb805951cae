#!/usr/bin/env bash
# The GPU check anyone with an NVIDIA GPU can run (docs/gpu.md):
#   1. set up and build (scripts/bootstrap.sh);
#   2. `ctest -L gpu`: the model on CUDA against the CPU's fp32 result, 10
#      training steps against the CPU's losses, FSDP over NCCL (2 GPUs),
#      Float8 through _scaled_mm against the emulation (sm89+), a CUPTI
#      trace whose busy time is the step's;
#   3. 20 steps of debugmodel and of 125M in bf16 on cuda:0, and eager
#      PyTorch (tests/peer/llama_peer.py) on the same GPU with the same model:
#      tokens/s, MFU and peak memory side by side;
#   4. a one-point sweep on the GPU into SQLite, and its report.
# Outputs in OUT (default build/gpu-check). Without a GPU: one line, exit 2.
#   scripts/gpu_check.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=${1:-$root/build/gpu-check}
log() { echo "[gpu_check] $*"; }

"$root/scripts/bootstrap.sh"
py="$root/.venv/bin/python"
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no GPU: LibTorch sees no CUDA device on this machine (nothing to check)" >&2
  exit 2
fi
"$py" -c 'import torch; print("[gpu_check]", torch.cuda.get_device_name(0), "x", torch.cuda.device_count(), "| torch", torch.__version__, "| CUDA", torch.version.cuda)'
rm -rf "$out"
mkdir -p "$out"
bin="$root/build/ctitan"

log "ctest -L gpu"
(cd "$root/build" && ctest -L gpu --output-on-failure)

summary() {  # summary.json -> one line
  "$py" - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[2] + "/summary.json"))
mfu = s.get("mfu")
print(f"{sys.argv[1]:<34} tps {s['tps_median']:>10,.0f}   MFU {mfu if mfu is None else round(mfu, 2)}%   "
      f"peak mem {s['mem_peak_bytes'] / 2**30:.2f} GiB")
PY
}
peer() {  # the eager PyTorch peer, same model and shapes
  "$py" "$root/tests/peer/llama_peer.py" --device cuda --flavor "$1" --dtype bf16 --seq-len "$2" --batch "$3" \
    --steps 20 --warmup 5 --json 2>/dev/null |
    "$py" -c 'import json,sys; s=json.loads(sys.stdin.read()); print(f"{\"eager PyTorch \" + s[\"flavor\"]:<34} tps {s[\"tps_median\"]:>10,.0f}   peak mem {s[\"max_reserved_bytes\"]/2**30:.2f} GiB (reserved)")'
}

results=()
for row in "debugmodel llama3_debugmodel.toml 2048 8" "125M llama3_125m.toml 2048 8"; do
  read -r flavor recipe seq batch <<<"$row"
  log "20 steps of $flavor in bf16 on cuda:0"
  "$bin" train --job.config_file "$root/recipes/$recipe" --training.device cuda --training.steps 20 \
    --training.seq_len "$seq" --training.local_batch_size "$batch" --metrics.log_freq 5 --metrics.warmup_steps 5 \
    --job.dump_folder "$out/$flavor"
  results+=("$(summary "ctitan $flavor" "$out/$flavor")")
  results+=("$(peer "$flavor" "$seq" "$batch")")
done

log "a one-point sweep on the GPU"
cat >"$out/gpu_sweep.toml" <<EOF2
[sweep]
name = "gpu-check"
base = "$root/recipes/llama3_debugmodel.toml"
world_sizes = [1]
repeats = 2
warmup_steps = 5
measure_steps = 10
[overrides]
training.device = "cuda"
EOF2
"$bin" sweep "$out/gpu_sweep.toml" --db "$out/gpu.db"
"$bin" report --db "$out/gpu.db" --format md --out "$out/report.md"

echo
log "results (seq 2048 x batch 8, bf16, steps 6-20):"
printf '  %s\n' "${results[@]}"
log "report: $out/report.md"
