#!/usr/bin/env python3
"""Checks that a build configured against the offline bundle's prefix takes the
bundle's headers and libraries from that prefix alone (docs/gpu.md).

  scripts/lib/check_build_paths.py BUILD_DIR PREFIX

Reads BUILD_DIR/compile_commands.json: every -I/-isystem/-iquote folder must be
under the source tree, the build tree, PREFIX, the torch installation or a CUDA
toolkit. Reads BUILD_DIR/build.ninja: no link line names a library that the
prefix provides (libsqlite3, libprotobuf, ...) from anywhere but PREFIX.
Prints one line per violation and exits 1; prints a one-line summary and exits
0 when clean.
"""
import json
import os
import re
import shlex
import sys


def main(build: str, prefix: str) -> int:
    build, prefix = os.path.realpath(build), os.path.realpath(prefix)
    cache = dict(
        line.split("=", 1)[0].split(":")[0:1] + [line.split("=", 1)[1]]
        for line in open(os.path.join(build, "CMakeCache.txt"))
        if "=" in line and not line.startswith(("#", "//"))
    )
    source = os.path.realpath(cache["CMAKE_HOME_DIRECTORY"].strip())
    torch_site = os.path.realpath(os.path.join(cache["CTITAN_TORCH_PREFIX"].strip(), "../../.."))
    allowed = [source, build, prefix, torch_site]
    cuda = re.compile(r"^/usr/local/cuda[^/]*/|^/opt/nvidia/")

    def ok(path: str) -> bool:
        p = os.path.realpath(path)
        return any(p == a or p.startswith(a + "/") for a in allowed) or bool(cuda.match(p + "/"))

    bad = []
    commands = json.load(open(os.path.join(build, "compile_commands.json")))
    for c in commands:
        args = shlex.split(c["command"]) if "command" in c else c["arguments"]
        for i, a in enumerate(args):
            for flag in ("-isystem", "-iquote", "-I"):
                if a == flag and i + 1 < len(args):
                    folder = args[i + 1]
                elif a.startswith(flag) and len(a) > len(flag) and flag != "-isystem":
                    folder = a[len(flag):]
                else:
                    continue
                if not ok(folder):
                    bad.append(f"{os.path.relpath(c['file'], source)}: include folder {folder} is outside the prefix")
                break

    libdir = os.path.join(prefix, "usr/lib/x86_64-linux-gnu")
    provided = sorted({re.sub(r"\.(so|a).*$", "", n) for n in os.listdir(libdir) if n.startswith("lib")})
    lib_ref = re.compile(r"(/[^\s:;]*/(" + "|".join(map(re.escape, provided)) + r")\.(so|a)[^\s:;]*)")
    links = 0
    for line in open(os.path.join(build, "build.ninja")):
        if not line.lstrip().startswith(("LINK_LIBRARIES", "LINK_PATH", "LINK_FLAGS")):
            continue
        links += 1
        for m in lib_ref.finditer(line):
            if not os.path.realpath(m.group(1)).startswith(prefix + "/"):
                bad.append(f"a link line takes {m.group(1)} from outside the prefix")
        for m in re.finditer(r"-L(/\S+)", line):
            if m.group(1).rstrip("/") in ("/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib/x86_64-linux-gnu"):
                bad.append(f"a link line searches the system folder {m.group(1)}")
    for b in sorted(set(bad)):
        print("check_build_paths:", b)
    if bad:
        return 1
    print(f"check_build_paths: {len(commands)} compile commands and {links} link lines take headers and "
          f"{', '.join(provided)} from {prefix} only")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check_build_paths.py BUILD_DIR PREFIX")
    sys.exit(main(sys.argv[1], sys.argv[2]))
