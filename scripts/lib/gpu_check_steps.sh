# The steps of scripts/gpu_check.sh, one function each, sourced into a child
# bash per step (so one step's failure or timeout ends only that step). They
# read root, out, bin, build, prefix, bundle and CTITAN_TORCH_PYTHON from the
# environment. Exit 77 means skipped, with the reason as the last line.
set -euo pipefail
# shellcheck source=offline.sh
source "$root/scripts/lib/offline.sh"
py=$CTITAN_TORCH_PYTHON
# The measured shapes, or --rehearse's toy ones on the CPU.
if ((rehearse)); then
  device=cpu steps=4 warmup=1 toy=1
else
  device=cuda steps=20 warmup=5 toy=0
fi

inventory() {
  uname -a
  [ -r /etc/os-release ] && . /etc/os-release && echo "os: $PRETTY_NAME"
  echo "cores: $(nproc)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  "$py" -c 'import torch, sys
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
n = torch.cuda.device_count()
print("GPUs:", n, *(torch.cuda.get_device_name(i) for i in range(n)))'
}

# use_prebuilt: take BUNDLE/prebuilt's ctitan and gpu tests (scripts/gpu_prebuilt.sh)
# when they were built against this node's torch from these very sources and
# load here; else say why and return 1 (then the node builds). They were built
# from a commit: a tree here that differs from it (tree_matches) is refused,
# exit 2, so that nothing measured is credited to a commit it did not run.
use_prebuilt() {
  local pre=$bundle/prebuilt built_torch built_src built_commit have_torch have_src
  [ -f "$pre/BUILT" ] || { echo "no prebuilt binaries in the bundle: building"; return 1; }
  read -r built_torch built_src built_commit <"$pre/BUILT"
  if [ -n "$built_commit" ]; then
    tree_matches "$root" "$pre/TREE.sha256" "$built_commit" || exit 2
    echo "$built_commit" >"$out/commit.txt"
  fi
  have_torch=$("$py" -c 'import torch; print(torch.__version__)')
  have_src=$(source_fingerprint "$root")
  if [ "$built_torch" != "$have_torch" ] || [ "$built_src" != "$have_src" ]; then
    echo "the prebuilt binaries are for torch $built_torch and sources $built_src; here: torch $have_torch, sources $have_src: building"
    return 1
  fi
  mkdir -p "$build"
  cp "$pre/ctitan" "$pre/ctitan_gpu_tests" "$build/"
  if ldd "$bin" "$build/ctitan_gpu_tests" | grep 'not found' || ! "$bin" --version; then
    echo "the prebuilt binaries do not load on this node (above): building"
    rm -f "$bin" "$build/ctitan_gpu_tests"
    return 1
  fi
  touch "$build/PREBUILT"
  echo "built $bin: prebuilt against torch $built_torch from sources $built_src (scripts/gpu_prebuilt.sh), loads here"
}

build_ctitan() {
  local args=()
  if [ -n "$bundle" ]; then
    echo "unpacking $bundle into $prefix"
    offline_unpack "$bundle" "$prefix"
    use_prebuilt && return 0
    mapfile -t args < <(offline_cmake_args "$prefix")
  else
    CTITAN_BOOTSTRAP_BUILD=0 "$root/scripts/bootstrap.sh"
  fi
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTITAN_BUILD_BENCHMARKS=OFF \
      -DCTITAN_TORCH_PYTHON="$py" "${args[@]}"
  fi
  [ -z "$bundle" ] || "$py" "$root/scripts/lib/check_build_paths.py" "$build" "$prefix"
  cmake --build "$build" --target ctitan ctitan_gpu_tests -- -j"$(nproc)"
  echo "built $bin against torch $("$py" -c 'import torch; print(torch.__version__)')"
}

gpu_tests() {
  if [ -f "$build/PREBUILT" ]; then
    # No CTest files came with the prebuilt binary: one process per test, as
    # gtest_discover_tests runs them, with the environment ctitan_test gives.
    cd "$root"
    local t failed=0 n=0 rc
    mkdir -p "$out/gpu_tests"
    local f
    for t in $("$build/ctitan_gpu_tests" --gtest_list_tests | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
      n=$((n + 1))
      rc=0
      f=$out/gpu_tests/${t//\//_}  # parameterised names have slashes: Dtypes/GpuFused.X/fp32
      CTITAN_BIN=$bin CTITAN_SOURCE_DIR=$root timeout 120 "$build/ctitan_gpu_tests" --gtest_filter="$t" \
        --gtest_output="xml:$f.xml" >"$f.log" 2>&1 || rc=$?
      if ((rc)); then
        failed=$((failed + 1)); echo "FAILED (exit $rc): $t"; tail -n 30 "$f.log"
      elif grep -q '\[  SKIPPED \]' "$f.log"; then
        echo "skipped: $t: $(grep -m1 -i 'skipped' "$f.log" | cut -c1-200)"
      else
        echo "passed: $t"
      fi
    done
    echo "$((n - failed)) of $n gpu tests passed or skipped, $failed failed"
    ((failed == 0))
    return
  fi
  cd "$build"
  ctest -L gpu --output-on-failure --timeout 120 --output-junit "$out/gpu_tests.xml"
}

# peer_wheels: scripts/gpu_peer_wheels.sh's wheels (TorchTitan, torchao, ...)
# installed into BUILD/peer-site with no index and no dependencies; the node's
# own torch and packages are used as they are.
peer_wheels() {
  if [ -z "${peer_wheels_dir:-}" ] || ! compgen -G "$peer_wheels_dir/*.whl" >/dev/null; then
    echo "skipped: no peer wheels (scripts/gpu_peer_wheels.sh DIR, then --peer-wheels DIR): the TorchTitan peer cannot run"
    exit 77
  fi
  rm -rf "$build/peer-site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$build/peer-site" "$peer_wheels_dir"/*.whl
  PYTHONPATH=$build/peer-site "$py" -c 'from importlib.metadata import version as v
import torchtitan, torchao, tyro, datasets, torchdata
print("peer wheels:", *(f"{n} {v(n)}" for n in ("torchtitan", "torchao", "tyro", "datasets", "torchdata")))'
}

# rounds: scripts/lib/gpu_rounds.py until this step's deadline (rounds.md, evidence/).
rounds() {
  [ -d "$build/peer-site" ] && export PYTHONPATH="$build/peer-site${PYTHONPATH:+:$PYTHONPATH}"
  local extra=()
  ((rehearse)) && extra+=(--rehearse)
  [ -n "${CTITAN_GPU_ROUNDS_CONFIGS:-}" ] && extra+=(--configs "$CTITAN_GPU_ROUNDS_CONFIGS")
  [ -n "${CTITAN_GPU_MIRROR_TAR:-}" ] && extra+=(--mirror-tar "$CTITAN_GPU_MIRROR_TAR")
  "$py" "$root/scripts/lib/gpu_rounds.py" --out "$out" --bin "$bin" --python "$py" --root "$root" \
    --rounds "${CTITAN_GPU_ROUNDS:-3}" --deadline "$CTITAN_STEP_DEADLINE" "${extra[@]}"
}

# ctitan_run NAME RECIPE SEQ BATCH [ARGS...]: 20 steps on cuda:0, the first 5 outside the statistics.
ctitan_run() {
  local name=$1 recipe=$2 seq=$3 batch=$4; shift 4
  ((toy)) && { seq=128 batch=1 recipe=llama3_debugmodel.toml; }
  "$bin" train --job.config_file "$root/recipes/$recipe" --training.device "$device" --training.steps "$steps" \
    --training.seq_len "$seq" --training.local_batch_size "$batch" --metrics.log_freq "$warmup" \
    --metrics.warmup_steps "$warmup" --job.dump_folder "$out/runs/$name" "$@"
}

# peer MODE FLAVOR SEQ BATCH [ARGS...]: tests/peer/llama_peer.py (eager PyTorch or torch.compile), same model and
# shapes; FLAVOR debugmodel_moe: tests/peer/qwen3_moe_peer.py (TorchTitan's Qwen3 MoE, its grouped_mm experts).
peer() {
  local mode=$1 flavor=$2 seq=$3 batch=$4; shift 4
  local name="${mode}_${flavor}" script=llama_peer.py
  [[ " $* " == *" --n-layers 4 "* ]] && name+="_4L"
  [[ $flavor == debugmodel_moe ]] && { name="${mode}_moe" script=qwen3_moe_peer.py; }
  # Toy MoE: one layer (its bf16 grouped_mm is a reference loop on a CPU: ~30 s a step here).
  ((toy)) && { seq=128 batch=1; [[ $flavor == debugmodel_moe ]] && set -- "$@" --n-layers 1 || flavor=debugmodel; }
  "$py" "$root/tests/peer/$script" --device "$device" --mode "$mode" --flavor "$flavor" --dtype bf16 \
    --seq-len "$seq" --batch "$batch" --steps "$steps" --warmup "$warmup" --json "$@" >"$out/runs/$name.json"
  cat "$out/runs/$name.json"
}

sweep_and_report() {
  cat >"$out/gpu_sweep.toml" <<SPEC
[sweep]
name = "gpu-check"
base = "$root/recipes/llama3_debugmodel.toml"
world_sizes = [1]
repeats = 1
warmup_steps = $warmup
measure_steps = $((steps - warmup))
[overrides]
training.device = "$device"
SPEC
  "$bin" sweep "$out/gpu_sweep.toml" --db "$out/gpu.db"
  "$bin" report --db "$out/gpu.db" --format md --out "$out/report.md"
}

two_gpus() {
  local n
  n=$("$py" -c 'import torch; print(torch.cuda.device_count())')
  if ((!rehearse && n < 2)); then
    echo "skipped: this node has $n GPU; the 2-rank NCCL run (and GpuFsdp.TwoRanksOverNcclMatchOneRank) need 2"
    exit 77
  fi
  local seq=2048 batch=8
  ((toy)) && seq=128 batch=1
  "$bin" launch --nproc 2 -- --job.config_file "$root/recipes/llama3_debugmodel.toml" --training.device "$device" \
    --parallelism.data_parallel_shard_degree 2 --training.steps "$steps" --training.seq_len "$seq" \
    --training.local_batch_size "$batch" --metrics.log_freq "$warmup" --metrics.warmup_steps "$warmup" \
    --job.dump_folder "$out/runs/fsdp2_nccl"
}

# kernels NAME RECIPE SEQ BATCH [ARGS...]: 10 steps with the profiler on (step 10
# traced, CUPTI's kernels in the trace), then the kernels that took the traced
# step's GPU time, grouped by name, largest first: where ctitan's step goes.
kernels() {
  local name=$1 recipe=$2 seq=$3 batch=$4; shift 4
  ((toy)) && { seq=128 batch=1 recipe=llama3_debugmodel.toml; }
  "$bin" train --job.config_file "$root/recipes/$recipe" --training.device "$device" --training.steps 10 \
    --training.seq_len "$seq" --training.local_batch_size "$batch" --metrics.log_freq 10 \
    --metrics.warmup_steps 5 --profiling.enable_profiling --profiling.profile_freq 10 \
    --job.dump_folder "$out/runs/kernels_$name" "$@"
  "$py" - "$out/runs/kernels_$name" $( ((toy)) && echo --rehearse) <<'PY'
import collections, glob, json, sys
# save_traces_folder is the recipe's (TorchTitan's 8B file says profile_trace)
paths = sorted(glob.glob(sys.argv[1] + "/*/iteration_*/rank0_trace.json"))
if not paths:
    sys.exit("no trace written under " + sys.argv[1])
events = json.load(open(paths[-1]))
events = events.get("traceEvents", events) if isinstance(events, dict) else events
by = collections.defaultdict(lambda: [0.0, 0])
for e in events:
    if e.get("cat") in ("gpu_kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
        key = e["name"].replace("(anonymous namespace)::", "").split("(")[0][:110]
        by[key][0] += e["dur"]
        by[key][1] += 1
total = sum(v[0] for v in by.values())
if not total:
    sys.exit(f"no GPU kernels in {paths[-1]} (a CPU run has none)" if "--rehearse" not in sys.argv else 0)
print(f"GPU time of the traced step: {total / 1e3:.2f} ms in {sum(v[1] for v in by.values())} kernels/copies ({paths[-1]})")
print("| share | ms | count | kernel |\n|---:|---:|---:|---|")
for k, (us, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"| {100 * us / total:.1f} % | {us / 1e3:.2f} | {n} | `{k}` |")
PY
}
