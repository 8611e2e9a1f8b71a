// A schedule of the table (lib/deck/schedules.hpp) as the layer pipeline
// (lib/run/pipeline.cpp) walks it: the steps of the projection it runs.
#pragma once

#include <string>
#include <vector>

#include "lib/deck/schedules.hpp"

namespace uipc {

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
