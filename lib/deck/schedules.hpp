// The one table of schedules: the order in which one attention layer projects, normalises
// and submits Q, K and V (ARCHITECTURE.md §3). Deck validation and --help read the names,
// the layer pipeline (lib/run/pipeline.cpp) walks the steps; a new schedule is a new row.
// Standard library only, so that the deck reads it without the run.
#pragma once

#include <string>
#include <vector>

namespace uipc {

enum class Step {
  kProjectQkv,      // fused: one GEMM into (M, 3, Ht, D)
  kProjectFusedV,   // fused, split by columns: V's columns only ...
  kProjectFusedQK,  // ... then Q's and K's (one GEMM over both), same buffer and strides
  kProjectQ,        // separate projections into contiguous (M, Ht, D) buffers
  kProjectK,
  kProjectV,
  kNormQ,       // Q/K norm + RoPE, in place
  kNormK,
  kNormQK,      // both in one launch (LayerKernels::norm_rope_qk), where Q and K are ready together
  kSubmitQ,     // hand the tensor to the transport (the last submit carries the barrier)
  kSubmitK,
  kSubmitV,
};

// A schedule's steps with the fused projection and with separate ones. A schedule with
// both follows the case's projection; one with a single list always runs that projection.
struct ScheduleKind {
  const char* name;
  std::vector<Step> fused;     // empty: none with the fused projection
  std::vector<Step> separate;  // empty: none with separate projections
};

inline const std::vector<ScheduleKind>& schedule_table() {
  using S = Step;
  static const std::vector<ScheduleKind> table = {
      // Everything first, then the three tensors together.
      {"baseline",
       {S::kProjectQkv, S::kNormQK, S::kSubmitQ, S::kSubmitK, S::kSubmitV},
       {S::kProjectQ, S::kProjectK, S::kProjectV, S::kNormQK, S::kSubmitQ, S::kSubmitK, S::kSubmitV}},
      // V (a strided view of the fused projection) goes out at once; Q/K norm + RoPE run
      // on the compute stream while it is in flight; K carries the grouped barrier.
      {"v-first", {S::kProjectQkv, S::kSubmitV, S::kNormQK, S::kSubmitQ, S::kSubmitK}, {}},
      // The fused projection split by columns: V's first, submitted at once, so that its
      // copy runs beside the Q/K GEMM (compute-bound) rather than beside the memory-bound
      // norm; then Q and K, normed and submitted, K with the barrier.
      {"v-project-first",
       {S::kProjectFusedV, S::kSubmitV, S::kProjectFusedQK, S::kNormQK, S::kSubmitQ, S::kSubmitK},
       {}},
      // Separate projections: V, then Q, then K, each submitted as soon as it is ready.
      {"v-first-split",
       {},
       {S::kProjectV, S::kSubmitV, S::kProjectQ, S::kNormQ, S::kSubmitQ, S::kProjectK, S::kNormK, S::kSubmitK}},
  };
  return table;
}

inline const ScheduleKind* find_schedule_kind(const std::string& name) {
  for (const auto& s : schedule_table())
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace uipc
