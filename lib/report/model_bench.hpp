// Rates for the machine model read from bench_kernels' HDF5 output (docs/model.md,
// "Rates from benchmarks"): the norm+RoPE profile by norm kind, dtype and head_dim, so
// that `ulysses-ipc model calibrate|validate|loo` take the rates the measured code had
// rather than typed-in ones.
#pragma once

#include <string>
#include <vector>

#include "model/machine.hpp"

namespace uipc {

// How a bench file says its code's layer launched Q's and K's norm+RoPE: this attribute of
// its bench_kernels group, this value for Q and K in one launch, and the suffix of those
// rows' names (bench_kernels writes them; read_norm_rope_profile picks rows by them).
inline constexpr const char* kNormRopeLayerLaunchAttr = "norm_rope_layer_launch";
inline constexpr const char* kNormRopeQkOneLaunch = "qk_one_launch";
inline constexpr const char* kNormRopeQkRowSuffix = " (the pick, Q+K one launch)";

// The dispatched norm+RoPE kernel's rate of every norm kind, dtype and head_dim that
// `path` (a bench_kernels -o file) measured in the fused QKV view, each point's source
// naming the file and the code it measured (its `revision` attribute). Throws InputError
// for a file that is not bench_kernels' or holds no such row.
std::vector<model::NormRopePoint> read_norm_rope_profile(const std::string& path);

}  // namespace uipc
