// The traced layer in a report (docs/report.md, "traced_layer"): every rank's op trace,
// both as readable columns (for `ulysses-post plot`'s per-stream timeline) and in the
// trace's own byte form (read back exactly by `ulysses-ipc model`), the modelled op
// times and the modelled stages. Written by lib/report/report.cpp, read by app/model_cli.cpp.
#pragma once

#include <string>
#include <vector>

#include "lib/hdf5/hdf5_file.hpp"
#include "lib/report/report.hpp"

namespace uipc {

void write_traced_layer(const h5::Group& run_group, const RunResult& r);

// One run of a report, as `ulysses-ipc model` needs it.
struct StoredRun {
  std::string report, case_name, run_name, mode, transport_used, schedule;
  int world = 0;
  int64_t batch = 0, seq_len = 0, heads = 0, head_dim = 0, ulysses = 0, tp = 0, fused_qkv = 0;
  std::string dtype, qk_norm;
  std::vector<double> median_ms;           // measured (or, in --mode model, modelled) critical path
  // Its timed layers were replayed as graphs (graph_replays > 0); in --mode model, the GPU
  // run would replay them (traced_layer/@modeled_as).
  bool graph_replay = false;
  // Whether every stage was timed ("on") or the layer alone ("off": --stage-timing off);
  // reports from before the option: "on".
  std::string stage_timing = "on";
  std::vector<model::RankTrace> traces;    // empty when the run has no traced layer
  std::vector<std::vector<model::StageTerm>> stage_terms;  // [rank]
  std::string shape_key() const;           // what must agree between a measured run and its traces
};
// Every run of every case of the report at `path`. Throws InputError naming what is wrong.
std::vector<StoredRun> read_report_runs(const std::string& path);

}  // namespace uipc
