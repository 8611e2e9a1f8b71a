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

// A GPU's own fixed costs, measured beside a report by bench_kernels on the same GPU (its
// latency section: the empty-kernel rows and the floor-op rows, each op by op and as a node of
// a graph), us; 0 where the bench did not measure it. A replay that has them takes, in place
// of the machine's fitted device costs (docs/model.md, "A report's own GPU"):
//  - an empty kernel's time as every kernel's and same-device copy's fixed cost
//    (kernel_latency_us, copy_latency_us), each kind at least its floor-op row in all
//    (the op's modelled work counted in it);
//  - a timed record right after device work: its row less the empty kernel's (event_record_us);
//  - each end of the handshake (a stream write or wait): half the write-and-wait row
//    (memop_latency_us);
//  - NCCL at one rank: the one-rank all-to-all's row less its copy at the streaming rate
//    (nccl_latency_us, for a one-rank communicator only).
// Peer copies and NCCL between GPUs keep the machine's.
struct IssueCost {
  double op_by_op = 0, graph = 0;  // issued op by op (streams rows), a node of a graph (graph rows)
  double at(bool graph_replay) const { return graph_replay ? graph : op_by_op; }
};
struct DeviceCosts {
  IssueCost empty_kernel, record_after_work, memop, nccl_one_rank;
  // The floor-op rows: the least a GEMM (the faster of the two projections), a norm+RoPE, an
  // attention, a conversion and a same-device 2-D copy took in all.
  IssueCost gemm, norm_rope, attention, convert, copy;
  double nccl_one_rank_bytes = 0;  // what the one-rank all-to-all row moved
  std::string source;              // the bench file; empty: none (the machine's own costs)
  bool empty() const { return source.empty(); }
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
  DeviceCosts device;                    // a GPU's own measured costs (replays only; not in the JSON)

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
