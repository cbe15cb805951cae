#!/usr/bin/env bash
# The GPU check's peer wheels (docs/gpu.md): TorchTitan and what it needs
# beyond a GPU node's own image, pinned in scripts/requirements-gpu-peers.txt,
# downloaded here (PyPI) for the node's Python, with no dependencies resolved
# (the node's torch, tokenizers, pyarrow, ... are used as they are there):
#   scripts/gpu_peer_wheels.sh DIR [PYTHON_VERSION]        (default 3.12)
# scripts/gpu_check.sh --peer-wheels DIR installs them on the node into its
# build folder (pip --no-index --no-deps --target); the TorchTitan peer
# (tests/peer/torchtitan_peer.py) runs with that folder on PYTHONPATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: scripts/gpu_peer_wheels.sh DIR [PYTHON_VERSION]"
dir=${1:?$usage}
pyver=${2:-3.12}
[[ $pyver =~ ^3\.[0-9]+$ ]] || { echo "gpu_peer_wheels: '$pyver' is not a Python version like 3.12; $usage" >&2; exit 2; }
mkdir -p "$dir"
rm -f "$dir"/*.whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
grep -v '^\s*#' "$root/scripts/requirements-gpu-peers.txt" | grep -v '^\s*$' >"$dir/requirements.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" -d "$dir" -r "$dir/requirements.txt"
n=$(ls "$dir"/*.whl | wc -l)
want=$(wc -l <"$dir/requirements.txt")
((n == want)) || { echo "gpu_peer_wheels: $n wheels for $want pins in $dir" >&2; exit 1; }
echo "python $pyver" >"$dir/PYTHON"
bytes=$(du -cb "$dir" | tail -n 1 | cut -f1)
echo "[gpu_peer_wheels] $n wheels for Python $pyver in $dir: $((bytes / 1024)) KiB"
