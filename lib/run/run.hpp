// The run driver: deck -> cases -> (transport x schedule) runs -> parity -> report.
#pragma once

#include <string>
#include <vector>

#include "lib/run/backend.hpp"

namespace uipc {

struct RunOptions {
  std::string deck_path;
  std::string report_path;
  BackendOptions backend;
  std::string gather = "auto";         // auto | nccl | ipc: transport of the output gather
  std::vector<std::string> cases;      // only these cases (empty: all that fit the world)
  bool dump = false;                   // store inputs, weights and outputs in the report
  bool quiet = false;
  double watchdog_s = 0;               // > 0 overrides the deck's watchdog_s
  double sim_time_limit_s = 1800;      // simulation: a case estimated to take longer is refused
  int cache_capacity = 12;             // IPC target cache entries
  int ranks_per_node = 0;              // > 0: declare nodes of this many consecutive ranks
  int hier_chunks = 4;                 // token chunks per batch of the hier transport's pipeline
  bool graphs = true;                  // layers replayed as captured graphs where eligible (lib/run/layer_graph.hpp)
  bool stage_timing = true;            // each stage timed (false: the layer alone; PipelineOptions::stage_timing)
  // Ablation runs beside the full design, for every case (replacing the cases' own
  // lists); empty with ablations_set: none.
  std::vector<std::string> ablations;
  bool ablations_set = false;
  std::string machine;                 // --machine: a machine file or shipped name ("": h200-nvlink)
  std::string command_line;
  std::string kokkos_version;
};

// Runs the deck on MPI_COMM_WORLD; rank 0 writes the report. Returns kExitOk, or
// kExitParityFailed when some case failed parity (the report is written either way), or
// kExitModelOnly after --mode model (no data: parity is not computed).
// Throws uipc::Error for bad input and failures (no report is written then).
int run_deck(const RunOptions& opt);

}  // namespace uipc
