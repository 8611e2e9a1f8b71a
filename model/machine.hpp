// A machine description for the simulator: topology, rates, latencies and host costs,
// each value with where it comes from (a measurement and its command, a spec, or a fit).
// Read from JSON (inputs/machines/*.json; format in docs/model.md) and written back by
// the calibration. Parameters are a closed, named set (kParameters in machine.cpp): an
// unknown or missing name, a value out of its range or a value without a source is an
// InputError naming the file and the parameter.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace uipc::model {

struct Param {
  double value = 0;
  std::string source;   // "bench_kernels (...)", "spec: ...", "fitted: ..."
  bool free = false;    // the calibration may move it, within [lo, hi]
  double lo = 0, hi = 0;
};

// A measured attention rate at one shape (cuDNN SDPA, forward). The simulator
// interpolates between points of the same head_dim, in log(seq), after taking out each
// point's wave quantisation (docs/model.md).
struct AttentionPoint {
  int head_dim = 128;
  int64_t batch = 1, heads = 1, seq = 1;
  double tflops = 0;
  std::string source;
};

struct Machine {
  std::string name, description;
  int gpus_per_node = 8;
  int nodes = 1;
  std::map<std::string, Param> params;
  std::vector<AttentionPoint> attention;

  double p(const std::string& name) const;  // the value; throws for an unknown name
};

// The names, units and sanity ranges of every parameter (for messages and docs).
struct ParamSpec {
  const char* name;
  const char* unit;
  double min, max;
  const char* meaning;
};
const std::vector<ParamSpec>& parameter_specs();

// `where` names the text in messages (a path). Throws InputError.
Machine parse_machine(const std::string& json_text, const std::string& where);
Machine load_machine(const std::string& path);
std::string machine_to_json(const Machine& m);  // what parse_machine reads back

}  // namespace uipc::model
