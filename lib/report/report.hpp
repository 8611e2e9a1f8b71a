// The run report: what one `ulysses-ipc` run measured, as plain data (this header),
// and its HDF5 form (report.cpp, the one writer). Schema: docs/report.md.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"
#include "model/calibrate.hpp"
#include "model/simulator.hpp"
#include "model/trace/trace.hpp"

namespace uipc {

// Per-iteration stages, in this order in every timing array.
enum Stage : int {
  kStageProjection = 0,
  kStageNormRope,
  kStageScatter,
  kStageAttention,
  kStageGather,
  kStageOutProjection,
  kStageLayer,
  kNumStages
};
const char* stage_name(int stage);  // "projection", "norm_rope", ...

// One case x transport x schedule.
struct RunResult {
  std::string transport_requested;  // as in the deck
  std::string transport_used;       // after eligibility / fallback
  std::string fallback_reason;      // empty when no fallback happened
  std::string transport_note;       // what else is known of the transport (nccl-ce: whether copy engines serve)
  std::string gather_transport;     // what carried the output gather
  std::string collectives;          // library under the nccl transport, gather and TP all-reduce: "nccl" or "mpi"
  std::string attention;            // attention implementation: "host", "cudnn-sdpa", "reference"
  std::string schedule;
  std::string ablation;             // "" for the full design, else the ablation this run measures
  std::string projection;           // "fused" or "separate"
  bool parity_pass = false;         // exact parity against the dense reference (never for approximate runs)
  bool approximate = false;         // a lossy transport (V-major): judged by approx_pass
  bool approx_pass = false;         // approximate runs: error vs the exact run within the case's tolerance
  double parity_max_abs = 0;
  double parity_rel_l2 = 0;
  bool parity_finite = true;
  std::string output_digest;        // hash of the whole distributed output: equal = bit-identical
  int repeats = 0, iterations = 0, ranks = 0;
  // [repeat][iteration][rank][stage], milliseconds
  std::vector<double> stage_ms;
  // [repeat][iteration][rank], milliseconds during which the V scatter copies and the
  // Q/K norm + RoPE ran at the same time
  std::vector<double> v_overlap_ms;
  // [repeat][iteration][rank], milliseconds from the start to the end of V's scatter
  // copies on the copy stream (overlap / copy = the fraction of V's transfer hidden).
  // Both empty when the transport has no separate copy stream (nothing to overlap).
  std::vector<double> v_copy_ms;
  int64_t scatter_bytes_per_rank = 0;  // bytes each rank sends in one layer's Q/K/V scatter
  int64_t gather_bytes_per_rank = 0;
  int handshakes_per_layer = 0;
  int ulysses_nodes = 1;            // nodes that rank 0's Ulysses group spans
  int hier_chunks = 0;              // token chunks per batch of hier's pipeline (0: not hier)
  int64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
  // Graphs (lib/run/layer_graph.hpp), rank 0's: "on", or "off: <why>"; layers captured,
  // replayed, and replays that fell back to op by op (the last one's reason).
  std::string graphs;
  int64_t graph_captures = 0, graph_replays = 0, graph_divergences = 0;
  std::string graph_last_divergence;
  // "on": each stage timed; "off": the layer alone, its stages NaN (--stage-timing off).
  std::string stage_timing = "on";
  // [repeat][iteration]: rank 0's host milliseconds to enqueue each timed layer (op by
  // op: every call; replayed: the layer's host logic and one launch).
  std::vector<double> host_enqueue_ms;
  // [repeat][iteration]: 1 where rank 0's timed layer was a replayed graph, else 0 (a
  // short run's medians may be of layers watched or captured, not replayed).
  std::vector<int64_t> graph_replayed;
  // Rank 0's wall clock (Unix seconds) when the repeats began and when the last timed
  // layer ended, so that samples taken beside the run (scripts/soak.sh) can be placed
  // on the timed layers; NaN when nothing was timed (--mode model).
  double timed_wall_start_s = std::numeric_limits<double>::quiet_NaN();
  double timed_wall_end_s = std::numeric_limits<double>::quiet_NaN();
  // [step], of the last repeat: the output's errors against the dense reference and
  // against the case's first exact run of the same schedule (NaN for that run itself),
  // and the inter-node bytes of the step's first layer, all ranks together, sent and
  // what full communication sends (hier; 0 for transports without an inter-node phase).
  // The layout's balance (uneven shards or head slices): per rank its tokens before the
  // scatter and its heads after it, and max/mean of each (1 when even).
  std::vector<int64_t> tokens_per_rank, heads_per_rank;
  double token_imbalance = 1, head_imbalance = 1;
  int steps = 1;
  std::vector<double> step_max_abs, step_rel_l2, step_vs_exact_max_abs, step_vs_exact_rel_l2;
  std::vector<int64_t> step_inter_bytes_sent, step_inter_bytes_full;
  bool parity_computed = true;  // false in --mode model: no data, so no parity (never "passed")
  // The traced layer (lib/run/traced_layer.hpp, docs/model.md): every rank's op trace (with
  // measured start/end where measured) and the same layer replayed under `machine`.
  std::vector<model::RankTrace> traces;                 // [rank]; empty: not traced
  std::string machine;                                  // the machine modelled; "": not modelled
  std::string model_note;                               // why not, when not
  std::string modeled_as;                               // "op by op" or "graph replay" (simulator Issue)
  std::vector<std::vector<model::OpTime>> modeled_ops;  // [rank][op] of traces
  std::vector<double> modeled_stage_ms;                 // [rank][stage], ms, modelled
  std::vector<double> modeled_v_overlap_ms, modeled_v_copy_ms;  // [rank]; v_copy -1: no copy stream
  int modeled_waits_before_trace = 0;
  std::vector<std::vector<model::StageTerm>> stage_terms;  // [rank]: stages from op end times
};

// Inputs, weights and output of one case, for --dump (rank 0's full tensors).
struct CaseDump {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // name -> values
  std::map<std::string, std::vector<int64_t>> shapes;
};

struct CaseResult {
  Case spec;
  std::vector<RunResult> runs;
  bool has_dump = false;
  CaseDump dump;
};

struct Provenance {
  std::string software = "ulysses-ipc";
  std::string version;       // git revision
  std::string date;          // ISO 8601 UTC
  std::string command_line;
  std::string mode;          // "sim" or "gpu"
  std::string deck_path;
  int world_size = 0;
  std::vector<std::string> hosts;    // per rank
  std::vector<std::string> devices;  // per rank
  std::vector<std::string> host_cpus;  // per rank: comm/bootstrap.hpp host_cpu()
  std::vector<int64_t> node_of_rank; // per rank: its node (comm/nodes.hpp)
  std::string node_layout;           // e.g. "2 nodes x 2 ranks (declared: --ranks-per-node 2)"
  std::map<std::string, std::string> versions;  // "mpi", "hdf5", "kokkos", "cuda", "nccl", ...
};

// Writes the report to `path` via a temporary file renamed at the end; on any error
// the temporary is removed and nothing is left at `path`.
void write_report(const std::string& path, const Provenance& prov, const std::vector<CaseResult>& cases);

// Removes the temporary file of a report being written, if any (async-signal-safe:
// called from the SIGINT/SIGTERM handler so that no half report is left behind).
void remove_partial_report() noexcept;

// Summary statistics of `ms` (p in [0, 100], linear interpolation between order stats).
double percentile(std::vector<double> ms, double p);

// Whether a run's medians are of replayed graphs: most of its timed layers were replayed
// (RunResult::graph_replayed). How its layer is modelled, by the run and by `model`.
bool mostly_replayed(const std::vector<int64_t>& graph_replayed);

}  // namespace uipc
