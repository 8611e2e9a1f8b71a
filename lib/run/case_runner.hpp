// The case runner: one case of a deck, opened once (layout, communicators, data, the
// dense reference), then each of its runs (transport x schedule x ablation) in turn.
#pragma once

#include <string>

#include "comm/device/device.hpp"
#include "comm/nodes.hpp"
#include "lib/report/report.hpp"
#include "lib/run/backend.hpp"
#include "lib/run/console.hpp"
#include "lib/run/cpu_estimate.hpp"
#include "lib/run/run.hpp"
#include "lib/run/run_shape.hpp"
#include "model/machine.hpp"

namespace uipc {

// What every case of a deck run shares.
struct DeckRun {
  const RunOptions& opt;
  Backend& be;
  Mode mode;
  const NodeLayout& nodes;        // the run's one node layout
  const model::Machine* machine;  // the traced layers' machine (nullptr: not modelled ...)
  std::string machine_note;       // (... and why)
  Stream& compute;
  const Printer& out;
  int world = 1, rank = 0;
};

// Runs case `c` on every rank; returns its results (complete on rank 0). Clears
// *all_pass when a run fails its parity. Collective over MPI_COMM_WORLD.
// `est` (simulation mode; empty elsewhere) widens the watchdog and drives progress lines.
CaseResult run_case(const DeckRun& dr, const Case& c, const CpuEstimate& est, bool* all_pass);

}  // namespace uipc
