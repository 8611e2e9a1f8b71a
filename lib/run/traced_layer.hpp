// One traced layer per run (docs/model.md): after the timed layers, one more layer runs
// under the device layer's recorder, aligned like the timed ones. Every rank's trace is
// shared with every rank; each replays them under the machine (the simulator is a pure
// function, so all agree) and reads its own stages off the modelled timeline with the
// pipeline's own stage accounting. Its times never enter the timed statistics.
#pragma once

#include <string>
#include <vector>

#include "comm/device/tracing_device.hpp"
#include "lib/run/pipeline.hpp"
#include "lib/report/report.hpp"
#include "model/machine.hpp"

namespace uipc {

struct TracedLayerSetup {
  const model::Machine* machine = nullptr;  // null: traced, not modelled
  bool measure = false;                     // events around each op (the per-stream timeline)
  double watchdog_s = 60;
  std::string barrier_label;
  double spin_s = 0;
  // The run's timed layers were replayed as graphs: the traced layer (issued op by op, so
  // that every op is seen) is modelled as one replayed graph, as those layers ran.
  model::Issue issue = model::Issue::kOpByOp;
};

// Runs the traced layer and fills `rr`'s traced and modelled fields (on rank 0: every
// rank's; elsewhere this rank's modelled stages only). Collective over MPI_COMM_WORLD.
// A replay that fails is an error in --mode model (nothing else would be reported) and a
// note in rr.model_note otherwise.
void run_traced_layer(TracingDevice& dev, LayerPipeline& pipe, Stream& compute, const TracedLayerSetup& setup,
                      bool model_mode, RunResult& rr);


}  // namespace uipc
