#!/usr/bin/env bash
# The GPU evidence's pieces that need no GPU (ctest -R scripts.gpu_evidence):
# tree_manifest refusing a tree with uncommitted or untracked changes and
# naming the commit of a clean one; tree_matches telling that commit's files
# from a changed copy; gpu_check.sh refusing (exit 2, one line) to run
# prebuilt binaries on a tree that is not their commit's; gpu_rounds.py's
# medians, spreads and paired ratios against numbers worked out by hand here.
set -euo pipefail
root=${CTITAN_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
source "$root/scripts/lib/offline.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# --- tree_manifest: a repository of two files
repo=$tmp/repo
mkdir -p "$repo/src"
git -C "$repo" init -q
echo 'int main() {}' >"$repo/src/main.cpp"
echo 'notes' >"$repo/README.md"
git -C "$repo" add -A
git -C "$repo" -c user.name=t -c user.email=t@t commit -q -m one
head=$(git -C "$repo" rev-parse HEAD)
commit=$(tree_manifest "$repo" "$tmp/TREE.sha256") || fail "a clean tree was refused"
[ "$commit" = "$head" ] || fail "tree_manifest named $commit, HEAD is $head"
[ "$(wc -l <"$tmp/TREE.sha256")" = 2 ] || fail "the manifest should list the 2 tracked files: $(cat "$tmp/TREE.sha256")"

echo 'int main() { return 1; }' >"$repo/src/main.cpp"
rc=0; msg=$(tree_manifest "$repo" "$tmp/T2" 2>&1) || rc=$?
((rc == 2)) || fail "a modified tracked file: exit $rc, want 2"
[[ $msg == *"uncommitted changes"*"src/main.cpp"* ]] || fail "the refusal should name the file: $msg"
git -C "$repo" checkout -q -- src/main.cpp
echo 'scratch' >"$repo/untracked.txt"
rc=0; msg=$(tree_manifest "$repo" "$tmp/T2" 2>&1) || rc=$?
((rc == 2)) || fail "an untracked file (it travels to the node too): exit $rc, want 2"
rm "$repo/untracked.txt"
rc=0; msg=$(tree_manifest "$tmp" "$tmp/T2" 2>&1) || rc=$?
((rc == 2)) && [[ $msg == *"not a git checkout"* ]] || fail "a folder that is no checkout: exit $rc: $msg"

# --- tree_matches: the node's copy has no .git, only the files
copy=$tmp/copy
mkdir -p "$copy"
cp -r "$repo/src" "$repo/README.md" "$copy/"
msg=$(tree_matches "$copy" "$tmp/TREE.sha256" "$commit") || fail "an exact copy did not match: $msg"
[[ $msg == *"${commit:0:12}"* ]] || fail "the match should name the commit: $msg"
echo 'changed on the node' >>"$copy/README.md"
rc=0; msg=$(tree_matches "$copy" "$tmp/TREE.sha256" "$commit") || rc=$?
((rc == 1)) && [[ $msg == *"not commit ${commit:0:12}"*"README.md"* ]] || fail "a changed file: exit $rc: $msg"
rm "$copy/README.md"
rc=0; msg=$(tree_matches "$copy" "$tmp/TREE.sha256" "$commit") || rc=$?
((rc == 1)) || fail "a missing file was not noticed: $msg"

# --- gpu_check.sh: prebuilt binaries of another tree are refused, exit 2
bundle=$tmp/bundle
mkdir -p "$bundle/prebuilt" "$tmp/pkg/DEBIAN" "$tmp/pkg/usr/include"
printf 'Package: libctitantest-dev\nVersion: 1.0\nArchitecture: amd64\nMaintainer: ctitan\nDescription: test\n' >"$tmp/pkg/DEBIAN/control"
echo '#define CTITAN_TEST 1' >"$tmp/pkg/usr/include/ctitantest.h"
dpkg-deb --build -Zgzip "$tmp/pkg" "$bundle/libctitantest-dev.deb" >/dev/null
echo "libctitantest-dev 1.0 1 0" >"$bundle/MANIFEST"
echo "2.11.0+cu130 0000000000000000 $commit" >"$bundle/prebuilt/BUILT"
printf '%s  README.md\n' "$(printf x | sha256sum | cut -c1-64)" >"$bundle/prebuilt/TREE.sha256"
rc=0
msg=$(CTITAN_BUILD_DIR=$tmp/build-gpu CTITAN_TORCH_PYTHON=true "$root/scripts/gpu_check.sh" --offline "$bundle" \
  --out "$tmp/check" --build-only 2>&1) || rc=$?
((rc == 2)) || fail "gpu_check on a tree that is not the binaries' commit: exit $rc, want 2: $msg"
[[ $msg == *"this tree is not commit ${commit:0:12}"* ]] || fail "gpu_check should say why: $msg"

# --- gpu_rounds.py: the summary of three rounds, one of them short a run
mkdir -p "$tmp/rounds"
python3 - "$root" "$tmp/rounds" <<'PY'
import importlib.util, sys, types
spec = importlib.util.spec_from_file_location("gpu_rounds", sys.argv[1] + "/scripts/lib/gpu_rounds.py")
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
a = types.SimpleNamespace(out=sys.argv[2], configs=["ct_compile", "tt_compile", "ct_eager"])
row = lambda r, c, t: {"round": r, "config": c, "exit": 0, "seconds": 10, "tps_median": t, "mfu_pct": None,
                       "peak_active_gib": 1.0, "peak_reserved_gib": 2.0, "final_loss": 7.5}
rows = [row(1, "ct_compile", 110.0), row(1, "tt_compile", 100.0), row(1, "ct_eager", 100.0),
        row(2, "ct_compile", 120.0), row(2, "tt_compile", 100.0), row(2, "ct_eager", 80.0),
        row(3, "ct_compile", 99.0), row(3, "tt_compile", 90.0),
        {"round": 3, "config": "ct_eager", "exit": "skipped", "seconds": 0}]
g.write_summary(a, rows, g.Shapes(False))
PY
md=$(cat "$tmp/rounds/rounds.md")
# ct_compile 110, 120, 99: median 110, spread (120 - 99) / 110 = 19.1 %
grep -q '| ctitan compile | 3 | 110 | 99–120 (19.1 %) |' <<<"$md" || fail "ctitan compile's median and spread: $md"
# ct_compile / tt_compile per round 1.1, 1.2, 1.1: median ×1.100, min-max ×1.100–×1.200
grep -q '| ctitan compile / TorchTitan compile | 3 | ×1.100 | ×1.100–×1.200 |' <<<"$md" || fail "the paired ratio: $md"
# ct_compile / ct_eager: rounds 1 and 2 only (1.1, 1.5): median 1.3
grep -q '| ctitan compile / ctitan eager | 2 | ×1.300 | ×1.100–×1.500 | r1: ×1.100 r2: ×1.500 |' <<<"$md" ||
  fail "a ratio over the rounds both ran: $md"
grep -q 'Skipped for the deadline: ct_eager r3' <<<"$md" || fail "the skipped run is not named: $md"
[ "$(wc -l <"$tmp/rounds/rounds.tsv")" = 10 ] || fail "rounds.tsv should have a header and 9 rows"
rc=0; msg=$(python3 "$root/scripts/lib/gpu_rounds.py" --out "$tmp/r2" --bin x --python x --root "$root" \
  --deadline 0 --configs ct_compile,nope 2>&1) || rc=$?
((rc == 2)) && [[ $msg == *"unknown configuration(s) nope"* ]] || fail "an unknown configuration: exit $rc: $msg"
echo "gpu evidence checks passed"
