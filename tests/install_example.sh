#!/usr/bin/env bash
# The library as a user gets it: `cmake --install` of a build into a fresh prefix, the
# install tree checked (the public header alone, the static libraries, the CMake
# package), then examples/engine configured as a project of its own against that
# prefix, built, and run at 2 ranks in simulation mode over ipc, vmm, nccl and nccl-ce
# (on MPI there), and at 4 ranks as two declared nodes over hier (scatter_engine checks
# every element against its reference and exits non-zero on a mismatch). Leaves nothing
# behind.
#
#   tests/install_example.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=$(cd "${1:?usage: tests/install_example.sh BUILD_DIR}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ulysses-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$BUILD" --prefix "$prefix" >"$work/install.log"
echo "install tree:"
(cd "$prefix" && find . -type f | sort | sed 's/^/  /')

fail() { echo "install_example.sh: $*" >&2; exit 1; }
headers=$(cd "$prefix/include" && find . -type f | sort)
[[ $headers == "./ulysses_ipc/ulysses_ipc.hpp" ]] || fail "the install must hold the public header alone, not: $headers"
for f in lib/cmake/ulysses_ipc/ulysses_ipcConfig.cmake lib/cmake/ulysses_ipc/ulysses_ipcConfigVersion.cmake \
  lib/cmake/ulysses_ipc/ulysses_ipcTargets.cmake lib/libulysses_ipc.a lib/libulysses_comm.a \
  lib/libulysses_device.a lib/libulysses_base.a bin/ulysses-ipc; do
  [[ -f $prefix/$f ]] || fail "missing from the install: $f"
done
# Nothing in the package may point back into the source or build tree.
if grep -rlE "$(pwd)|$BUILD" "$prefix/lib/cmake"; then fail "the CMake package refers to the source or build tree"; fi

cmake -S examples/engine -B "$work/engine" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" ||
  { cat "$work/configure.log"; fail "examples/engine does not configure against the installed package"; }
cmake --build "$work/engine" -j"$(nproc)" >"$work/build.log" ||
  { cat "$work/build.log"; fail "examples/engine does not build against the installed package"; }

for transport in ipc vmm nccl nccl-ce; do
  echo "scatter_engine at 2 ranks, transport $transport:"
  mpirun -np 2 --oversubscribe "$work/engine/scatter_engine" --device sim --transport "$transport" --steps 4
done
# hier over two declared nodes of 2 ranks: it must serve (not fall back), and be exact.
echo "scatter_engine at 4 ranks as 2 nodes x 2, transport hier:"
out=$(mpirun -np 4 --oversubscribe "$work/engine/scatter_engine" --device sim --transport hier --ranks-per-node 2 \
  --steps 3)
echo "$out"
grep -q "transport hier$" <<<"$out" || fail "hier did not serve two declared nodes"
