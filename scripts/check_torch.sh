#!/usr/bin/env bash
# Build ctitan against another torch release and run its unit tests, to prove
# the build takes LibTorch from any supported torch (2.11 through 2.15):
#   scripts/check_torch.sh VERSION [--offline BUNDLE] [--gpu-only]   e.g. scripts/check_torch.sh 2.11.0
# Makes .venv-torch-VERSION (PyPI's torch==VERSION wheel, pinned; pip's cache
# afterwards), configures build-torch-VERSION with CTITAN_TORCH_PYTHON set to
# that venv's Python, builds `ctitan` and the unit tests, runs `ctest -L unit`,
# and prints the times of each step. Needs what scripts/bootstrap.sh installs
# (the Debian packages); the project's own .venv and build/ are not touched.
# --offline BUNDLE: as on an offline GPU node (docs/gpu.md): the build takes its
# dependencies from the bundle (scripts/offline_bundle.sh) unpacked into
# build-torch-VERSION-offline/prefix, and configure, build and tests run with
# the host's copies of those -dev packages covered (scripts/lib/without_host_dev.sh,
# root only); scripts/lib/check_build_paths.py checks the compile and link lines.
# --gpu-only: build `ctitan` and the gpu tests only, run no tests (what
# scripts/gpu_prebuilt.sh carries to a GPU node).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/offline.sh
source "$root/scripts/lib/offline.sh"
usage="usage: scripts/check_torch.sh VERSION [--offline BUNDLE] [--gpu-only] (e.g. 2.11.0)"
version=${1:?$usage}
shift
bundle=
gpu_only=0
while (($#)); do
  case $1 in
    --offline) [ -n "${2:-}" ] && [ -d "$2" ] || { echo "check_torch: --offline needs the bundle folder; $usage" >&2; exit 2; }
               bundle="$(cd "$2" && pwd)"; shift 2 ;;
    --gpu-only) gpu_only=1; shift ;;
    *) echo "check_torch: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
[[ $version =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { echo "check_torch: '$version' is not a torch version like 2.11.0" >&2; exit 2; }
venv="$root/.venv-torch-$version"
build="$root/build-torch-$version${bundle:+-offline}"
wrap=()
cmake_args=()
if [ -n "$bundle" ]; then
  offline_unpack "$bundle" "$build/prefix"
  offline_env "$build/prefix"
  mapfile -t cmake_args < <(offline_cmake_args "$build/prefix")
  wrap=("$root/scripts/lib/without_host_dev.sh")
fi
log() { printf '[check_torch %s] %s\n' "$version" "$*"; }
t0=$SECONDS
stamp() { local t=$((SECONDS - t0)); printf '%dm%02ds' $((t / 60)) $((t % 60)); }

if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  log "creating $venv with torch==$version (a few GB the first time)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$version"
fi
log "torch: $("$venv/bin/python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')  [$(stamp)]"

if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  "${wrap[@]}" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTITAN_BUILD_BENCHMARKS=OFF \
    -DCTITAN_TORCH_PYTHON="$venv/bin/python" "${cmake_args[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
[ -z "$bundle" ] || "$venv/bin/python" "$root/scripts/lib/check_build_paths.py" "$build" "$build/prefix"
targets=(ctitan ctitan_unit_tests ctitan_gpu_tests)
((gpu_only)) && targets=(ctitan ctitan_gpu_tests)
log "building ${targets[*]} ($(nproc) cores)"
"${wrap[@]}" cmake --build "$build" --target "${targets[@]}" -- -j"$(nproc)"
log "built [$(stamp)]"
ldd "$build/ctitan" | grep -q "$venv/.*libtorch_cpu.so" \
  || { echo "check_torch: $build/ctitan does not load libtorch from $venv" >&2; exit 1; }
((gpu_only)) && exit 0
log "ctest -L \"unit|gpu\" (the gpu tests skip without a GPU)"
(cd "$build" && "${wrap[@]}" ctest -L "unit|gpu" --output-on-failure -j"$(nproc)")
log "green: ctitan built against torch $version${bundle:+ from the offline bundle} and ctest -L unit passed [$(stamp)]"
