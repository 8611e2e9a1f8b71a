# Decides whether the CUDA device layer and kernels are built (ULYSSES_HAVE_CUDA).
# AUTO builds them whenever nvcc is found, so CUDA sources compile in CI from the first
# day even though CI has no GPU. The driver library is never linked: driver entry points
# are reached through cudaGetDriverEntryPointByVersion, so one binary starts everywhere.
set(ULYSSES_HAVE_CUDA OFF)
if(NOT ULYSSES_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${ULYSSES_CUDA_ARCH})
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # NCCL: the collectives (comm/collectives) link it; found once, here.
    find_path(ULYSSES_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
    find_library(ULYSSES_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
    set(ULYSSES_HAVE_CUDA ON)
  elseif(ULYSSES_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ULYSSES_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "ulysses-ipc CUDA device layer: ${ULYSSES_HAVE_CUDA}")
