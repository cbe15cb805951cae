#!/bin/sh
# Whole-run overhead of the profiler, measured side by side in one run:
# a ctitan built without the tracer (BASE) against this build (NEW) with
# profiling off, and NEW with profiling on, alternating A/B/C so machine
# load drifts hit all three alike. Prints each run's steady-state tps
# (summary.json tps_median) and the median per variant.
#
#   tests/bench/profiling_overhead.sh BASE_CTITAN NEW_CTITAN [ROUNDS] [extra train args...]
#
# Default workload: debugmodel, fp32, seq 256, batch 8, 30 steps, 1 thread
# (OMP_NUM_THREADS=1), markov data, peak FLOPs given (no GEMM measurement).
set -eu
base=$1; new=$2; rounds=${3:-5}
shift 2; [ $# -gt 0 ] && shift
out=$(mktemp -d /tmp/ctitan_overhead.XXXXXX)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common="--model.flavor debugmodel --training.mixed_precision_param float32 --training.seq_len 256
  --training.local_batch_size 8 --training.steps 30 --training.dataset markov --metrics.log_freq 10
  --metrics.warmup_steps 5 --metrics.peak_tflops 1 --metrics.disable_color_printing"
tps() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tps_median'])" "$1/summary.json"; }
for i in $(seq 1 "$rounds"); do
  for v in base new new_prof; do
    d=$out/$v.$i
    case $v in
      base) bin=$base; prof="" ;;
      new) bin=$new; prof="" ;;
      new_prof) bin=$new; prof="--profiling.enable_profiling --profiling.profile_freq 10" ;;
    esac
    # shellcheck disable=SC2086
    "$bin" train $common $prof "$@" --job.dump_folder "$d" > "$d.log" 2>&1
    echo "$v round $i: tps $(tps "$d")"
    grep -h "profiling overhead" "$d.log" || true
  done
done
for v in base new new_prof; do
  printf '%s median tps: ' "$v"
  for d in "$out/$v".*; do [ -d "$d" ] && tps "$d"; done | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
done
echo "run directories: $out"
