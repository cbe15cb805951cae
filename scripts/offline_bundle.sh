#!/usr/bin/env bash
# Everything the build needs that an offline GPU node lacks, in one folder
# (docs/gpu.md): run where Debian's archive is reachable, carry DIR to the node,
# then `scripts/gpu_check.sh --offline DIR` there builds with no apt and no pip.
#   scripts/offline_bundle.sh DIR
# DIR gets the .deb files of the build's Debian dependencies (apt-get download:
# the versions this machine's apt sees, unpacked on the node with dpkg -x into
# a prefix, never into /) and MANIFEST (package, version, size, sha256). LibTorch
# is not in it: the node's own Python brings torch (CTITAN_TORCH_PYTHON).
# The node needs g++, CMake >= 3.25, Ninja, Python with torch 2.11-2.15, and
# nvcc for the CUDA toolkit's headers; a glibc no older than Debian 12's (2.36).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/offline.sh
source "$root/scripts/lib/offline.sh"
dir=${1:?usage: scripts/offline_bundle.sh DIR}
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
log() { printf '[offline_bundle] %s\n' "$*"; }

rm -f "$dir"/*.deb "$dir/MANIFEST"
log "downloading ${#ctitan_offline_debs[@]} Debian packages into $dir"
(cd "$dir" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "${ctitan_offline_debs[@]}" >/dev/null) || {
  echo "offline_bundle: apt-get download failed (see above); run 'apt-get update' or check the network, then rerun" >&2
  exit 1
}
{
  echo "# ctitan offline bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# package version bytes sha256"
  for f in "$dir"/*.deb; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
} >"$dir/MANIFEST"
bytes=$(du -cb "$dir"/*.deb | tail -n 1 | cut -f1)
limit=$((40 * 1024 * 1024))
log "$(ls "$dir"/*.deb | wc -l) packages, $((bytes / 1024)) KiB (limit $((limit / 1024)) KiB): $dir/MANIFEST"
((bytes <= limit)) || { echo "offline_bundle: $bytes bytes is over the 40 MiB a GPU node's transfer allows" >&2; exit 1; }
