# The list of tests (kept apart from the helper function in CMakeLists.txt).
ulysses_add_test(test_dtype SOURCES test_dtype.cpp LABELS unit)
ulysses_add_test(test_kernels SOURCES test_kernels.cpp LIBS ulysses_kernels LABELS unit)
ulysses_add_test(test_host_device SOURCES test_host_device.cpp LIBS ulysses_device LABELS unit)
ulysses_add_test(test_host_device_mpi SOURCES test_host_device.cpp LIBS ulysses_device LABELS unit NP 2 4)
ulysses_add_test(test_simulator SOURCES test_simulator.cpp LIBS ulysses_model LABELS unit)
target_compile_definitions(test_simulator PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
ulysses_add_test(test_layout SOURCES test_layout.cpp LIBS ulysses_lib LABELS unit)
ulysses_add_test(test_transport SOURCES test_transport.cpp LIBS ulysses_comm ulysses_kernels LABELS protocol NP 1 2 4)
# Graphs: the host device's captured op lists, and layers replayed through the recording
# decorator over the ipc and vmm protocols (tests/test_graphs.cpp).
ulysses_add_test(test_graphs SOURCES test_graphs.cpp LIBS ulysses_comm LABELS protocol NP 1 2 4)
ulysses_add_test(test_tracing SOURCES test_tracing.cpp LIBS ulysses_comm ulysses_model LABELS protocol NP 2 4)
target_compile_definitions(test_tracing PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
ulysses_add_test(test_deck SOURCES test_deck.cpp LIBS ulysses_cli ulysses_lib ${HDF5_C_LIBRARIES} LABELS unit)
target_include_directories(test_deck PRIVATE ${HDF5_INCLUDE_DIRS})
# `deck from-config` (lib/deck/deck_from_config.*) against every shipped preset model, from
# the real config.json files in tests/diffusers_configs, and its errors.
ulysses_add_test(test_deck_from_config SOURCES test_deck_from_config.cpp LIBS ulysses_cli ulysses_lib ${HDF5_C_LIBRARIES}
                 LABELS unit)
target_compile_definitions(test_deck_from_config PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
ulysses_add_test(test_report SOURCES test_report.cpp LIBS ulysses_lib ${HDF5_C_LIBRARIES} LABELS unit)
target_include_directories(test_report PRIVATE ${HDF5_INCLUDE_DIRS})
target_compile_definitions(test_report PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# GPU tests (ULYSSES_HAVE_CUDA): skipped with "no usable CUDA device: ..." where there
# is no GPU; the `gpu` label lets CI leave them out. bench_kernels prints the kernel
# figures of the GPU check (scripts/gpu_check.sh).
if(ULYSSES_HAVE_CUDA)
  ulysses_add_test(test_cuda_kernels SOURCES test_cuda_kernels.cpp LIBS ulysses_cuda LABELS gpu)
  ulysses_add_test(test_cuda_device SOURCES test_cuda_device.cpp LIBS ulysses_cuda ulysses_comm LABELS gpu NP 1 2 4)
  add_executable(bench_kernels ${PROJECT_SOURCE_DIR}/benchmarks/bench_kernels.cpp
                               ${PROJECT_SOURCE_DIR}/benchmarks/bench_nccl.cpp
                               ${PROJECT_SOURCE_DIR}/benchmarks/bench_probe.cu)
  target_link_libraries(bench_kernels PRIVATE ulysses_cuda ulysses_lib ${HDF5_C_LIBRARIES} ${ULYSSES_NCCL_LIB}
                        ulysses_flags)
  target_include_directories(bench_kernels PRIVATE ${HDF5_INCLUDE_DIRS} ${PROJECT_BINARY_DIR}/generated)
  target_include_directories(bench_kernels SYSTEM PRIVATE ${ULYSSES_NCCL_INCLUDE})
  add_dependencies(bench_kernels ulysses_git_rev)
endif()

# End to end: the real program under mpirun on shipped and generated decks, read back
# with plain h5py (tests/e2e, pytest), and the shipped decks against their presets.
# One ctest per file (e2e.<file>, a file added is a test added): `ctest -j` runs them side
# by side, and a slow file is named in the log with its slowest cases (--durations). The
# timeout catches a hang: the slowest file (cpu_scale) took 420 s on 2 cores beside others.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
file(GLOB ULYSSES_E2E_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_*.py)
foreach(e2e_file IN LISTS ULYSSES_E2E_FILES)
  get_filename_component(name ${e2e_file} NAME_WE)
  string(REGEX REPLACE "^test_" "e2e." name ${name})
  add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider --durations=5 ${e2e_file})
  set_tests_properties(${name} PROPERTIES LABELS "e2e;mpi" TIMEOUT 1200
                       ENVIRONMENT "${ULYSSES_TEST_ENV};ULYSSES_IPC=$<TARGET_FILE:ulysses-ipc>")
endforeach()
add_test(NAME shipped_decks COMMAND ${PROJECT_SOURCE_DIR}/inputs/make_decks.sh --check)
set_tests_properties(shipped_decks PROPERTIES LABELS "unit" ENVIRONMENT "ULYSSES_IPC=$<TARGET_FILE:ulysses-ipc>")
# The same command as a user runs it: exit 2 and one message per bad input, the deck read
# back with h5py (tests/deck_cli, pytest on the built program).
add_test(NAME deck_from_config_cli
         COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/deck_cli)
set_tests_properties(deck_from_config_cli PROPERTIES LABELS "unit" TIMEOUT 120
                     ENVIRONMENT "ULYSSES_IPC=$<TARGET_FILE:ulysses-ipc>;PYTHONDONTWRITEBYTECODE=1")
# docs/predictions.md against what HEAD's model gives: flux-dev-1024 (every transport and
# schedule, 4 and 8 ranks) regenerated and found line by line in the committed page.
add_test(NAME predictions_current COMMAND ${PROJECT_SOURCE_DIR}/scripts/model_predictions.sh --check)
set_tests_properties(predictions_current PROPERTIES LABELS "e2e;mpi" TIMEOUT 300
                     ENVIRONMENT "${ULYSSES_TEST_ENV};ULYSSES_IPC=$<TARGET_FILE:ulysses-ipc>;OUT=${PROJECT_BINARY_DIR}/predictions-check")

# The deck on the wire (lib/deck_wire.*): encoding, root-only read shared with every
# rank, the per-rank memory estimate. Writes a deck with HDF5 to spoil one field.
ulysses_add_test(test_deck_wire SOURCES test_deck_wire.cpp LIBS ulysses_lib ${HDF5_C_LIBRARIES} LABELS unit NP 1 2 4)
target_include_directories(test_deck_wire PRIVATE ${HDF5_INCLUDE_DIRS})

# Post-processing (pytest on reports the app writes in simulation mode) and the lint of
# every shell script (bash -n and shellcheck).
add_test(NAME postprocess
         COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider --durations=5 ${PROJECT_SOURCE_DIR}/tests/postprocess
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(postprocess PROPERTIES LABELS "postprocess;mpi" TIMEOUT 600
                     ENVIRONMENT "${ULYSSES_TEST_ENV};ULYSSES_IPC=$<TARGET_FILE:ulysses-ipc>;PYTHONDONTWRITEBYTECODE=1")
add_test(NAME lint_scripts COMMAND ${PROJECT_SOURCE_DIR}/tests/lint_jobscripts.sh)
set_tests_properties(lint_scripts PROPERTIES LABELS "lint" TIMEOUT 120)
# The malformed decks of tests/decks/ that test_deck_wire reads (libhdf5 crash, loop).
target_compile_definitions(test_deck_wire PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# The deck-reader fuzzer (tests/fuzz, clang libFuzzer + ASan + UBSan), a short run of its
# structured mode; `scripts/fuzz.sh --long` is the hour-long one on demand.
add_test(NAME deck_fuzz COMMAND ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh)
set_tests_properties(deck_fuzz PROPERTIES LABELS "fuzz" TIMEOUT 900 ENVIRONMENT "FUZZ_SECONDS=60")

# The library as a user gets it: cmake --install into a fresh prefix, examples/engine
# built against the installed package as a project of its own, its scatter and gather
# checked at 2 ranks over ipc, vmm, nccl and nccl-ce, and at 4 ranks as 2 declared nodes
# over hier (tests/install_example.sh).
add_test(NAME install_example COMMAND ${PROJECT_SOURCE_DIR}/tests/install_example.sh ${PROJECT_BINARY_DIR})
set_tests_properties(install_example PROPERTIES LABELS "install;mpi" TIMEOUT 900 ENVIRONMENT "${ULYSSES_TEST_ENV}")

# The Slurm job scripts under a real Slurm started on this machine (tests/slurm/run_jobs.sh:
# sbatch --wait of the templates in simulation mode, exit codes through srun). Skipped
# without Slurm and munge (tests/slurm/install.sh installs them; CI requires them).
add_test(NAME slurm_jobs COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/run_jobs.sh ${PROJECT_BINARY_DIR})
set_tests_properties(slurm_jobs PROPERTIES LABELS "slurm;mpi" TIMEOUT 900 SKIP_RETURN_CODE 77)

# Golden regression (tests/golden/golden.py): the shipped decks, a subset of tests/decks
# and bad options, their exit codes, first error lines and reports (structure, digests,
# parity, modelled figures; not provenance or CPU times) against tests/golden/golden.txt.
# Regenerate after an intended change: python3 tests/golden/golden.py --app build/app/ulysses-ipc --update
add_test(NAME golden COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/golden/golden.py --app $<TARGET_FILE:ulysses-ipc>)
set_tests_properties(golden PROPERTIES LABELS "e2e;mpi" TIMEOUT 600 ENVIRONMENT "${ULYSSES_TEST_ENV}")
# The CPU-time estimate of simulation mode, and every shipped case through it (#24).
ulysses_add_test(test_cpu_estimate SOURCES test_cpu_estimate.cpp LIBS ulysses_lib ${HDF5_C_LIBRARIES} LABELS unit)
target_compile_definitions(test_cpu_estimate PRIVATE ULYSSES_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
