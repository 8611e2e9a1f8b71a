// The CUDA implementation of the layer kernels (kernels/kernels.hpp): GEMMs through
// cuBLASLt, Q/K norm + RoPE as one fused kernel, attention through cuDNN SDPA with the
// project's own kernel as reference and fallback, and fp32 -> dtype conversion.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernels.hpp"

namespace uipc {

// Kernels running on CUDA streams of the current device. The attention path comes from
// ULYSSES_ATTENTION (cudnn | reference; default cudnn where it was built in).
std::unique_ptr<LayerKernels> make_cuda_kernels();

// The path the last attention() call of `k` took: "cudnn", "reference", or
// "reference (cudnn: <why not>)" when cuDNN was asked for and could not serve the shape
// or dtype; "" before the first call. For the report's provenance.
std::string cuda_attention_path(LayerKernels& k);

// Whether this build has the cuDNN SDPA path at all (cudnn-frontend found at configure).
bool cuda_cudnn_sdpa_built();

}  // namespace uipc
