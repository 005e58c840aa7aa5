#!/usr/bin/env bash
# libhixl.so exports the public API and nothing else: every dynamic symbol
# it defines must be a hixl_* C function of include/hixl/hixl.h, a call or
# handle of the OpenSHMEM front door (include/hixl/shmem/shmem.h), or belong to
# a class, function or constant that include/hixl/*.hpp declares in
# namespace hixl (with the typeinfo and vtables of those classes).  No
# internal layer (hixl::core, ::bootstrap, ::transport, ...), no fmt or
# spdlog, no std:: template instantiations, no Engine::Impl.
#
#   bash public_symbols.sh LIBHIXL_SO INCLUDE_DIR
set -euo pipefail
lib=$1 inc=$2
[[ -f $lib ]] || { echo "public_symbols: no library at $lib" >&2; exit 1; }
command -v nm >/dev/null || { echo "public_symbols: nm (binutils) is not installed" >&2; exit 1; }

# The names the public C++ headers declare at namespace scope in hixl:
# classes and structs, free functions, constants and enums.
names=$(sed -nE \
  -e 's/^(class|struct)( \[\[nodiscard\]\])? ([A-Za-z_][A-Za-z0-9_]*).*/\3/p' \
  -e 's/^enum( class)? ([A-Za-z_][A-Za-z0-9_]*).*/\2/p' \
  -e 's/^inline constexpr [A-Za-z_:]+ ([A-Za-z_][A-Za-z0-9_]*) =.*/\1/p' \
  -e 's/^[A-Za-z_][A-Za-z0-9_:<>*& ]* \**([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' \
  "$inc"/hixl/*.hpp | sort -u)
[[ -n $names ]] || { echo "public_symbols: found no declarations in $inc/hixl/*.hpp" >&2; exit 1; }
alt=$(echo "$names" | paste -sd'|' -)

# A public C++ name, optionally behind the C++ ABI's typeinfo/vtable prefixes,
# followed by the end, a scope, a template argument list or a parameter list.
cxx_ok="^((typeinfo|typeinfo name|vtable|VTT|guard variable) for )?hixl::($alt)(\$|::|<|\\()"
# Whatever a public name may drag in that is still private.
private='hixl::(core|bootstrap|net|transport|engine|base|detail)::|::Impl\b|\b(fmt|spdlog)::'

syms=$(nm -DC --defined-only "$lib" | sed -E 's/^[0-9a-fA-F]* +[A-Za-z] //')
total=$(printf '%s\n' "$syms" | grep -c . || true)
bad=$(printf '%s\n' "$syms" | grep . | while IFS= read -r s; do
  if [[ $s =~ ^hixl_[a-z0-9_]+$ ]]; then continue; fi
  # The OpenSHMEM front door (include/hixl/shmem/shmem.h, cmake/hixl.map).
  if [[ $s =~ ^(shmem_[a-z0-9_]+|start_pes|_my_pe|_num_pes|shmalloc|shmemalign|shrealloc|shfree|SHMEM_TEAM_WORLD|SHMEM_TEAM_SHARED|SHMEM_CTX_DEFAULT)$ ]]; then continue; fi
  if [[ $s =~ $cxx_ok ]] && ! [[ $s =~ $private ]]; then continue; fi
  echo "$s"
done)
nbad=$(printf '%s\n' "$bad" | grep -c . || true)
echo "libhixl exports $total symbols ($((total - nbad)) public API, $nbad not)"
if [[ $nbad -gt 0 ]]; then
  echo "public_symbols: $lib exports symbols that are not public API:" >&2
  printf "%s\n" "$bad" | head -n 200 | sed "s/^/  /" >&2
  exit 1
fi
printf '%s\n' "$syms" | sort | sed 's/^/  /'
echo "1 passed, 0 failed"
