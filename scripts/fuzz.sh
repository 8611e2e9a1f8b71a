#!/usr/bin/env bash
# Fuzzes the deck reader (tests/fuzz/deck_fuzz.cpp) with clang's libFuzzer, ASan and
# UBSan: builds the targets in build-fuzz/ straight from lib/deck/deck.cpp,
# lib/hdf5/hdf5_file.cpp and base/*.cpp (no Kokkos, no CMake build needed), seeds the corpus
# from inputs/*.h5 and tests/decks/*, and runs.
#
#   scripts/fuzz.sh           structured mode for ${FUZZ_SECONDS:-60} s (what CI runs)
#   scripts/fuzz.sh --long    structured, then raw mode (the fuzz bytes are the HDF5
#                             file, so libhdf5's own parser is fuzzed too), each for
#                             ${FUZZ_SECONDS:-1800} s: one hour in all
#
# Exits non-zero when a run found anything; the inputs are in build-fuzz/artifacts/
# (replay one with `build-fuzz/deck_fuzz FILE`). A raw-mode crash whose stack lies
# wholly inside libhdf5 is a libhdf5 bug (1.10 has known ones on crafted files), not
# ours. The corpus stays in build-fuzz/corpus-*/ so later runs start from it.
set -euo pipefail
cd "$(dirname "$0")/.."

LONG=0
if [[ ${1:-} == --long ]]; then
  LONG=1
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/fuzz.sh [--long]" >&2
  exit 2
fi
SECONDS_PER_MODE=${FUZZ_SECONDS:-$([[ $LONG == 1 ]] && echo 1800 || echo 60)}
OUT=${FUZZ_BUILD_DIR:-build-fuzz}
CXX=${FUZZ_CXX:-clang++}

# clang with its sanitizer and libFuzzer runtimes (Debian: clang, libclang-rt-14-dev).
if ! command -v "$CXX" >/dev/null 2>&1 || ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  echo "fuzz: installing clang and libclang-rt-14-dev"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi

mkdir -p "$OUT/artifacts"
SOURCES=(lib/deck/deck.cpp lib/hdf5/hdf5_file.cpp base/error.cpp base/dtype.cpp)
# base/error.cpp speaks MPI (collective errors): link the MPI C library; nothing here
# calls MPI_Init. The HDF5 serial flavour, as the CMake build finds it.
MPI_CFLAGS=$(mpicc --showme:compile)
MPI_LIBS=$(mpicc --showme:link)
HDF5_FLAGS=$(pkg-config --cflags --libs hdf5 2>/dev/null || echo "-I/usr/include/hdf5/serial -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5")
SANITIZERS="fuzzer,address,undefined"
CXXFLAGS=(-std=c++17 -g -O1 -fno-omit-frame-pointer "-fsanitize=$SANITIZERS"
          -fno-sanitize-recover=undefined -I. -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX)

build() {  # build NAME RAW: rebuilt only when a source is newer than the binary
  local bin="$OUT/$1"
  local stale=1
  if [[ -x $bin ]]; then
    stale=0
    for s in tests/fuzz/deck_fuzz.cpp "${SOURCES[@]}" lib/*/*.hpp base/*.hpp "$0"; do
      [[ $s -nt $bin ]] && stale=1
    done
  fi
  if [[ $stale == 1 ]]; then
    echo "fuzz: building $bin"
    # shellcheck disable=SC2086  # word splitting of the pkg-config/mpicc flags is meant
    "$CXX" "${CXXFLAGS[@]}" -DULYSSES_FUZZ_RAW="$2" $MPI_CFLAGS tests/fuzz/deck_fuzz.cpp "${SOURCES[@]}" \
      -o "$bin" $HDF5_FLAGS $MPI_LIBS
  fi
}

# Seeds: the shipped decks and the malformed-deck corpus. In structured mode they are
# just byte strings (recipes); in raw mode they are real files to mutate.
SEEDS="$OUT/seeds"
rm -rf "$SEEDS"
mkdir -p "$SEEDS"
cp inputs/*.h5 "$SEEDS"/
if compgen -G "tests/decks/*.h5" >/dev/null; then cp tests/decks/*.h5 "$SEEDS"/; fi

# Each input is written to a private directory on tmpfs, removed at the end.
FUZZ_TMPDIR=$(mktemp -d "${FUZZ_SCRATCH:-/dev/shm}/deckfuzz.XXXXXX")
export FUZZ_TMPDIR
trap 'rm -rf "$FUZZ_TMPDIR"' EXIT
# halt_on_error: the first report is the finding; leaks of a run (HDF5 ids the reader
# did not close are caught by the target itself) are reported as well.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

found=0
run_mode() {  # run_mode NAME RAW EXTRA_ARGS...
  local name=$1 raw=$2
  shift 2
  build "$name" "$raw"
  local corpus="$OUT/corpus-$name"
  mkdir -p "$corpus"
  echo "fuzz: $name for ${SECONDS_PER_MODE} s (corpus $corpus, artifacts $OUT/artifacts/)"
  local before
  before=$(find "$OUT/artifacts" -type f | wc -l)
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a runaway allocation.
  if ! "$OUT/$name" -max_total_time="$SECONDS_PER_MODE" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$OUT/artifacts/$name-" "$@" "$corpus" "$SEEDS"; then
    found=1
  fi
  local after
  after=$(find "$OUT/artifacts" -type f | wc -l)
  if [[ $after -gt $before ]]; then
    found=1
    echo "fuzz: $name: $((after - before)) new finding(s) in $OUT/artifacts/" >&2
  fi
}

run_mode deck_fuzz 0
if [[ $LONG == 1 ]]; then
  # Raw mode keeps going after a finding (libhdf5's own crashes would otherwise end it
  # in seconds) and collects every crashing input.
  run_mode deck_fuzz_raw 1 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1
fi
if [[ $found != 0 ]]; then
  echo "fuzz: FINDINGS (see above and $OUT/artifacts/)" >&2
  exit 1
fi
echo "fuzz: no findings"
