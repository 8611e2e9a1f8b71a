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
  lib/cmake/ulysses_ipc/ulysses_ipcTargets.cmake lib/libulysses_ipc.a lib/libulysses_transport.a \
  lib/libulysses_device.a lib/libulysses_base.a bin/ulysses-ipc; do
  [[ -f $prefix/$f ]] || fail "missing from the install: $f"
done
for m in h200-nvlink h200-nvlink-prior h100-sxm h200-2node h200-4node; do
  [[ -f $prefix/share/ulysses-ipc/machines/$m.json ]] || fail "missing from the install: the machine $m"
done
# The installed program models on the installed machines (renamed here, so that the
# source tree's file of the same name would show), not on the source tree's.
python3 - "$prefix/share/ulysses-ipc/machines/h200-nvlink.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "h200-nvlink-as-installed"
json.dump(m, open(sys.argv[1], "w"))
PY
(cd "$work" && env -u ULYSSES_MACHINE_DIR "$prefix/bin/ulysses-ipc" "$OLDPWD/inputs/default.h5" --mode sim -o "$work/r.h5" --quiet) \
  >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the installed ulysses-ipc did not run the default deck"; }
python3 - "$work/r.h5" <<'PY' || fail "the installed program did not model on the installed machine"
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    names = {f["cases"][c][r]["traced_layer"].attrs["machine"] for c in f.attrs["cases"]
             for r in f["cases"][c].attrs["runs"]}
print("machines modelled on:", sorted(str(n) for n in names))
assert names == {"h200-nvlink-as-installed"}, names
PY
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
