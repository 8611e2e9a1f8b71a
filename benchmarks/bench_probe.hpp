// The benchmark's probe kernels (benchmarks/bench_probe.cu).
#pragma once

#include <cuda_runtime_api.h>

namespace uipc {

// Holds every SM of the current device for `ms` milliseconds (GPU clock).
void launch_spin_every_sm(cudaStream_t s, double ms);
// One small block that keeps stream s busy for `ms` milliseconds.
void launch_delay(cudaStream_t s, double ms);

}  // namespace uipc
