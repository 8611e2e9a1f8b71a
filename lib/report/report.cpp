// The report writer: provenance, each case's spec, and per run the per-iteration
// per-stage times of every rank with their critical-path statistics (docs/report.md).
#include "lib/report/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "base/error.hpp"
#include "lib/hdf5/hdf5_file.hpp"
#include "lib/report/trace_report.hpp"

namespace uipc {

namespace {

constexpr int64_t kReportSchemaVersion = 1;

// The temporary being written, for remove_partial_report() in a signal handler: a fixed
// buffer (no allocation there) published by a lock-free flag.
char g_partial_path[4096];
std::atomic<int> g_partial_active{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

// Registers `tmp` for removal on a signal while it exists (a path too long for the
// buffer is not registered: a signal then may leave it, a normal failure still not).
class PartialGuard {
 public:
  explicit PartialGuard(const std::string& tmp) {
    if (tmp.size() < sizeof g_partial_path) {
      std::memcpy(g_partial_path, tmp.c_str(), tmp.size() + 1);
      g_partial_active.store(1);
    }
  }
  ~PartialGuard() { g_partial_active.store(0); }
  PartialGuard(const PartialGuard&) = delete;
  PartialGuard& operator=(const PartialGuard&) = delete;
};

std::vector<std::string> stage_names() {
  std::vector<std::string> v;
  for (int s = 0; s < kNumStages; ++s) v.push_back(stage_name(s));
  return v;
}

std::string run_group_name(const RunResult& r) {
  return r.transport_requested + "." + r.schedule + (r.ablation.empty() ? "" : "+" + r.ablation);
}

// Everything that would make the file malformed is checked before the file exists, so
// a bad call leaves nothing behind (not even a temporary).
void check_inputs(const std::vector<CaseResult>& cases) {
  std::set<std::string> case_names;
  for (const CaseResult& cr : cases) {
    UIPC_CHECK(case_names.insert(cr.spec.name).second, "report: duplicate case '" + cr.spec.name + "'");
    std::set<std::string> run_names;
    for (const RunResult& r : cr.runs) {
      std::string where = "report: case '" + cr.spec.name + "' run '" + run_group_name(r) + "'";
      UIPC_CHECK(!r.transport_requested.empty() && !r.schedule.empty(), where + ": empty transport or schedule");
      UIPC_CHECK(r.transport_requested.find('/') == std::string::npos && r.schedule.find('/') == std::string::npos,
                 where + ": '/' in a name");
      UIPC_CHECK(run_names.insert(run_group_name(r)).second, where + ": duplicate run");
      UIPC_CHECK(r.repeats >= 0 && r.iterations >= 0 && r.ranks >= 0, where + ": negative count");
      size_t layers = static_cast<size_t>(r.repeats) * static_cast<size_t>(r.iterations) * static_cast<size_t>(r.ranks);
      UIPC_CHECK(r.stage_ms.size() == layers * kNumStages,
                 where + ": stage_ms has " + std::to_string(r.stage_ms.size()) + " values, expected repeats*iterations*ranks*" +
                     std::to_string(kNumStages) + " = " + std::to_string(layers * kNumStages));
      UIPC_CHECK(r.v_overlap_ms.empty() || r.v_overlap_ms.size() == layers,
                 where + ": v_overlap_ms has " + std::to_string(r.v_overlap_ms.size()) +
                     " values, expected 0 or repeats*iterations*ranks = " + std::to_string(layers));
    }
    if (cr.has_dump) {
      std::set<std::string> tensor_names;
      for (const auto& [name, values] : cr.dump.tensors) {
        std::string where = "report: case '" + cr.spec.name + "' dump '" + name + "'";
        UIPC_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                   where + ": invalid tensor name");
        UIPC_CHECK(tensor_names.insert(name).second, where + ": duplicate tensor");
        auto it = cr.dump.shapes.find(name);
        if (it != cr.dump.shapes.end()) {
          int64_t n = 1;
          for (int64_t d : it->second) {
            UIPC_CHECK(d >= 0, where + ": negative dimension");
            n *= d;
          }
          UIPC_CHECK(static_cast<size_t>(n) == values.size(),
                     where + ": shape holds " + std::to_string(n) + " values, tensor has " + std::to_string(values.size()));
        }
      }
    }
  }
}

// Per stage: the layer's critical path, i.e. for each (repeat, iteration) the maximum
// over ranks, as one sample list per stage.
std::vector<std::vector<double>> critical_path_samples(const RunResult& r) {
  std::vector<std::vector<double>> samples(kNumStages);
  for (int rep = 0; rep < r.repeats; ++rep)
    for (int it = 0; it < r.iterations; ++it)
      for (int s = 0; s < kNumStages; ++s) {
        double m = -std::numeric_limits<double>::infinity();
        for (int rank = 0; rank < r.ranks; ++rank) {
          size_t idx = ((static_cast<size_t>(rep) * r.iterations + it) * r.ranks + rank) * kNumStages + s;
          double v = r.stage_ms[idx];
          m = std::isnan(v) || std::isnan(m) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, v);
        }
        if (r.ranks > 0) samples[s].push_back(m);
      }
  return samples;
}

// What ran and how it went: the transport asked for and used, the schedule and ablation,
// parity, the target cache and the graphs.
void write_run_identity(const h5::Group& g, const RunResult& r) {
  g.write_attr("transport", r.transport_requested);
  g.write_attr("transport_used", r.transport_used);
  g.write_attr("fallback_reason", r.fallback_reason);
  g.write_attr("gather_transport", r.gather_transport);
  g.write_attr("collectives", r.collectives);
  g.write_attr("attention", r.attention);
  g.write_attr("schedule", r.schedule);
  g.write_attr("ablation", r.ablation);
  g.write_attr("transport_note", r.transport_note);
  g.write_attr("projection", r.projection);
  g.write_attr("parity_pass", r.parity_pass ? 1 : 0);
  g.write_attr("parity_kind", r.approximate ? "approximate" : "exact");
  if (r.approximate) g.write_attr("approx_pass", r.approx_pass ? 1 : 0);
  g.write_attr("parity_computed", r.parity_computed ? 1 : 0);
  g.write_attr("parity_max_abs", r.parity_max_abs);
  g.write_attr("parity_rel_l2", r.parity_rel_l2);
  g.write_attr("parity_finite", r.parity_finite ? 1 : 0);
  g.write_attr("output_digest", r.output_digest);
  g.write_attr("handshakes_per_layer", r.handshakes_per_layer);
  g.write_attr("ulysses_nodes", r.ulysses_nodes);
  g.write_attr("hier_chunks", r.hier_chunks);
  g.write_attr("cache_hits", r.cache_hits);
  g.write_attr("cache_misses", r.cache_misses);
  g.write_attr("cache_evictions", r.cache_evictions);
  g.write_attr("graphs", r.graphs);
  g.write_attr("graph_captures", r.graph_captures);
  g.write_attr("graph_replays", r.graph_replays);
  g.write_attr("graph_divergences", r.graph_divergences);
  g.write_attr("graph_last_divergence", r.graph_last_divergence);
  g.write_attr("stage_timing", r.stage_timing);
}

// One value per timed layer of rank 0: its host's enqueue time and whether it was a replayed graph.
void write_per_layer(const h5::Group& g, const RunResult& r) {
  if (!r.host_enqueue_ms.empty()) {
    UIPC_CHECK(r.host_enqueue_ms.size() == static_cast<size_t>(r.repeats) * static_cast<size_t>(r.iterations),
               "host_enqueue_ms does not hold one value per timed layer");
    h5::Dataset he = g.write_dataset("host_enqueue_ms", {r.repeats, r.iterations}, r.host_enqueue_ms.data());
    he.write_attr("units", "ms");
    he.write_attr("dims", std::vector<std::string>{"repeat", "iteration"});
  }
  if (!r.graph_replayed.empty()) {
    UIPC_CHECK(r.graph_replayed.size() == static_cast<size_t>(r.repeats) * static_cast<size_t>(r.iterations),
               "graph_replayed does not hold one value per timed layer");
    h5::Dataset gr = g.write_dataset("graph_replayed", {r.repeats, r.iterations}, r.graph_replayed.data());
    gr.write_attr("dims", std::vector<std::string>{"repeat", "iteration"});
    gr.write_attr("description", "1: rank 0's timed layer was a replayed graph; 0: issued op by op (watched, captured or fallen back)");
  }
}

// The timed window, the bytes moved and the run's dimensions.
void write_run_shape(const h5::Group& g, const RunResult& r) {
  g.write_attr("timed_wall_start_s", r.timed_wall_start_s);
  g.write_attr("timed_wall_end_s", r.timed_wall_end_s);
  g.write_attr("scatter_bytes_per_rank", r.scatter_bytes_per_rank);
  g.write_attr("gather_bytes_per_rank", r.gather_bytes_per_rank);
  g.write_attr("repeats", r.repeats);
  g.write_attr("iterations", r.iterations);
  g.write_attr("ranks", r.ranks);
}

// Every stage of every layer on every rank, and V's copy and its overlap.
void write_stage_times(const h5::Group& g, const RunResult& r) {
  h5::Dataset st = g.write_dataset("stage_ms", {r.repeats, r.iterations, r.ranks, kNumStages}, r.stage_ms.data());
  st.write_attr("units", "ms");
  st.write_attr("stages", stage_names());
  st.write_attr("dims", std::vector<std::string>{"repeat", "iteration", "rank", "stage"});
  if (!r.v_overlap_ms.empty()) {
    h5::Dataset ov = g.write_dataset("v_overlap_ms", {r.repeats, r.iterations, r.ranks}, r.v_overlap_ms.data());
    ov.write_attr("units", "ms");
    ov.write_attr("dims", std::vector<std::string>{"repeat", "iteration", "rank"});
  }
  if (!r.v_copy_ms.empty()) {
    UIPC_CHECK(r.v_copy_ms.size() == r.v_overlap_ms.size(), "v_copy_ms and v_overlap_ms differ in size");
    h5::Dataset vc = g.write_dataset("v_copy_ms", {r.repeats, r.iterations, r.ranks}, r.v_copy_ms.data());
    vc.write_attr("units", "ms");
    vc.write_attr("dims", std::vector<std::string>{"repeat", "iteration", "rank"});
  }
}

// How the work was split (tokens and heads per rank) and, over diffusion steps, the error per step.
void write_split_and_steps(const h5::Group& g, const RunResult& r) {
  g.write_attr("tokens_per_rank", r.tokens_per_rank);
  g.write_attr("heads_per_rank", r.heads_per_rank);
  g.write_attr("token_imbalance", r.token_imbalance);
  g.write_attr("head_imbalance", r.head_imbalance);
  g.write_attr("steps", r.steps);
  if (!r.step_max_abs.empty()) {
    const std::vector<std::string> dims{"step"};
    for (const auto& [name, v] : {std::make_pair("step_max_abs", &r.step_max_abs), std::make_pair("step_rel_l2", &r.step_rel_l2),
                                  std::make_pair("step_vs_exact_max_abs", &r.step_vs_exact_max_abs),
                                  std::make_pair("step_vs_exact_rel_l2", &r.step_vs_exact_rel_l2)}) {
      h5::Dataset d = g.write_dataset(name, {static_cast<int64_t>(v->size())}, v->data());
      d.write_attr("dims", dims);
    }
    for (const auto& [name, v] : {std::make_pair("step_inter_bytes_sent", &r.step_inter_bytes_sent),
                                  std::make_pair("step_inter_bytes_full", &r.step_inter_bytes_full)}) {
      h5::Dataset d = g.write_dataset(name, {static_cast<int64_t>(v->size())}, v->data());
      d.write_attr("units", "bytes");
      d.write_attr("dims", dims);
    }
  }
}

// The critical path's median, p10 and p90 per stage, and the scatter's bandwidth at its median.
void write_statistics(const h5::Group& g, const RunResult& r) {
  std::vector<std::vector<double>> samples = critical_path_samples(r);
  std::vector<double> med(kNumStages), p10(kNumStages), p90(kNumStages);
  for (int s = 0; s < kNumStages; ++s) {
    med[s] = percentile(samples[s], 50);
    p10[s] = percentile(samples[s], 10);
    p90[s] = percentile(samples[s], 90);
  }
  g.write_attr("median_ms", med);
  g.write_attr("p10_ms", p10);
  g.write_attr("p90_ms", p90);
  g.write_attr("stats_units", "ms");
  g.write_attr("stages", stage_names());
  double scatter_ms = med[kStageScatter];
  double gbs = (std::isfinite(scatter_ms) && scatter_ms > 0)
                   ? static_cast<double>(r.scatter_bytes_per_rank) / (scatter_ms * 1e-3) / 1e9
                   : 0.0;
  g.write_attr("scatter_bandwidth_gbs", gbs);
}

void write_run(const h5::Group& cg, const RunResult& r) {
  h5::Group g = cg.create_group(run_group_name(r));
  write_run_identity(g, r);
  write_per_layer(g, r);
  write_run_shape(g, r);
  write_stage_times(g, r);
  write_split_and_steps(g, r);
  write_statistics(g, r);
  write_traced_layer(g, r);
}

void write_case(const h5::Group& cases_group, const CaseResult& cr) {
  h5::Group cg = cases_group.create_group(cr.spec.name);
  write_case_attributes(cg, cr.spec);
  std::vector<std::string> runs;
  for (const RunResult& r : cr.runs) runs.push_back(run_group_name(r));
  cg.write_attr("runs", runs);
  for (const RunResult& r : cr.runs) write_run(cg, r);
  if (cr.has_dump) {
    h5::Group dg = cg.create_group("dump");
    for (const auto& [name, values] : cr.dump.tensors) {
      auto it = cr.dump.shapes.find(name);
      std::vector<int64_t> shape =
          it != cr.dump.shapes.end() ? it->second : std::vector<int64_t>{static_cast<int64_t>(values.size())};
      dg.write_dataset(name, shape, values.data());
    }
  }
}

}  // namespace

const char* stage_name(int stage) {
  static const char* const names[kNumStages] = {"projection", "norm_rope",      "scatter", "attention",
                                                "gather",     "out_projection", "layer"};
  return stage >= 0 && stage < kNumStages ? names[stage] : "?";
}

void remove_partial_report() noexcept {
  // unlink is async-signal-safe; after the rename the name is gone and this is a no-op.
  if (g_partial_active.load()) ::unlink(g_partial_path);
}

bool mostly_replayed(const std::vector<int64_t>& graph_replayed) {
  const auto replayed = std::count_if(graph_replayed.begin(), graph_replayed.end(), [](int64_t f) { return f != 0; });
  return 2 * static_cast<size_t>(replayed) > graph_replayed.size();
}

double percentile(std::vector<double> ms, double p) {
  UIPC_CHECK(p >= 0 && p <= 100, "percentile: p = " + std::to_string(p) + " is outside [0, 100]");
  if (ms.empty()) return std::numeric_limits<double>::quiet_NaN();
  for (double v : ms)
    if (std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();  // as numpy does
  std::sort(ms.begin(), ms.end());
  // numpy's default ("linear"): position h = (n-1) p/100 between order statistics.
  double h = (static_cast<double>(ms.size()) - 1) * p / 100.0;
  size_t lo = static_cast<size_t>(std::floor(h));
  size_t hi = std::min(lo + 1, ms.size() - 1);
  double frac = h - static_cast<double>(lo);
  if (frac == 0) return ms[lo];
  return ms[lo] + frac * (ms[hi] - ms[lo]);
}

void write_report(const std::string& path, const Provenance& prov, const std::vector<CaseResult>& cases) {
  check_inputs(cases);
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  PartialGuard guard(tmp);
  try {
    h5::File f = h5::File::create(tmp);
    {
      h5::Group root = f.root();
      root.write_attr("software", prov.software);
      root.write_attr("software_version", prov.version);
      root.write_attr("date", prov.date);
      root.write_attr("command_line", prov.command_line);
      root.write_attr("mode", prov.mode);
      root.write_attr("deck", prov.deck_path);
      root.write_attr("world_size", prov.world_size);
      root.write_attr("schema_version", kReportSchemaVersion);
      std::vector<std::string> names;
      for (const CaseResult& cr : cases) names.push_back(cr.spec.name);
      root.write_attr("cases", names);
      root.write_attr("hosts", prov.hosts);
      root.write_attr("devices", prov.devices);
      root.write_attr("host_cpus", prov.host_cpus);
      root.write_attr("node_of_rank", prov.node_of_rank);
      root.write_attr("node_layout", prov.node_layout);
      h5::Group versions = root.create_group("versions");
      for (const auto& [key, value] : prov.versions) versions.write_attr(key, value);
      h5::Group cases_group = root.create_group("cases");
      for (const CaseResult& cr : cases) write_case(cases_group, cr);
    }
    f.close();
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw RuntimeError(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace uipc
