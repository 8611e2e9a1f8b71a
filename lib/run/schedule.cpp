// The schedule table (ARCHITECTURE.md §3).
#include "lib/run/schedule.hpp"

#include "base/error.hpp"

namespace uipc {

Schedule make_schedule(const std::string& name, bool fused_qkv) {
  using S = Step;
  if (name == "baseline") {
    // Everything first, then the three tensors together.
    if (fused_qkv) return {name, true, {S::kProjectQkv, S::kNormQ, S::kNormK, S::kSubmitQ, S::kSubmitK, S::kSubmitV}};
    return {name, false,
            {S::kProjectQ, S::kProjectK, S::kProjectV, S::kNormQ, S::kNormK, S::kSubmitQ, S::kSubmitK, S::kSubmitV}};
  }
  if (name == "v-first") {
    // V (a strided view of the fused projection) goes out at once; Q/K norm + RoPE run
    // on the compute stream while it is in flight; K carries the grouped barrier.
    return {name, true, {S::kProjectQkv, S::kSubmitV, S::kNormQ, S::kNormK, S::kSubmitQ, S::kSubmitK}};
  }
  if (name == "v-project-first") {
    // The fused projection split by columns: V's first, submitted at once, so that its
    // copy runs beside the Q/K GEMM (compute-bound) rather than beside the memory-bound
    // norm; then Q and K, normed and submitted, K with the barrier.
    return {name, true,
            {S::kProjectFusedV, S::kSubmitV, S::kProjectFusedQK, S::kNormQ, S::kNormK, S::kSubmitQ, S::kSubmitK}};
  }
  if (name == "v-first-split") {
    // Separate projections: V, then Q, then K, each submitted as soon as it is ready.
    return {name, false,
            {S::kProjectV, S::kSubmitV, S::kProjectQ, S::kNormQ, S::kSubmitQ, S::kProjectK, S::kNormK, S::kSubmitK}};
  }
  throw InputError("unknown schedule '" + name + "' (allowed: baseline, v-first, v-project-first, v-first-split)");
}

}  // namespace uipc
