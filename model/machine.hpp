// A machine description for the simulator: topology, rates, latencies and host costs,
// each value with where it comes from (a measurement and its command, a spec, or a fit).
// Read from JSON (inputs/machines/*.json; format in docs/model.md) and written back by
// the calibration. Parameters are a closed, named set (parameter_specs() in machine.cpp):
// an unknown or missing name, a value without a source, or a value outside the physical
// range the file gives for it (with the range's own source: a spec, a micro-benchmark
// floor) is an InputError naming the file, the parameter, the value and the range.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uipc::model {

struct Param {
  double value = 0;
  std::string source;   // "bench_kernels (...)", "spec: ...", "fitted: ..."
  bool free = false;    // the calibration may move it, within [lo, hi]
  double lo = 0, hi = 0;
  // What the hardware allows (a spec's ceiling, a micro-benchmark's floor), and why:
  // no value, fitted or typed, may leave it.
  double range_lo = 0, range_hi = 0;
  std::string range_source;
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

// A measured norm+RoPE rate (bytes read + written per second) of one norm kind, dtype
// and head_dim (bench_kernels' dispatched kernel, Q and K in the fused QKV view). The
// simulator takes the point of the kernel's kind and type with the nearest head_dim;
// without a profile, or for a trace that did not record kind and type, norm_rope_gbs.
struct NormRopePoint {
  std::string norm = "rms";   // "none", "rms", "rms_across_heads", "layer" (NormKind's order)
  std::string dtype = "bf16"; // "bf16", "fp16", "fp32" (DType's order)
  int head_dim = 128;
  double gbs = 0;
  std::string source;
};
// A measured GEMM rate at one shape (bf16 in and out, cuBLASLt: bench_kernels' gemm_shapes
// rows). The simulator takes the points of the nearest (K, N) in log distance and
// interpolates in log(M) after taking out each point's wave quantisation, as for attention;
// without a profile, gemm_tflops.
struct GemmPoint {
  int64_t m = 1, n = 1, k = 1;
  double tflops = 0;
  std::string source;
};

extern const char* const kNormKindNames[4];
extern const char* const kDTypeNames[3];

struct Machine {
  std::string name, description;
  int gpus_per_node = 8;
  int nodes = 1;
  std::map<std::string, Param> params;
  std::vector<AttentionPoint> attention;
  std::vector<NormRopePoint> norm_rope;  // may be empty
  std::vector<GemmPoint> gemm;           // may be empty

  double p(const std::string& name) const;  // the value; throws for an unknown name
};

// The names, units and sanity ranges of every parameter (for messages and docs); a
// file's physical range must lie inside the sanity range.
struct ParamSpec {
  const char* name;
  const char* unit;
  double min, max;
  const char* meaning;
};
const std::vector<ParamSpec>& parameter_specs();

// `where` names the text in messages (a path). Throws InputError.
Machine parse_machine(const std::string& json_text, const std::string& where);
// The machine named on the command line: a path, or the name of a shipped file
// (NAME.json in $ULYSSES_MACHINE_DIR, else in the installed share/ulysses-ipc/machines
// beside the program, else in the source tree's inputs/machines). "" gives h200-nvlink.
std::string machine_path(const std::string& name_or_path);

Machine load_machine(const std::string& path);
std::string machine_to_json(const Machine& m);  // what parse_machine reads back

}  // namespace uipc::model
