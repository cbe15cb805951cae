#!/usr/bin/env bash
# Build the GPU check's binaries here, so that a GPU node whose time is short
# runs them instead of compiling for minutes (docs/gpu.md):
#   scripts/gpu_prebuilt.sh BUNDLE [TORCH_VERSION]      (default 2.11.0)
# BUNDLE is scripts/offline_bundle.sh's folder. Builds `ctitan` and the gpu
# tests against PyPI's torch==TORCH_VERSION and the bundle's libraries
# (scripts/check_torch.sh VERSION --offline BUNDLE --gpu-only) and copies them
# into BUNDLE/prebuilt with BUILT: the exact torch.__version__ (CUDA variant
# included) and the sources' fingerprint (scripts/lib/offline.sh). On the node,
# scripts/gpu_check.sh --offline BUNDLE uses them only when its torch and its
# tree are the same and they load there; otherwise it builds as before.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/offline.sh
source "$root/scripts/lib/offline.sh"
usage="usage: scripts/gpu_prebuilt.sh BUNDLE [TORCH_VERSION]"
bundle=${1:?$usage}
version=${2:-2.11.0}
[ -f "$bundle/MANIFEST" ] || { echo "gpu_prebuilt: '$bundle' is not an offline bundle (no MANIFEST); make it with scripts/offline_bundle.sh $bundle" >&2; exit 2; }
bundle="$(cd "$bundle" && pwd)"
"$root/scripts/check_torch.sh" "$version" --offline "$bundle" --gpu-only
build="$root/build-torch-$version-offline"
pre=$bundle/prebuilt
rm -rf "$pre"
mkdir -p "$pre"
cp "$build/ctitan" "$build/tests/ctitan_gpu_tests" "$pre/"
strip --strip-debug "$pre/ctitan" "$pre/ctitan_gpu_tests"
torch=$("$root/.venv-torch-$version/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "$torch $(source_fingerprint "$root")" >"$pre/BUILT"
bytes=$(du -cb "$bundle" | tail -n 1 | cut -f1)
echo "[gpu_prebuilt] $pre: ctitan and ctitan_gpu_tests for torch $torch, sources $(cut -d' ' -f2 "$pre/BUILT"); the bundle is $((bytes / 1024)) KiB"
((bytes <= 60 * 1024 * 1024)) || { echo "gpu_prebuilt: the bundle is $bytes bytes, over the 60 MiB a GPU node's transfer allows" >&2; exit 1; }
