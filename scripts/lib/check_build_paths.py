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
    lib_name = re.compile(r"^(" + "|".join(map(re.escape, provided)) + r")\.(so|a)(\.[0-9.]+)?$")
    links = 0
    for line in open(os.path.join(build, "build.ninja")):
        if not line.lstrip().startswith(("LINK_LIBRARIES", "LINK_PATH", "LINK_FLAGS")):
            continue
        links += 1
        for token in line.split("=", 1)[1].split():
            for part in token.split(","):  # -Wl,-rpath,DIR or -Wl,/path/libx.so
                if part.startswith("-L"):
                    folder = part[2:].rstrip("/")
                    if folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib/x86_64-linux-gnu"):
                        bad.append(f"a link line searches the system folder {folder}")
                elif part.startswith("-l") and "lib" + part[2:] in provided:
                    bad.append(f"a link line takes {part} from the linker's default folders")
                elif lib_name.match(os.path.basename(part)):
                    # Ninja writes paths inside the build tree relative to it.
                    path = os.path.realpath(os.path.join(build, part))
                    if not path.startswith(prefix + "/"):
                        bad.append(f"a link line takes {part} from outside the prefix")
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
