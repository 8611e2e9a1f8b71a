#!/usr/bin/env bash
# Sanitizer runs of the simulation tests (CPU only), ending in zero reports:
#   build-asan/  ASan + UBSan (-DULYSSES_SANITIZE=address) over every unit and protocol
#                test (ctest labels unit, protocol, less the two that run the program from a
#                script: shipped_decks and deck_from_config_cli; the MPI ones at each of their rank
#                counts), LeakSanitizer on, suppressions for third-party start-up
#                allocations only (tests/sanitizers/lsan.supp)
#   build-tsan/  TSan (-DULYSSES_SANITIZE=thread) over the host device layer's worker
#                threads and atomics: test_host_device (serial) and test_transport at 2
#                ranks (Open MPI's uninstrumented internals in tests/sanitizers/tsan.supp)
# Only the test targets are built. Every sanitizer report goes to a file under
# build-*/sanitizer-reports/; the script fails when a test fails or any report exists,
# and prints them.
#
#   scripts/sanitize.sh [asan|tsan]...   (default: both)
#   SANITIZE_JOBS=N                      build parallelism (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
JOBS=${SANITIZE_JOBS:-$(nproc)}
WHICH=("$@")
[[ ${#WHICH[@]} -eq 0 ]] && WHICH=(asan tsan)

command -v ninja >/dev/null || { echo "sanitize: needs ninja (Debian's ninja-build; ./scripts/setup.sh installs it)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI unloads its plugins (mca_*.so) at MPI_Finalize: a leak report taken after
# that cannot say which library allocated, so no suppression could match. Keep them.
export OMPI_MCA_mca_base_component_disable_dlclose=1

configure_and_build() {  # configure_and_build DIR SANITIZER CTEST_SELECTION...
  local dir=$1 san=$2
  shift 2
  # Ninja: the test targets are one source each, and `cmake --build --target a b c` under
  # Makefiles builds one target after another (CMake's top Makefile is .NOTPARALLEL), on one
  # core. A tree configured with another generator is started afresh.
  if [[ -f $dir/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  # -O1 -g1: optimised as far as AddressSanitizer's documentation asks for reasonable speed,
  # line tables only (reports keep functions and lines; the suppressions match names):
  # 24 s to compile test_transport.cpp against 46 s at -O2 -g, the same test times.
  cmake -S . -B "$dir" -G Ninja -DULYSSES_CUDA=OFF -DULYSSES_SANITIZE="$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
  # The targets behind the selected tests (an MPI test "x.np2" is target "x"), so that
  # a test added to tests.cmake with these labels is built and run without editing here.
  local targets
  targets=$(ctest --test-dir "$dir" -N "$@" | sed -n 's/^ *Test *#[0-9]*: *//p' | sed 's/\.np[0-9]*$//' | sort -u)
  [[ -n $targets ]] || { echo "sanitize: no test selected in $dir" >&2; exit 1; }
  echo "sanitize: building $dir ($san): $(echo "$targets" | tr '\n' ' ')"
  # shellcheck disable=SC2086  # one word per target
  cmake --build "$dir" -j"$JOBS" --target $targets
}

check_reports() {  # check_reports DIR: fails when a sanitizer wrote anything
  local dir=$1
  if compgen -G "$dir/sanitizer-reports/*" >/dev/null; then
    echo "sanitize: REPORTS in $dir/sanitizer-reports/:" >&2
    for f in "$dir"/sanitizer-reports/*; do
      echo "==== $f" >&2
      head -n 80 "$f" >&2
    done
    return 1
  fi
}

status=0
for which in "${WHICH[@]}"; do
  t0=$(date +%s)
  case $which in
    asan)
      dir=build-asan
      sel=(-L 'unit|protocol' -E '^(shipped_decks|deck_from_config_cli)$')
      configure_and_build "$dir" address "${sel[@]}"
      rm -rf "$dir/sanitizer-reports"
      mkdir -p "$dir/sanitizer-reports"
      # halt_on_error: the first report ends the process (and fails the test);
      # log_path: every report lands in a file, whichever rank or process wrote it;
      # fast_unwind_on_malloc=0: full allocation stacks through libraries built without
      # frame pointers (Open MPI, HDF5), which the suppressions match by library name.
      export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:fast_unwind_on_malloc=0:log_path=$REPO/$dir/sanitizer-reports/asan"
      export LSAN_OPTIONS="suppressions=$REPO/tests/sanitizers/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPO/$dir/sanitizer-reports/ubsan"
      unset TSAN_OPTIONS
      ctest --test-dir "$dir" --output-on-failure -j1 "${sel[@]}" || status=1
      check_reports "$dir" || status=1
      ;;
    tsan)
      dir=build-tsan
      sel=(-R '^(test_host_device|test_transport\.np2)$')
      configure_and_build "$dir" thread "${sel[@]}"
      rm -rf "$dir/sanitizer-reports"
      mkdir -p "$dir/sanitizer-reports"
      export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$REPO/tests/sanitizers/tsan.supp:log_path=$REPO/$dir/sanitizer-reports/tsan"
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      ctest --test-dir "$dir" --output-on-failure -j1 "${sel[@]}" || status=1
      check_reports "$dir" || status=1
      ;;
    *)
      echo "usage: scripts/sanitize.sh [asan|tsan]..." >&2
      exit 2
      ;;
  esac
  echo "sanitize: $which done in $(( $(date +%s) - t0 )) s"
done
if [[ $status != 0 ]]; then
  echo "sanitize: FAILED" >&2
  exit 1
fi
echo "sanitize: zero reports"
