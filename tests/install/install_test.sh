#!/usr/bin/env bash
# cmake --install puts hixl where another CMake project finds it with
# find_package(hixl), builds against it and runs.
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/hixlrun"
test -f "$tmp/prefix/include/hixl/hixl.h"
cmake -S "$src/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$(env -u RANK -u WORLD_SIZE "$tmp/consumer/consumer")
echo "$out"
[[ $out == "found with find_package(hixl)" ]]
echo "1 passed, 0 failed"
