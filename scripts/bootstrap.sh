#!/usr/bin/env bash
# Set up everything ctitan needs and build it. Idempotent: a second run only
# re-checks (a few seconds) and lets ninja rebuild what changed.
#   Debian packages  -> apt-get (only the missing ones)
#   LibTorch         -> PyPI's torch wheel in .venv (pinned, scripts/requirements.txt)
#   test readers     -> tensorboard, transformers in .venv (pinned, scripts/requirements-test.txt;
#                       tests only: ctitan never runs Python)
#   build            -> CMake + Ninja in build/ (ccache when present)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[bootstrap] %s\n' "$*"; }

# --- Debian packages ---------------------------------------------------------
debs=(build-essential cmake ninja-build ccache pkg-config git
      python3 python3-venv
      nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libsqlite3-dev zlib1g-dev
      libprotobuf-dev protobuf-compiler libisal-dev libboost-math-dev
      googletest libgtest-dev libbenchmark-dev libgloo-dev chromium
      clang libclang-rt-14-dev)  # the fuzz targets (ctest -L fuzz; docs/fuzzing.md)
# The `slurm` tests start their own one-node cluster from these (as root, in a
# temporary folder; tests/slurm/slurm_cluster.h). CTITAN_SKIP_SLURM=1 leaves
# them out (the package scripts enable system services); the tests then skip.
[ "${CTITAN_SKIP_SLURM:-0}" = 1 ] || debs+=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A python3 from elsewhere (pyenv, conda) with working venv needs neither.
if python3 -c 'import venv, ensurepip' 2>/dev/null; then
  filtered=(); for p in "${missing[@]}"; do [[ $p == python3* ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- LibTorch (torch wheel) in the project's virtual environment ----------------
venv="$root/.venv"
req="$root/scripts/requirements.txt"
req_test="$root/scripts/requirements-test.txt"
stamp="$venv/.ctitan-requirements"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
# First install: torch 2.15.0's CUDA wheels unpack to 5.7 GB (.venv here),
# and pip downloads them to $TMPDIR and keeps a copy in its cache first (the
# wheels are compressed: less than that again, each). Say so in one line
# rather than let pip fail half-way on a full disk.
need_gb=12
# pip's own temporary files go in a folder removed when bootstrap ends: pip
# left 0.5 GB of pip-unpack-* in /tmp after a fresh clone's install here.
pip_install() {
  local tmp; tmp="$(mktemp -d "${TMPDIR:-/tmp}/ctitan-pip.XXXXXX")"
  local rc=0
  TMPDIR="$tmp" "$venv/bin/pip" install -q --disable-pip-version-check "$@" || rc=$?
  rm -rf "$tmp"
  return "$rc"
}
free_kib() {  # the free KiB of the filesystem that `$1` (or its nearest existing parent) lies on
  local d="$1"; while [ ! -d "$d" ]; do d="$(dirname "$d")"; done
  df -Pk "$d" | awk 'NR == 2 { print $4 }'
}
if ! cmp -s "$req" "$stamp"; then
  for d in "$venv" "${TMPDIR:-/tmp}" "${PIP_CACHE_DIR:-$HOME/.cache/pip}"; do
    kib=$(free_kib "$d")
    if [ "$kib" -lt $((need_gb * 1048576)) ]; then
      echo "bootstrap: installing torch needs about $need_gb GiB free where $d lies ($((kib / 1024)) MiB free): free space there, or point TMPDIR / PIP_CACHE_DIR to a disk with room" >&2
      exit 2
    fi
  done
  log "installing $(grep -v '^#' "$req" | tr '\n' ' ')(first time: a few GB, cached by pip afterwards)"
  pip_install -r "$req"
  cp "$req" "$stamp"
fi
# The readers the tests check ctitan's files with (TensorBoard event files,
# Hugging Face checkpoints). CTITAN_SKIP_TEST_PYTHON=1 leaves them out; the
# tests that need them then skip with a message.
if [ "${CTITAN_SKIP_TEST_PYTHON:-0}" != 1 ] && ! cmp -s "$req_test" "$stamp-test"; then
  log "installing test readers: $(grep -v '^#' "$req_test" | tr '\n' ' ')"
  pip_install -r "$req_test"
  cp "$req_test" "$stamp-test"
fi

# --- configure + build ---------------------------------------------------------
# CTITAN_BOOTSTRAP_BUILD=0: set up only (scripts/gpu_check.sh configures its own build).
if [ "${CTITAN_BOOTSTRAP_BUILD:-1}" = 0 ]; then log "set up (CTITAN_BOOTSTRAP_BUILD=0: not building)"; exit 0; fi
build="${CTITAN_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$root/.cmake-configure.log" 2>&1 \
    || { cat "$root/.cmake-configure.log"; exit 1; }
fi
# CTITAN_BUILD_TARGETS: only these targets (scripts/run.sh builds just `ctitan`;
# the tests and benchmarks are built by scripts/test.sh).
targets=()
[ -n "${CTITAN_BUILD_TARGETS:-}" ] && read -r -a targets <<<"$CTITAN_BUILD_TARGETS"
log "building ${targets[*]:-everything} (ninja, $(nproc) cores)"
cmake --build "$build" ${targets[@]:+--target "${targets[@]}"} -- -j"$(nproc)"
