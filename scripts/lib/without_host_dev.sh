#!/usr/bin/env bash
# Runs a command as if this Debian machine were an offline GPU node without
# the build's -dev packages: in a private mount namespace, every header, CMake
# config, static library and protoc that those packages (the offline bundle's
# list, scripts/lib/offline.sh) installed on this machine is covered by an
# empty file, so a build that reached for one instead of the bundle's prefix
# fails. Their shared-library symlinks stay (covering one would cover the
# runtime library it points to): scripts/lib/check_build_paths.py checks the
# link lines for them. Needs root (unshare -m).
#   scripts/lib/without_host_dev.sh COMMAND [ARGS...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=offline.sh
source "$here/offline.sh"
hidden=()
for p in "${ctitan_offline_debs[@]}"; do
  [[ $p == *-dev || $p == protobuf-compiler ]] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || continue
  while IFS= read -r f; do
    [[ $f == /usr/share/doc/* ]] && continue
    [ -f "$f" ] && [ ! -L "$f" ] && hidden+=("$f")
  done < <(dpkg -L "$p")
done
printf '%s\n' "${hidden[@]}" >"${TMPDIR:-/tmp}/ctitan-hidden-files.txt"
echo "[without_host_dev] covering ${#hidden[@]} files of the host's -dev packages (list: ${TMPDIR:-/tmp}/ctitan-hidden-files.txt)" >&2
exec unshare -m --propagation private -- bash -c '
  list=$1; shift
  while IFS= read -r f; do mount --bind /dev/null "$f" || exit 1; done <"$list"
  exec "$@"' _ "${TMPDIR:-/tmp}/ctitan-hidden-files.txt" "$@"
