// Schedules as data: the order in which one attention layer projects, normalises and
// submits Q, K and V. One layer pipeline (lib/run/pipeline.cpp) walks these steps; a new
// schedule is a new table row, not a new pipeline.
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
  kSubmitQ,     // hand the tensor to the transport (the last submit carries the barrier)
  kSubmitK,
  kSubmitV,
};

struct Schedule {
  std::string name;
  bool fused = true;        // projection kind the steps use
  std::vector<Step> steps;
};

// The steps of schedule `name` (baseline follows the case's fused_qkv; v-first and
// v-project-first are fused by definition, v-first-split separate). Throws InputError for
// an unknown name.
Schedule make_schedule(const std::string& name, bool fused_qkv);

}  // namespace uipc
