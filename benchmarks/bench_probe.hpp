// The benchmark's probe kernels (benchmarks/bench_probe.cu).
#pragma once

#include <cuda_runtime_api.h>

namespace uipc {

// Holds every SM of the current device for `ms` milliseconds (GPU clock).
void launch_spin_every_sm(cudaStream_t s, double ms);
// One small block that keeps stream s busy for `ms` milliseconds.
void launch_delay(cudaStream_t s, double ms);
// Reads and writes back, in place, `rows` rows of `row_bytes` (a multiple of 16, rows
// `pitch_bytes` apart, 16-byte aligned): the norm+RoPE kernel's bytes and access pattern
// (a warp per row, 16-byte accesses, a grid of resident blocks) with no arithmetic, for
// the streaming bound at the kernel's own size and launch count.
void launch_stream_rows(cudaStream_t s, void* data, long long rows, long long row_bytes, long long pitch_bytes);

}  // namespace uipc
