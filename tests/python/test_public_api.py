"""The native module is built on the public API only (DESIGN.md: Python is a
user of include/hixl like any other).  Every #include in python/src names a
public header (<hixl/...>), pybind11, fmt, the C/C++ or POSIX library, or a
file of python/src itself: never a private header of src/.
"""

import os
import re

SOURCE_DIR = os.environ.get("HIXL_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PY_SRC = os.path.join(SOURCE_DIR, "python", "src")
PUBLIC = os.path.join(SOURCE_DIR, "include")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
ALLOWED_PREFIXES = ("pybind11/", "fmt/", "sys/")


def _sources():
    names = sorted(n for n in os.listdir(PY_SRC) if n.endswith((".cc", ".h")))
    assert "module.cc" in names
    return names


def test_only_public_headers():
    seen_public = set()
    for name in _sources():
        with open(os.path.join(PY_SRC, name), encoding="utf-8") as f:
            text = f.read()
        includes = INCLUDE.findall(text)
        assert includes, name
        for kind, path in includes:
            where = f"python/src/{name}: #include {kind}{path}{'>' if kind == '<' else kind}"
            if kind == '"':
                # A file of the binding itself, next to the includer.
                assert "/" not in path and os.path.isfile(os.path.join(PY_SRC, path)), where
            elif path.startswith("hixl/"):
                assert os.path.isfile(os.path.join(PUBLIC, path)), where + " is not a public header"
                seen_public.add(path)
            else:
                # <vector>, <unistd.h>, <sys/mman.h>, <pybind11/...>, <fmt/...>: nothing of hixl's own.
                assert "/" not in path or path.startswith(ALLOWED_PREFIXES), where
                assert not re.match(r"(core|base|bootstrap|transport|world|engine|shmem)\b", path), where
    assert "hixl/hixl.hpp" in seen_public and "hixl/engine.hpp" in seen_public
