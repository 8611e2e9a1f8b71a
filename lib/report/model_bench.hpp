// Rates for the machine model read from bench_kernels' HDF5 output (docs/model.md,
// "Rates from benchmarks"): the norm+RoPE profile by norm kind, dtype and head_dim, so
// that `ulysses-ipc model calibrate|validate|loo` take the rates the measured code had
// rather than typed-in ones.
#pragma once

#include <string>
#include <vector>

#include "model/machine.hpp"

namespace uipc {

// The dispatched norm+RoPE kernel's rate of every norm kind, dtype and head_dim that
// `path` (a bench_kernels -o file) measured in the fused QKV view, each point's source
// naming the file and the code it measured (its `revision` attribute). Throws InputError
// for a file that is not bench_kernels' or holds no such row.
std::vector<model::NormRopePoint> read_norm_rope_profile(const std::string& path);

}  // namespace uipc
