// The mode of a run, and what it makes of a case: how many layers run and are timed,
// and whether there is data to check. Built once per case, so that nothing below asks
// the mode again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "lib/deck/deck.hpp"

namespace uipc {

// gpu: CUDA devices; sim: simulated GPUs on the CPU; model: full-size shapes with no
// data and no arithmetic, every figure modelled.
enum class Mode { kGpu, kSim, kModel };

// The one table of modes, in --help order; --mode also takes "auto" (gpu when every
// rank sees a usable CUDA device, else sim).
struct ModeName {
  const char* name;
  Mode mode;
};

inline const std::vector<ModeName>& mode_table() {
  static const std::vector<ModeName> table = {{"sim", Mode::kSim}, {"gpu", Mode::kGpu}, {"model", Mode::kModel}};
  return table;
}

// What --mode takes: "auto", then the table's names.
inline std::vector<std::string> mode_choices() {
  std::vector<std::string> v = {"auto"};
  for (const auto& m : mode_table()) v.push_back(m.name);
  return v;
}

// The name of a mode, as --mode takes it and the report writes it.
inline const char* mode_name(Mode mode) {
  for (const auto& m : mode_table())
    if (m.mode == mode) return m.name;
  return "?";
}

inline Mode mode_of(const std::string& name) {
  for (const auto& m : mode_table())
    if (name == m.name) return m.mode;
  throw RuntimeError("unknown backend mode '" + name + "'");
}

struct RunShape {
  Mode mode = Mode::kSim;
  bool has_data = true;   // inputs, a reference and parity (not in --mode model)
  int steps = 1;          // denoising steps (their inputs and references)
  int repeats = 0;        // timed repeats of all steps (0: none, --mode model)
  int warmup = 0;         // untimed layers before each step's timed ones
  int iterations = 0;     // timed layers per step
  int model_warmup = 0;   // --mode model: warmup layers before the traced one (>= 1)
  int report_repeats = 1, report_iterations = 1;  // the report's timing arrays

  // Every layer that ran: warmup and timed ones, and the traced one.
  int64_t layers() const {
    return has_data ? static_cast<int64_t>(repeats) * steps * (warmup + iterations) + 1 : model_warmup + 1;
  }
};

// --mode model times nothing: one step, no repeats; its one "timed" layer is the
// modelled traced layer, after at least one warmup layer (so that the target cache is
// filled as in a timed run).
inline RunShape run_shape(const Case& c, Mode mode) {
  RunShape s;
  s.mode = mode;
  s.has_data = mode != Mode::kModel;
  s.steps = s.has_data ? c.steps : 1;
  s.repeats = s.has_data ? c.repeats : 0;
  s.warmup = c.warmup;
  s.iterations = c.iterations;
  s.model_warmup = s.has_data ? 0 : std::max(c.warmup, 1);
  s.report_repeats = s.has_data ? c.repeats : 1;
  s.report_iterations = s.has_data ? c.iterations * s.steps : 1;  // step-major
  return s;
}

}  // namespace uipc
