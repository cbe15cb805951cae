# Sourced by scripts/offline_bundle.sh, scripts/gpu_check.sh and
# scripts/check_torch.sh: the offline bundle's package list, unpacking it into
# a prefix, and the CMake arguments that build against that prefix alone.

# The build's Debian dependencies that a GPU node without -dev packages lacks:
# headers and CMake configs (-dev), the shared libraries they link (runtime),
# and protoc. Not benchmark (the GPU check builds no benchmarks), not gloo's
# libraries (only its headers: LibTorch carries Gloo's code).
ctitan_offline_debs=(
  nlohmann-json3-dev libcli11-dev
  libtomlplusplus-dev libtomlplusplus3
  libsqlite3-dev libsqlite3-0
  zlib1g-dev zlib1g
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libisal-dev libisal2
  libboost1.74-dev
  libgtest-dev libgmock-dev
  libgloo-dev
)

# offline_unpack BUNDLE PREFIX: every .deb of BUNDLE into PREFIX (dpkg -x, or
# ar + tar where dpkg is missing), absolute symlinks re-pointed into PREFIX.
# Idempotent: a PREFIX stamped with the same MANIFEST is left as it is.
offline_unpack() {
  local bundle=$1 prefix=$2 deb link target
  [ -f "$bundle/MANIFEST" ] || { echo "offline: '$bundle' holds no MANIFEST; make it with scripts/offline_bundle.sh $bundle" >&2; return 2; }
  if cmp -s "$bundle/MANIFEST" "$prefix/.ctitan-manifest"; then return 0; fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)  # absolute: symlinks and CMake paths point into it
  for deb in "$bundle"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else  # a .deb is an ar archive; its files are data.tar.{xz,gz,zst}
      local member
      member=$(ar t "$deb" | grep '^data\.tar') || { echo "offline: $deb holds no data.tar" >&2; return 1; }
      case $member in
        *.xz) ar p "$deb" "$member" | tar -x -J -C "$prefix" -f - ;;
        *.gz) ar p "$deb" "$member" | tar -x -z -C "$prefix" -f - ;;
        *.zst) ar p "$deb" "$member" | zstd -dc | tar -x -C "$prefix" -f - ;;
        *) ar p "$deb" "$member" | tar -x -C "$prefix" -f - ;;
      esac
    fi
  done
  # zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13: into the prefix.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi
  done < <(find "$prefix" -type l -lname '/*')
  cp "$bundle/MANIFEST" "$prefix/.ctitan-manifest"
}

# offline_env PREFIX: protoc (run during the build) and the tests' binaries find
# the prefix's shared libraries; CMake's find_* look there first.
offline_env() {
  local prefix
  prefix=$(realpath -m "$1")
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# offline_cmake_args PREFIX: the configure arguments for a build against the
# prefix (printed one per line, for mapfile).
offline_cmake_args() {
  local prefix
  prefix=$(realpath -m "$1")
  printf '%s\n' "-DCMAKE_PREFIX_PATH=$prefix/usr" "-DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu" \
    "-DCMAKE_PROGRAM_PATH=$prefix/usr/bin"
}

# source_fingerprint ROOT: one hash over what a build compiles (C++ and CUDA
# sources, headers, CMake files, protos) found by name, so that it is the same with or
# without git (a GPU node gets a copy of the tree, not the repository).
source_fingerprint() {
  (cd "$1" && find CMakeLists.txt cmake common profiling trainer results reports planner harness tests -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cmake' -o -name CMakeLists.txt -o -name '*.in' -o -name '*.proto' \) \
    -not -path 'tests/fuzz/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

# torch_library_path PYTHON: the folders a binary built against PYTHON's torch
# loads from (torch/lib and the nvidia-* wheels' lib folders), colon-separated.
torch_library_path() {
  "$1" - <<'PY'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
dirs += sorted(d for d in glob.glob(os.path.join(site, "nvidia", "*", "lib")) if os.path.isdir(d))
print(":".join(dirs))
PY
}

# tree_manifest ROOT OUT: the commit a GPU node's evidence is credited to.
# Refuses (one line, exit 2) a tree with changes git sees, tracked or
# untracked-not-ignored (both travel to a node); else writes OUT, the sha256 of
# every tracked file, and prints HEAD's commit.
tree_manifest() {
  local root=$1 manifest=$2 dirty
  git -C "$root" rev-parse --verify -q HEAD >/dev/null ||
    { echo "tree_manifest: $root is not a git checkout with a commit; evidence names a commit" >&2; return 2; }
  dirty=$(git -C "$root" status --porcelain | head -n 5 | tr '\n' ' ')
  if [ -n "$dirty" ]; then
    echo "tree_manifest: $root has uncommitted changes ($dirty); commit them (or stash) first: GPU evidence is of committed code" >&2
    return 2
  fi
  (cd "$root" && git ls-files -z | LC_ALL=C sort -z | xargs -0 sha256sum) >"$manifest"
  git -C "$root" rev-parse HEAD
}

# tree_matches ROOT MANIFEST COMMIT: ROOT's files are those of the tree_manifest
# MANIFEST of COMMIT (a file changed or gone: one line naming the first few, status 1).
tree_matches() {
  local root=$1 manifest=$2 commit=$3 bad
  [ -f "$manifest" ] || { echo "the prebuilt binaries name commit $commit but the bundle has no ${manifest##*/}: rebuild them (scripts/gpu_prebuilt.sh)"; return 1; }
  bad=$(cd "$root" && sha256sum -c --quiet "$manifest" 2>/dev/null | sed 's/: .*//' | head -n 5 | tr '\n' ' ')
  if [ -n "$bad" ] || ! (cd "$root" && sha256sum -c --status "$manifest" 2>/dev/null); then
    echo "this tree is not commit ${commit:0:12}, which the prebuilt binaries were built from (${bad:-files differ}); run on that commit's tree, or rebuild with scripts/gpu_prebuilt.sh"
    return 1
  fi
  echo "the tree is commit ${commit:0:12}'s: every tracked file checked"
}
