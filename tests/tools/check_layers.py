#!/usr/bin/env python3
"""Checks every `#include "..."` of the project's sources against docs/layers.md.

Usage: check_layers.py [--root DIR] [--table FILE]
Exit 0: every include runs the intended way and the known-violation list is
exact; 1: a violation (each printed as `file:line: ...`); 2: bad table or
arguments. Needs no build: it reads the source tree only.
"""
import argparse
import fnmatch
import os
import re
import sys

SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
SKIP_DIRS = {"build", ".git", "__pycache__"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


class TableError(Exception):
    pass


def fenced_blocks(text, tag):
    """Lines (number, text) inside ```tag fences."""
    out, inside = [], False
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            inside = (not inside) and s[3:].strip() == tag
            continue
        if inside:
            body = line.split("#", 1)[0].strip()
            if body:
                out.append((n, body))
    return out


def is_pattern(unit):
    return any(c in unit for c in "*?[") or os.path.splitext(unit)[1] in SOURCE_EXTS


def read_table(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rules = {}
    for n, body in fenced_blocks(text, "layers"):
        if ":" not in body:
            raise TableError(f"{path}:{n}: expected `unit: allowed units`, got `{body}`")
        unit, deps = body.split(":", 1)
        unit = unit.strip()
        if unit in rules:
            raise TableError(f"{path}:{n}: unit `{unit}` appears twice")
        rules[unit] = deps.split()
    if not rules:
        raise TableError(f"{path}: no ```layers block")
    order = list(rules)
    for i, (unit, deps) in enumerate(rules.items()):
        for d in deps:
            if d == "**":
                continue
            base = d[:-3] if d.endswith("/**") else d
            if base not in rules:
                raise TableError(f"{path}: unit `{unit}` allows `{d}`, which is no unit of the table")
            # Bottom-up order keeps the graph acyclic: a unit may name only units listed before it.
            later = [u for u in order[i:] if u != unit and allowed("", u, [d])]
            if later:
                raise TableError(f"{path}: unit `{unit}` allows `{d}`, but `{later[0]}` is listed after "
                                 f"`{unit}`; list units bottom-up")
    known = set()
    for n, body in fenced_blocks(text, "known-violations"):
        parts = [p.strip() for p in body.split("->")]
        if len(parts) != 2 or not all(parts):
            raise TableError(f"{path}:{n}: expected `file -> included file`, got `{body}`")
        known.add(tuple(parts))
    return rules, known


def unit_of(path, rules):
    """The unit owning a root-relative path: a matching file pattern, else the deepest folder."""
    patterns = [u for u in rules if is_pattern(u) and fnmatch.fnmatchcase(path, u)]
    if len(patterns) > 1:
        raise TableError(f"{path} matches several units: {' '.join(patterns)}")
    if patterns:
        return patterns[0]
    folders = [u for u in rules if not is_pattern(u) and path.startswith(u + "/")]
    return max(folders, key=len) if folders else None


def allowed(own, target, deps):
    if target == own:
        return True
    for d in deps:
        if d == "**" or d == target:
            return True
        if d.endswith("/**") and (target == d[:-3] or target.startswith(d[:-3] + "/")):
            return True
    return False


def sources(root):
    """Every C++/CUDA file under the root's folders, build folders and hidden ones aside."""
    tops = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
                  and not d.startswith(".") and not d.startswith("build") and d not in SKIP_DIRS)
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.environ.get("CTITAN_SOURCE_DIR") or os.path.dirname(os.path.dirname(here)))
    ap.add_argument("--table", help="default: ROOT/docs/layers.md")
    args = ap.parse_args()
    table = args.table or os.path.join(args.root, "docs", "layers.md")
    try:
        rules, known = read_table(table)
    except (OSError, TableError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2

    problems, seen, edges = [], set(), 0
    try:
        for src in sources(args.root):
            own = unit_of(src, rules)
            if own is None:
                problems.append(f"{src}:1: belongs to no unit of {os.path.relpath(table, args.root)}; add its folder")
                continue
            with open(os.path.join(args.root, src), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    beside = os.path.normpath(os.path.join(os.path.dirname(src), inc)).replace(os.sep, "/")
                    if os.path.isfile(os.path.join(args.root, beside)):
                        inc = beside  # an include relative to the including file
                    target = unit_of(inc, rules)
                    edges += 1
                    if target is None:
                        problems.append(f"{src}:{n}: includes {inc}, which belongs to no unit of the table")
                        continue
                    if allowed(own, target, rules[own]):
                        continue
                    if (src, inc) in known:
                        seen.add((src, inc))
                        continue
                    only = " ".join(rules[own]) or "nothing outside itself"
                    problems.append(f"{src}:{n}: includes {inc}, but {own} may include only {only}")
    except TableError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    for src, inc in sorted(known - seen):
        problems.append(f"{os.path.relpath(table, args.root)}: known violation `{src} -> {inc}` no longer "
                        f"exists; delete its line from the list")
    for p in problems:
        print(p)
    print(f"check_layers: {edges} includes checked, {len(seen)} known violations left, "
          f"{len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
