#!/usr/bin/env bash
# The offline build's pieces without a GPU or a network (ctest -R scripts.offline):
# unpacking a bundle into a prefix (absolute symlinks re-pointed, a second
# unpack of the same MANIFEST a no-op), scripts/lib/check_build_paths.py
# telling a clean build from one that reached outside the prefix, and the
# scripts' one-line answers to bad arguments.
set -euo pipefail
root=${CTITAN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
source "$root/scripts/lib/offline.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# --- a bundle of one package: a header, a library, and an absolute -dev symlink
pkg=$tmp/pkg
mkdir -p "$pkg/DEBIAN" "$pkg/usr/include" "$pkg/usr/lib/x86_64-linux-gnu" "$pkg/lib/x86_64-linux-gnu"
printf 'Package: libctitantest-dev\nVersion: 1.0\nArchitecture: amd64\nMaintainer: ctitan\nDescription: test\n' >"$pkg/DEBIAN/control"
echo '#define CTITAN_TEST 1' >"$pkg/usr/include/ctitantest.h"
echo 'not really a library' >"$pkg/lib/x86_64-linux-gnu/libctitantest.so.1"
ln -s /lib/x86_64-linux-gnu/libctitantest.so.1 "$pkg/usr/lib/x86_64-linux-gnu/libctitantest.so"
mkdir -p "$tmp/bundle"
dpkg-deb --build -Zgzip "$pkg" "$tmp/bundle/libctitantest-dev.deb" >/dev/null
echo "libctitantest-dev 1.0 1 0" >"$tmp/bundle/MANIFEST"

prefix=$tmp/prefix
offline_unpack "$tmp/bundle" "$prefix"
[ -f "$prefix/usr/include/ctitantest.h" ] || fail "header not unpacked"
[ "$(readlink "$prefix/usr/lib/x86_64-linux-gnu/libctitantest.so")" = "$prefix/lib/x86_64-linux-gnu/libctitantest.so.1" ] ||
  fail "absolute symlink not re-pointed into the prefix: $(readlink "$prefix/usr/lib/x86_64-linux-gnu/libctitantest.so")"
touch "$prefix/marker"
offline_unpack "$tmp/bundle" "$prefix"
[ -f "$prefix/marker" ] || fail "a second unpack of the same MANIFEST unpacked again"
msg=$(offline_unpack "$tmp" "$tmp/p2" 2>&1) && fail "a folder without MANIFEST was accepted"
[[ $msg == *"holds no MANIFEST"* ]] || fail "unexpected message: $msg"

# --- check_build_paths.py on a build that stays inside the prefix, then on two that do not
build=$tmp/build
mkdir -p "$build" "$tmp/site/torch/share/cmake"
printf 'CMAKE_HOME_DIRECTORY:INTERNAL=%s\nCTITAN_TORCH_PREFIX:PATH=%s\n' "$root" "$tmp/site/torch/share/cmake" >"$build/CMakeCache.txt"
compile() {  # compile_commands.json with one command taking the given include flags
  printf '[{"directory": "%s", "file": "%s/trainer/train.cpp", "command": "g++ -I%s -isystem %s %s -c x.cpp"}]\n' \
    "$build" "$root" "$root" "$prefix/usr/include" "$1" >"$build/compile_commands.json"
}
links() { printf 'build ctitan: CXX_EXECUTABLE_LINKER__ctitan x.o\n  LINK_LIBRARIES = %s\n' "$1" >"$build/build.ninja"; }
compile "-isystem $tmp/site/torch/include"
links "$prefix/usr/lib/x86_64-linux-gnu/libctitantest.so -lpthread"
python3 "$root/scripts/lib/check_build_paths.py" "$build" "$prefix" >/dev/null || fail "a clean build was refused"
compile "-isystem /usr/include/gloo"
out=$(python3 "$root/scripts/lib/check_build_paths.py" "$build" "$prefix") && fail "an include outside the prefix passed"
[[ $out == *"include folder /usr/include/gloo is outside the prefix"* ]] || fail "unexpected: $out"
compile ""
links "/usr/lib/x86_64-linux-gnu/libctitantest.so"
out=$(python3 "$root/scripts/lib/check_build_paths.py" "$build" "$prefix") && fail "a system library passed"
[[ $out == *"takes /usr/lib/x86_64-linux-gnu/libctitantest.so from outside the prefix"* ]] || fail "unexpected: $out"
links "-lctitantest"
out=$(python3 "$root/scripts/lib/check_build_paths.py" "$build" "$prefix") && fail "-lctitantest passed"
[[ $out == *"takes -lctitantest from the linker's default folders"* ]] || fail "unexpected: $out"
links "prefix/usr/lib/x86_64-linux-gnu/libctitantest.so"  # ninja's build-relative form: outside here
out=$(python3 "$root/scripts/lib/check_build_paths.py" "$build" "$prefix") && fail "a build-relative path outside the prefix passed"

# --- bad arguments: one line, exit 2
expect2() {
  local rc=0 err
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "$* exited $rc, not 2"
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "$* said more than one line: $err"
}
expect2 "$root/scripts/gpu_check.sh" --offline "$tmp/no-such-bundle" --out "$tmp/out"
expect2 "$root/scripts/gpu_check.sh" --bogus
expect2 "$root/scripts/check_torch.sh" latest
echo "offline pieces: ok"
