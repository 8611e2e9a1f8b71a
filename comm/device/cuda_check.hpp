// Checked calls into CUDA, the CUDA driver, NCCL, cuBLAS(Lt) and cuDNN: a failure throws
// uipc::RuntimeError with the expression, the library's error text, file:line, host and
// rank. None of these compiles out.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "base/error.hpp"

namespace uipc {

[[noreturn]] inline void throw_library_error(const char* library, const std::string& text, const char* expr,
                                             const char* file, int line) {
  throw RuntimeError(std::string(library) + " call failed: " + expr + ": " + text + " (" +
                     error_where(file, line) + ")");
}

// Error texts of the libraries whose headers we keep out of this one (so that a file
// checking CUDA calls need not see NCCL or cuDNN). Defined next to their users in the
// ulysses_cuda library.
std::string cu_error_string(int result);      // driver CUresult, via the entry-point cuGetErrorString
std::string nccl_error_string(int result);    // ncclGetErrorString + ncclGetLastError
std::string cublas_error_string(int status);  // cublasLtGetStatusName/String
std::string cudnn_error_string(int status);   // cudnnGetErrorString

}  // namespace uipc

#define UIPC_CUDA_CHECK(expr)                                                                          \
  do {                                                                                                 \
    cudaError_t uipc_cuda_rc_ = (expr);                                                                \
    if (uipc_cuda_rc_ != cudaSuccess)                                                                  \
      ::uipc::throw_library_error("CUDA", std::string(cudaGetErrorName(uipc_cuda_rc_)) + " (" +       \
                                              cudaGetErrorString(uipc_cuda_rc_) + ")",                  \
                                  #expr, __FILE__, __LINE__);                                          \
  } while (0)

#define UIPC_CU_CHECK(expr)                                                                            \
  do {                                                                                                 \
    int uipc_cu_rc_ = static_cast<int>(expr);                                                          \
    if (uipc_cu_rc_ != 0)                                                                              \
      ::uipc::throw_library_error("CUDA driver", ::uipc::cu_error_string(uipc_cu_rc_), #expr, __FILE__, \
                                  __LINE__);                                                           \
  } while (0)

#define UIPC_NCCL_CHECK(expr)                                                                          \
  do {                                                                                                 \
    int uipc_nccl_rc_ = static_cast<int>(expr);                                                        \
    if (uipc_nccl_rc_ != 0)                                                                            \
      ::uipc::throw_library_error("NCCL", ::uipc::nccl_error_string(uipc_nccl_rc_), #expr, __FILE__,   \
                                  __LINE__);                                                           \
  } while (0)

#define UIPC_CUBLAS_CHECK(expr)                                                                        \
  do {                                                                                                 \
    int uipc_cublas_rc_ = static_cast<int>(expr);                                                      \
    if (uipc_cublas_rc_ != 0)                                                                          \
      ::uipc::throw_library_error("cuBLAS", ::uipc::cublas_error_string(uipc_cublas_rc_), #expr,       \
                                  __FILE__, __LINE__);                                                 \
  } while (0)

#define UIPC_CUDNN_CHECK(expr)                                                                         \
  do {                                                                                                 \
    int uipc_cudnn_rc_ = static_cast<int>(expr);                                                       \
    if (uipc_cudnn_rc_ != 0)                                                                           \
      ::uipc::throw_library_error("cuDNN", ::uipc::cudnn_error_string(uipc_cudnn_rc_), #expr,          \
                                  __FILE__, __LINE__);                                                 \
  } while (0)
