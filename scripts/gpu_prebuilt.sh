#!/usr/bin/env bash
# Build the GPU check's binaries here, so that a GPU node whose time is short
# runs them instead of compiling for minutes (docs/gpu.md):
#   scripts/gpu_prebuilt.sh BUNDLE [TORCH_VERSION]      (default 2.11.0)
# BUNDLE is scripts/offline_bundle.sh's folder. Only from a commit: a tree with
# uncommitted changes is refused (exit 2), since what the node measures is
# credited to the commit named in BUILT. Builds `ctitan` and the gpu
# tests against PyPI's torch==TORCH_VERSION and the bundle's libraries
# (scripts/check_torch.sh VERSION --offline BUNDLE --gpu-only) and copies them
# into BUNDLE/prebuilt with BUILT: the exact torch.__version__ (CUDA variant
# included), the sources' fingerprint (scripts/lib/offline.sh) and the commit,
# and TREE.sha256, the sha256 of every tracked file. On the node,
# scripts/gpu_check.sh --offline BUNDLE uses them only when its torch and its
# sources are the same and they load there (otherwise it builds), and refuses
# to run at all on a tree that is not that commit's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/offline.sh
source "$root/scripts/lib/offline.sh"
usage="usage: scripts/gpu_prebuilt.sh BUNDLE [TORCH_VERSION]"
bundle=${1:?$usage}
version=${2:-2.11.0}
[ -f "$bundle/MANIFEST" ] || { echo "gpu_prebuilt: '$bundle' is not an offline bundle (no MANIFEST); make it with scripts/offline_bundle.sh $bundle" >&2; exit 2; }
bundle="$(cd "$bundle" && pwd)"
manifest=$(mktemp)
trap 'rm -f "$manifest"' EXIT
commit=$(tree_manifest "$root" "$manifest") || exit 2
"$root/scripts/check_torch.sh" "$version" --offline "$bundle" --gpu-only
build="$root/build-torch-$version-offline"
pre=$bundle/prebuilt
rm -rf "$pre"
mkdir -p "$pre"
cp "$build/ctitan" "$build/tests/ctitan_gpu_tests" "$pre/"
strip --strip-debug "$pre/ctitan" "$pre/ctitan_gpu_tests"
torch=$("$root/.venv-torch-$version/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
[ -z "$(git -C "$root" status --porcelain)" ] && [ "$(git -C "$root" rev-parse HEAD)" = "$commit" ] ||
  { echo "gpu_prebuilt: the tree changed while building (commit or files); build again" >&2; exit 2; }
cp "$manifest" "$pre/TREE.sha256"
echo "$torch $(source_fingerprint "$root") $commit" >"$pre/BUILT"
bytes=$(du -cb "$bundle" | tail -n 1 | cut -f1)
echo "[gpu_prebuilt] $pre: ctitan and ctitan_gpu_tests for torch $torch, sources $(cut -d' ' -f2 "$pre/BUILT"), commit ${commit:0:12}; the bundle is $((bytes / 1024)) KiB"
((bytes <= 60 * 1024 * 1024)) || { echo "gpu_prebuilt: the bundle is $bytes bytes, over the 60 MiB a GPU node's transfer allows" >&2; exit 1; }
