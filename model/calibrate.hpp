// Replaying stored traces and fitting a machine's free parameters to measured stage
// times (`ulysses-ipc model calibrate|validate|loo`, docs/model.md).
//
// A run's modelled stage times are linear in the end times of its event records (the
// pipeline's stage accounting is sums of differences between its events), so each
// rank's accounting is stored with its trace as stage terms: stage s = sum of coef x end
// time of op. The app finds them by probing the pipeline's own accounting and checks
// them against it (lib/traced_layer.cpp); here they turn any replay into stage times.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/machine.hpp"
#include "model/simulator.hpp"
#include "model/trace/trace.hpp"

namespace uipc::model {

struct StageTerm {
  int stage = 0;
  int op = 0;
  double coef = 0;
};

struct ReplayCase {
  std::string label;                              // "report: case run", for tables
  std::vector<RankTrace> traces;                  // every rank's
  std::vector<std::vector<StageTerm>> terms;      // [rank]
  std::vector<double> measured;                   // per stage, the measured critical path (NaN: none)
  // The norm+RoPE profile of the code that ran the measured report (its own bench_kernels
  // run), replacing the machine's: empty for the machine's own.
  std::vector<NormRopePoint> norm_rope;
  // The host's call costs measured beside the report (bench_kernels' floor-op rows: parameter
  // name -> us), replacing the machine's in its replays: empty for the machine's own. Only
  // validate takes them; a fit fits the machine's.
  std::map<std::string, double> host_costs;
  // The GPU's own device costs measured beside the report (the same bench's empty-kernel and
  // floor-op rows; model/machine.hpp), in place of the machine's fitted ones: validate only.
  DeviceCosts device;
  // How the measured layers were issued: replayed graphs are modelled without host calls
  // between their ops (reports before graphs, and --graphs off: op by op).
  Issue issue = Issue::kOpByOp;
};

// Per stage: the modelled critical path (max over ranks) of the case on `m`.
std::vector<double> modeled_stages(const ReplayCase& c, const Machine& m, int num_stages);

struct FitResult {
  Machine machine;       // the start machine with its free parameters fitted
  double objective = 0;  // mean squared log ratio (modelled / measured) over cases and stages
  int evaluations = 0;
};

// Fits every parameter of `start` marked free (Param::free, within [lo, hi]) to the
// cases' measured stages by Nelder-Mead on the mean squared log ratio, from `start`'s
// values, restarted until it stops improving. Deterministic. Bounded: the search runs on
// u in [0, 1] per parameter (value = lo + u (hi - lo)), evaluates only clamped points and
// pays for leaving the box, so every fitted value stays inside [lo, hi], which
// parse_machine keeps inside the parameter's physical range (micro-benchmark floors). `fitted_from` goes into
// the fitted parameters' source. The cases replay on `jobs` threads; the result does not
// depend on their number.
FitResult calibrate(const std::vector<ReplayCase>& cases, const Machine& start, int num_stages,
                    const std::string& fitted_from, int jobs = 1);

}  // namespace uipc::model
