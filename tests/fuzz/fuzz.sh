#!/usr/bin/env bash
# The fuzz targets' build and runs, as the `fuzz` CTest label calls them
# (tests/CMakeLists.txt; docs/fuzzing.md):
#
#   fuzz.sh build BUILD_DIR                 configure + build BUILD_DIR/fuzz with clang (ccache, -j2)
#   fuzz.sh run BUILD_DIR TARGET SECONDS    fuzz TARGET for SECONDS over a fresh seed corpus
#   fuzz.sh seeds BUILD_DIR TARGET DIR      only write TARGET's seed corpus into DIR
#
# Seeds come from the project's own files (recipes, test recipes, golden
# checkpoint, tests/fuzz/seeds) copied into BUILD_DIR/fuzz/corpus/TARGET,
# since libFuzzer adds the inputs it finds to the corpus folder.
# Exit 77 (CTest: skipped) with one line where clang or its libFuzzer
# runtime is missing. CTITAN_FUZZ_CXX picks the compiler; CTITAN_FUZZ_JOBS
# the build's parallelism (default 2).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cmd="${1:-}"
build="${2:?usage: fuzz.sh build|run|seeds BUILD_DIR [TARGET SECONDS|DIR]}"
fuzz_dir="$build/fuzz"
skip() { echo "fuzz: skipped: $*"; exit 77; }

find_clang() {
  local c
  for c in "${CTITAN_FUZZ_CXX:-}" clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

# The runtime check: a one-line fuzz target must link with -fsanitize=fuzzer.
check_fuzzer_runtime() {
  local cxx="$1" tmp
  tmp="$(mktemp -d)"
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$tmp/t.cpp"
  if ! "$cxx" -fsanitize=fuzzer,address,undefined "$tmp/t.cpp" -o "$tmp/t" >"$tmp/log" 2>&1; then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
}

# Writes TARGET's seed corpus into DIR (one file per seed).
seeds() {
  local target="$1" out="$2" f i=0 shared="$src/../shared/data"
  mkdir -p "$out"
  add() { cp "$1" "$out/$(printf '%03d' $i)-$(basename "$1")"; i=$((i + 1)); }
  case "$target" in
    trainer_config)
      for f in "$src"/tests/recipes/torchtitan/*.toml "$src"/recipes/*.toml; do add "$f"; done ;;
    sweep_spec)
      for f in "$src"/recipes/sweeps/*.toml "$src"/recipes/published/*.toml; do add "$f"; done ;;
    tokenizer)
      for f in "$src"/tests/fuzz/seeds/tokenizer_*.json; do add "$f"; done
      # The unit tests' small GPT-2 and Llama-3 tokenizers (the exact files HF read).
      awk '/R"json\(/{on=1; n++; next} /\)json"/{on=0} on{print > (dir "/test-tokenizer-" n ".json")}' \
        dir="$out" "$src/tests/unit/tokenizer_test.cpp"
      if [ -f "$shared/tokenizer.json" ]; then
        add "$shared/tokenizer.json"
        [ -f "$shared/tokenizer_config.json" ] &&
          { cat "$shared/tokenizer.json"; printf '\n#tokenizer_config.json\n'; cat "$shared/tokenizer_config.json"; } \
            >"$out/shared-with-config.json"
      fi ;;
    checkpoint_metadata)
      # The first byte picks the document: 0 metadata.json, 1 rank<R>.json, 2 a Hugging Face index.
      local ckpt="$src/tests/golden/checkpoint_v2_fsdp2/step-2"
      { printf '\x00'; cat "$ckpt/metadata.json"; } >"$out/golden-metadata.json"
      { printf '\x00'; cat "$src/tests/fuzz/seeds/metadata_v3.json"; } >"$out/metadata-v3.json"
      { printf '\x01'; cat "$ckpt/rank0.json"; } >"$out/golden-rank0.json"
      { printf '\x01'; cat "$ckpt/rank1.json"; } >"$out/golden-rank1.json"
      { printf '\x02'; cat "$src/tests/fuzz/seeds/model.safetensors.index.json"; } >"$out/hf-index.json" ;;
    safetensors_header)
      # Two small files as save_pretrained writes them: length, JSON header padded to 8, data.
      local h1='{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"c":{"dtype":"I64","shape":[],"data_offsets":[22,30]}}'
      local h2='{"model.embed_tokens.weight":{"dtype":"F16","shape":[4,1],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0,5],"data_offsets":[8,8]}}'
      local h n
      for n in 1 2; do
        h="$h1"; [ $n = 2 ] && h="$h2"
        while [ $(( ${#h} % 8 )) -ne 0 ]; do h="$h "; done
        { printf "\\x$(printf %02x $(( ${#h} & 255 )))\\x$(printf %02x $(( ${#h} >> 8 )))\\x00\\x00\\x00\\x00\\x00\\x00"
          printf '%s' "$h"; head -c 32 /dev/zero | tr '\0' '\1'; } >"$out/seed-$n.safetensors"
      done ;;
    metrics_ingest)
      # metrics.jsonl NUL summary.json NUL env.json
      local s="$src/tests/fuzz/seeds"
      { cat "$src/tests/golden/checkpoint_v2_fsdp2/metrics.jsonl"; printf '\0'; cat "$s/summary.json"; printf '\0'
        cat "$s/env.json"; } >"$out/golden-run"
      { cat "$s/validation.jsonl"; printf '\0'; cat "$s/summary.json"; printf '\0'; cat "$s/env.json"; } >"$out/validation-run"
      { printf '\0{}\0'; } >"$out/empty-run" ;;
    *) echo "fuzz: unknown target '$target'"; exit 2 ;;
  esac
}

case "$cmd" in
  build)
    cxx="$(find_clang)" || skip "no clang++ found (Debian: apt-get install clang libclang-rt-14-dev; or set CTITAN_FUZZ_CXX)"
    check_fuzzer_runtime "$cxx" || skip "$cxx cannot link -fsanitize=fuzzer (Debian: apt-get install libclang-rt-14-dev)"
    start=$(date +%s)
    if [ ! -f "$fuzz_dir/build.ninja" ]; then
      launcher=()
      command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
      cmake -S "$src/tests/fuzz" -B "$fuzz_dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCTITAN_MAIN_BINARY_DIR="$build" "${launcher[@]}" >"$fuzz_dir.configure.log" 2>&1 ||
        { cat "$fuzz_dir.configure.log"; exit 1; }
    fi
    # -k 0: a target that does not compile fails its own `run` test (listed in
    # not-built.txt, so a stale binary is never fuzzed); the others still build.
    set +e
    CCACHE_BASEDIR="$src" cmake --build "$fuzz_dir" -- -k 0 -j"${CTITAN_FUZZ_JOBS:-2}"
    set -e
    : >"$fuzz_dir/not-built.txt"
    for t in "$fuzz_dir"/CMakeFiles/fuzz_*.dir; do
      t="$(basename "$t" .dir)"
      ninja -C "$fuzz_dir" -n "$t" 2>/dev/null | grep -q 'no work to do' || echo "${t#fuzz_}" >>"$fuzz_dir/not-built.txt"
    done
    echo "fuzz: built $fuzz_dir with $cxx in $(( $(date +%s) - start )) s"
    if [ -s "$fuzz_dir/not-built.txt" ]; then
      echo "fuzz: did not compile (their tests fail): $(tr '\n' ' ' <"$fuzz_dir/not-built.txt")"
    fi
    ;;
  run)
    target="${3:?target}"
    secs="${4:-25}"
    bin="$fuzz_dir/fuzz_$target"
    if grep -qx "$target" "$fuzz_dir/not-built.txt" 2>/dev/null; then
      echo "fuzz: fuzz_$target did not compile in the last build: see the fuzz.build test's output"
      exit 1
    fi
    if [ ! -x "$bin" ]; then
      find_clang >/dev/null || skip "no clang++ found (Debian: apt-get install clang libclang-rt-14-dev)"
      echo "fuzz: $bin is missing: run 'fuzz.sh build $build' (ctest -L fuzz does it first)"
      exit 1
    fi
    corpus="$fuzz_dir/corpus/$target"
    artifacts="$fuzz_dir/artifacts"
    rm -rf "$corpus"
    mkdir -p "$corpus" "$artifacts"
    seeds "$target" "$corpus"
    nseeds=$(find "$corpus" -type f | wc -l)
    case "$target" in trainer_config | sweep_spec) dict=toml.dict ;; *) dict=json.dict ;; esac
    log="$fuzz_dir/$target.log"
    # Targets that write scratch files (metrics_ingest) run several times faster on tmpfs.
    [ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
    set +e
    # Leaks are checked; a huge allocation (a size taken from the input) is a crash.
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
      "$bin" "$corpus" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=20 \
      -dict="$src/tests/fuzz/$dict" -print_final_stats=1 -artifact_prefix="$artifacts/$target-" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    nfiles=$(find "$corpus" -type f | wc -l)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz: $target: ${execs:-?} execs in $secs s, corpus $nseeds seeds -> $nfiles inputs, ${cov:-cov: ?}, exit $rc"
    if [ $rc -ne 0 ]; then
      grep -E 'ERROR|fuzz: |SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20
      echo "fuzz: $target FAILED: full log $log; reproduce with: $bin <the crash file above>"
      exit 1
    fi
    ;;
  seeds)
    seeds "${3:?target}" "${4:?dir}" ;;
  *)
    echo "usage: fuzz.sh build BUILD_DIR | run BUILD_DIR TARGET SECONDS | seeds BUILD_DIR TARGET DIR"
    exit 2 ;;
esac
