// The traced layer of each run (lib/run/traced_layer.hpp).
#include "lib/run/traced_layer.hpp"

#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "model/calibrate.hpp"
#include "model/simulator.hpp"

namespace uipc {
namespace {

// The pipeline's stage accounting as terms (stage = sum of coef x end time of an event
// record): found by probing last_timing() with one event record at time 1 and the rest
// at 0, and checked against the modelled stages it must reproduce (the accounting must
// stay linear in event times for stored traces to be replayable; this says so if not).
std::vector<model::StageTerm> probe_stage_terms(TracingDevice& dev, LayerPipeline& pipe, const model::RankTrace& mine,
                                                const std::vector<model::OpTime>& modeled, const LayerTiming& expect) {
  std::vector<model::StageTerm> terms;
  std::vector<model::OpTime> probe(mine.ops.size());
  for (size_t j = 0; j < mine.ops.size(); ++j) {
    if (mine.ops[j].kind != model::OpKind::kEventRecord) continue;
    probe[j].end_ms = 1;
    dev.use_modeled_clock(&probe);
    const LayerTiming t = pipe.last_timing();
    dev.use_modeled_clock(nullptr);
    probe[j].end_ms = 0;
    for (int s = 0; s < kNumStages; ++s)
      if (t.stage_ms[s] != 0 && !std::isnan(t.stage_ms[s])) terms.push_back({s, static_cast<int>(j), t.stage_ms[s]});
  }
  for (int s = 0; s < kNumStages; ++s) {
    if (std::isnan(expect.stage_ms[s])) continue;  // not timed (--stage-timing off)
    double sum = 0;
    for (const auto& t : terms)
      if (t.stage == s) sum += t.coef * modeled[t.op].end_ms;
    UIPC_CHECK(std::fabs(sum - expect.stage_ms[s]) <= 1e-9 * (1 + std::fabs(expect.stage_ms[s])),
               std::string("the stage accounting is not linear in event times (stage ") + stage_name(s) + ")");
  }
  return terms;
}

std::string terms_bytes(const std::vector<model::StageTerm>& terms) {
  return std::string(reinterpret_cast<const char*>(terms.data()), terms.size() * sizeof(model::StageTerm));
}

std::vector<model::StageTerm> terms_of(const std::string& b) {
  std::vector<model::StageTerm> t(b.size() / sizeof(model::StageTerm));
  if (!t.empty()) std::memcpy(t.data(), b.data(), t.size() * sizeof(model::StageTerm));
  return t;
}

}  // namespace

void run_traced_layer(TracingDevice& dev, LayerPipeline& pipe, Stream& compute, const TracedLayerSetup& setup,
                      bool model_mode, RunResult& rr) {
  int rank = 0, world = 1;
  UIPC_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  UIPC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  pipe.poison_output();
  set_activity("at the barrier before the traced layer");
  barrier_bounded(MPI_COMM_WORLD, setup.watchdog_s, setup.barrier_label, setup.spin_s);
  set_activity("starting the traced layer");
  dev.begin_trace(setup.measure);
  pipe.enqueue_layer();
  compute.synchronize();
  model::RankTrace mine = dev.end_trace();

  set_activity("exchanging the op traces");
  std::vector<std::string> bytes =
      allgather_strings(MPI_COMM_WORLD, model::serialize(mine), setup.watchdog_s, "the exchange of the op traces");
  std::vector<model::RankTrace> traces;
  for (const auto& b : bytes) traces.push_back(model::deserialize(b));

  // Modelled stages of this rank, as flat [stage..., v_overlap, v_copy]; NaN if none.
  std::vector<double> flat(kNumStages + 2, std::nan(""));
  model::Timeline timeline;
  std::vector<model::StageTerm> terms;
  if (setup.machine) {
    set_activity("replaying the traces under the machine model");
    try {
      timeline = model::simulate(traces, *setup.machine, setup.issue);
      dev.use_modeled_clock(&timeline.ranks[rank]);
      LayerTiming t = pipe.last_timing();
      dev.use_modeled_clock(nullptr);
      terms = probe_stage_terms(dev, pipe, mine, timeline.ranks[rank], t);
      std::copy(t.stage_ms, t.stage_ms + kNumStages, flat.begin());
      flat[kNumStages] = t.v_overlap_ms;
      flat[kNumStages + 1] = t.v_copy_ms;
      rr.machine = setup.machine->name;
    } catch (const Error& e) {
      dev.use_modeled_clock(nullptr);
      if (model_mode) throw RuntimeError(std::string("the model could not replay the traced layer: ") + e.what());
      rr.model_note = std::string("not modelled: ") + e.what();
    }
  }
  std::vector<std::string> all_terms =
      allgather_strings(MPI_COMM_WORLD, terms_bytes(terms), setup.watchdog_s, "the exchange of the stage terms");
  std::vector<double> all(flat.size() * static_cast<size_t>(world));
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Igather(flat.data(), static_cast<int>(flat.size()), MPI_DOUBLE, all.data(),
                             static_cast<int>(flat.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, setup.watchdog_s, "the collection of the modelled stages", {});
  if (rank != 0) return;
  rr.traces = std::move(traces);
  if (rr.machine.empty()) return;
  rr.modeled_ops = timeline.ranks;
  rr.stage_terms.clear();
  for (const auto& b : all_terms) rr.stage_terms.push_back(terms_of(b));
  rr.modeled_waits_before_trace = timeline.waits_before_trace;
  rr.modeled_stage_ms.clear();
  rr.modeled_v_overlap_ms.clear();
  rr.modeled_v_copy_ms.clear();
  for (int r = 0; r < world; ++r) {
    const double* f = all.data() + static_cast<size_t>(r) * flat.size();
    rr.modeled_stage_ms.insert(rr.modeled_stage_ms.end(), f, f + kNumStages);
    rr.modeled_v_overlap_ms.push_back(f[kNumStages]);
    rr.modeled_v_copy_ms.push_back(f[kNumStages + 1]);
  }
}

}  // namespace uipc
