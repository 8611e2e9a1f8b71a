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

// A warp per row, 8 loads of 16 bytes in flight per lane, written back in place. The
// data pass through an XOR with `flip` (0 at run time), so no store can be proven
// redundant and elided.
__global__ void __launch_bounds__(128) stream_rows_kernel(uint4* data, long long rows, int row_chunks,
                                                          long long pitch_chunks, unsigned flip) {
  const int lane = threadIdx.x & 31;
  const long long nw = static_cast<long long>(gridDim.x) * (blockDim.x >> 5);
  for (long long r = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += nw) {
    uint4* p = data + r * pitch_chunks;
    for (int c0 = lane; c0 < row_chunks; c0 += 32 * 8) {
      uint4 v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (c0 + 32 * k < row_chunks) v[k] = p[c0 + 32 * k];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (c0 + 32 * k < row_chunks) {
          v[k].x ^= flip;
          p[c0 + 32 * k] = v[k];
        }
    }
  }
}

}  // namespace

void launch_stream_rows(cudaStream_t s, void* data, long long rows, long long row_bytes, long long pitch_bytes) {
  static int resident = 0;
  if (resident == 0) {
    int dev = 0, sms = 0, per_sm = 0;
    UIPC_CUDA_CHECK(cudaGetDevice(&dev));
    UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    UIPC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_rows_kernel, 128, 0));
    resident = sms * per_sm;
  }
  const long long want = (rows + 3) / 4;
  stream_rows_kernel<<<static_cast<unsigned>(want < resident ? want : resident), 128, 0, s>>>(
      static_cast<uint4*>(data), rows, static_cast<int>(row_bytes / 16), pitch_bytes / 16, 0u);
  UIPC_CUDA_CHECK(cudaGetLastError());
}

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
