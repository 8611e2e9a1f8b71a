// Kernels that only the benchmark needs: a kernel that holds every SM for a given time
// (to see whether a copy beside it runs on a copy engine or needs SMs) and a one-block
// delay that keeps a stream busy while the host finishes enqueueing (so that a chain of
// small operations is timed on the GPU, not at the host's enqueue rate). Both end on
// the GPU clock (%globaltimer), so neither can hang.
#include <cuda_runtime.h>

#include "benchmarks/bench_probe.hpp"
#include "comm/device/cuda_check.hpp"

namespace uipc {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(unsigned long long ns, int* sink) {
  const unsigned long long t0 = global_ns();
  int n = 0;
  while (global_ns() - t0 < ns) ++n;
  if (n == -1) *sink = n;  // never true: keeps the loop
}

}  // namespace

void launch_spin_every_sm(cudaStream_t s, double ms) {
  int dev = 0, sms = 0, threads = 0;
  UIPC_CUDA_CHECK(cudaGetDevice(&dev));
  UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  // 1024-thread blocks, as many per SM as its thread limit holds: no room is left on
  // any SM for a block of another kernel (a copy kernel) until these end.
  const int per_sm = threads / 1024 > 0 ? threads / 1024 : 1;
  spin_kernel<<<static_cast<unsigned>(sms * per_sm), 1024, 0, s>>>(static_cast<unsigned long long>(ms * 1e6), nullptr);
  UIPC_CUDA_CHECK(cudaGetLastError());
}

void launch_delay(cudaStream_t s, double ms) {
  spin_kernel<<<1, 32, 0, s>>>(static_cast<unsigned long long>(ms * 1e6), nullptr);
  UIPC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace uipc
