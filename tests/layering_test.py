#!/usr/bin/env python3
"""Layering check: a file of src/ includes only from its own layer or below,
and the public headers (include/hixl) include no internal header.

Layers, lowest first (docs/architecture.md):

  base
  transport, bootstrap     each: base and its own folder; never each other
  core                     base, transport, bootstrap
  world, engine            core and below; never each other
  shmem                    the world and below (the OpenSHMEM front door)

Inside transport/, one transport (shm/, ucx/) does not include another; the
transport factory (transport/transport.cc) may name them all.

Usage: layering_test.py [SOURCE_DIR]   (default: the repository holding this
file).  Prints every violation as file:line and exits 1 if there is one.
"""

import os
import re
import sys

# Which top-level folders of src/ each layer may include from.
ALLOWED = {
    "base": {"base"},
    "transport": {"base", "transport"},
    "bootstrap": {"base", "bootstrap"},
    "core": {"base", "transport", "bootstrap", "core"},
    "world": {"base", "transport", "bootstrap", "core", "world"},
    "engine": {"base", "transport", "bootstrap", "core", "engine"},
    "shmem": {"base", "transport", "bootstrap", "core", "world", "shmem"},
}
# Sub-folders of transport/ that hold one transport each.
TRANSPORTS = {"shm", "ucx"}
SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".c", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def includes(path):
    """(line number, delimiter, target) for every #include of PATH."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                yield number, m.group(1), m.group(2)


def source_files(top):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(root, name)


def check_src(repo):
    """Violations of the layer order in src/."""
    errors = []
    src = os.path.join(repo, "src")
    for path in source_files(src):
        rel = os.path.relpath(path, src).split(os.sep)
        shown = os.path.relpath(path, repo)
        if len(rel) < 2:
            errors.append(f"{shown}: a source file directly in src/ belongs to no layer; move it into one")
            continue
        layer = rel[0]
        if layer not in ALLOWED:
            errors.append(f"{shown}: src/{layer}/ is not a known layer; add it to ALLOWED in {__file__}")
            continue
        own_transport = rel[1] if layer == "transport" and len(rel) > 2 else None
        for number, _, target in includes(path):
            parts = target.split("/")
            if len(parts) < 2 or parts[0] not in ALLOWED:
                continue  # same folder, system or third-party header
            if parts[0] not in ALLOWED[layer]:
                errors.append(f"{shown}:{number}: {layer}/ includes \"{target}\" from {parts[0]}/, "
                              f"not its own layer or below (allowed: {', '.join(sorted(ALLOWED[layer]))})")
            elif (own_transport is not None and parts[0] == "transport" and len(parts) > 2
                  and parts[1] in TRANSPORTS and parts[1] != own_transport):
                errors.append(f"{shown}:{number}: the {own_transport} transport includes \"{target}\" "
                              f"from the {parts[1]} transport")
    return errors


def check_public(repo):
    """Public headers include only system headers and other public headers."""
    errors = []
    public = os.path.join(repo, "include", "hixl")
    for path in source_files(public):
        shown = os.path.relpath(path, repo)
        for number, delim, target in includes(path):
            parts = target.split("/")
            if delim == '"' or parts[0] in ALLOWED:
                errors.append(f"{shown}:{number}: public header includes internal header \"{target}\"; "
                              "public headers may include only <hixl/...> and system headers")
            elif parts[0] == "hixl" and not os.path.isfile(os.path.join(repo, "include", target)):
                errors.append(f"{shown}:{number}: public header includes <{target}>, "
                              "which is not in include/")
    return errors


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                           else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.isdir(os.path.join(repo, "src")) or not os.path.isdir(os.path.join(repo, "include", "hixl")):
        print(f"layering_test: {repo} has no src/ and include/hixl/", file=sys.stderr)
        return 2
    errors = check_src(repo) + check_public(repo)
    for e in errors:
        print(e)
    checked = sum(1 for _ in source_files(os.path.join(repo, "src"))) + \
        sum(1 for _ in source_files(os.path.join(repo, "include", "hixl")))
    if errors:
        print(f"layering_test: {len(errors)} violation(s) in {checked} files")
        return 1
    print(f"layering_test: {checked} files, every include goes to its own layer or below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
