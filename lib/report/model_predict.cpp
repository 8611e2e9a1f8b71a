// Replays of --mode model reports with finite-difference sensitivities (lib/report/model_predict.hpp).
#include "lib/report/model_predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "base/error.hpp"
#include "lib/report/report.hpp"
#include "lib/report/trace_report.hpp"
#include "model/calibrate.hpp"

namespace uipc {
namespace {

// Parameters a user can measure and the model is made of; switches, counts and the
// informational HBM spec are left out of the sensitivities.
bool sensitivity_candidate(const std::string& name, const model::Param& p) {
  if (name == "peer_copy_on_sm" || name == "copy_engines" || name == "sm_count" || name == "hbm_gbs") return false;
  return p.range_hi > p.range_lo && p.value > 0;
}

// Names here are the report's and the machine's own (no quotes or backslashes to escape
// in practice); escaped anyway so the JSON is always valid.
std::string quoted(const std::string& v) {
  std::string o = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

// The parameter whose step moves one modelled figure most: d log(figure) / d log(parameter).
// A figure that no step moves (a zero scatter) names none.
struct Sensitivity {
  std::string name;
  double elasticity = 0;
  void offer(const std::string& param, double moved, double base, double factor) {
    if (!(moved > 0 && base > 0)) return;
    const double e = std::log(moved / base) / std::log(factor);
    if (std::fabs(e) > std::fabs(elasticity) + 1e-12) elasticity = e, name = param;
  }
};

// Start skews, as factors of the machine's start_skew_us: no two layers leave the barrier
// alike, and where a multi-rank scatter's copies meet on the links moves with the skew.
// kMedianSkews give a figure (measured figures are medians over layers); kRangeSkews, a
// superset, the range beside it.
constexpr double kMedianSkews[] = {0.8, 0.9, 1.0, 1.1, 1.2};
constexpr double kRangeSkews[] = {0.8, 0.85, 0.9, 0.95, 0.975, 1.0, 1.025, 1.05, 1.1, 1.15, 1.2};

// The run's modelled stages with start_skew_us times each factor, by factor.
template <size_t N>
std::map<double, std::vector<double>> over_skews(const model::ReplayCase& c, const model::Machine& m,
                                                 const double (&factors)[N]) {
  std::map<double, std::vector<double>> by_skew;
  for (double f : factors) {
    model::Machine moved = m;
    moved.params.at("start_skew_us").value *= f;
    by_skew[f] = model::modeled_stages(c, moved, kNumStages);
  }
  return by_skew;
}

// The median layer and scatter over kMedianSkews of replays made at (at least) those skews.
std::pair<double, double> skew_medians(const std::map<double, std::vector<double>>& by_skew) {
  std::vector<double> layers, scatters;
  for (double f : kMedianSkews) {
    layers.push_back(by_skew.at(f)[kStageLayer]);
    scatters.push_back(by_skew.at(f)[kStageScatter]);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(layers), median(scatters)};
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.9g", std::isfinite(v) ? v : 0.0);
  return b;
}

}  // namespace

int model_predict(const std::vector<std::string>& reports, const model::Machine& m, const std::string& out) {
  constexpr double kStep = 1.05;
  std::ostringstream j;
  j << "{";
  for (size_t ri = 0; ri < reports.size(); ++ri) {
    const std::string& path = reports[ri];
    j << (ri ? ",\n " : "\n ") << quoted(path) << ": {";
    bool first = true;
    for (const StoredRun& r : read_report_runs(path)) {
      if (r.mode != "model") throw InputError(path + ": mode '" + r.mode + "': model predict replays --mode model reports");
      if (r.traces.empty() || r.stage_terms.size() != r.traces.size())
        throw InputError(path + ": " + r.case_name + "/" + r.run_name + " has no traced layer with stage terms");
      model::ReplayCase c;
      c.label = r.case_name + " " + r.run_name;
      c.traces = r.traces;
      c.terms = r.stage_terms;
      c.issue = r.graph_replay ? model::Issue::kGraphReplay : model::Issue::kOpByOp;
      // The run at every skew of the range, once: the figure at the machine's own skew, the
      // medians and the range all come from these replays.
      const std::map<double, std::vector<double>> by_skew = over_skews(c, m, kRangeSkews);
      const std::vector<double>& base = by_skew.at(1.0);
      const auto [layer_mid, scatter_mid] = skew_medians(by_skew);
      // The layer's and the scatter's most sensitive parameter: a transport choice rests on
      // the scatter, whose parameter is often not the layer's. Each side of a step is the
      // median over start skews: one replay of a multi-rank scatter jumps by +-12% for a 3%
      // step of a microsecond latency (the ranks' copies meet on the links in another
      // order), and a step that lands on such a jump would name a parameter by it.
      Sensitivity layer, scatter;
      for (const auto& [name, p] : m.params) {
        if (!sensitivity_candidate(name, p)) continue;
        model::Machine moved = m;
        model::Param& q = moved.params.at(name);
        const double f = p.value * kStep <= p.range_hi ? kStep : 1 / kStep;
        q.value = p.value * f;
        const auto [l, sc] = skew_medians(over_skews(c, moved, kMedianSkews));
        layer.offer(name, l, layer_mid, f);
        scatter.offer(name, sc, scatter_mid, f);
      }
      // The layer and scatter over the whole range of skews, beside the figure (a U8 ipc
      // scatter moves by up to 8% for 0.5 us of start_skew_us).
      double layer_lo = base[kStageLayer], layer_hi = layer_lo, scatter_lo = base[kStageScatter],
             scatter_hi = scatter_lo;
      for (const auto& [f, st] : by_skew) {
        layer_lo = std::min(layer_lo, st[kStageLayer]), layer_hi = std::max(layer_hi, st[kStageLayer]);
        scatter_lo = std::min(scatter_lo, st[kStageScatter]), scatter_hi = std::max(scatter_hi, st[kStageScatter]);
      }
      j << (first ? "\n  " : ",\n  ") << quoted(r.case_name + "/" + r.run_name) << ": {\"stages_ms\": [";
      for (size_t s = 0; s < base.size(); ++s) j << (s ? ", " : "") << num(base[s]);
      j << "], \"world\": " << r.world << ", \"sensitive\": " << quoted(layer.name)
        << ", \"elasticity\": " << num(layer.elasticity) << ", \"scatter_sensitive\": " << quoted(scatter.name)
        << ", \"scatter_elasticity\": " << num(scatter.elasticity) << ", \"skew_median_ms\": [" << num(layer_mid)
        << ", " << num(scatter_mid) << "], \"skew_layer_ms\": [" << num(layer_lo) << ", " << num(layer_hi)
        << "], \"skew_scatter_ms\": [" << num(scatter_lo) << ", " << num(scatter_hi) << "]}";
      first = false;
    }
    j << "}";
  }
  // What the figures were modelled on: the machine, and where a GPU's or a host's own measured
  // costs stood for its fitted ones, the bench they came from (model predict --gpu, --host).
  std::string host_costs;
  for (const auto& [name, p] : m.params)
    if (p.source.rfind(kHostCostsSource, 0) == 0) host_costs = p.source;
  j << (reports.empty() ? "\n " : ",\n ") << quoted("_modelled_on") << ": {\"machine\": " << quoted(m.name)
    << ", \"gpu_costs\": " << quoted(m.device.source) << ", \"host_costs\": " << quoted(host_costs) << "}";
  j << "\n}\n";
  std::ofstream o(out);
  o << j.str();
  o.close();
  if (!o) throw RuntimeError(out + ": cannot write");
  return 0;
}

}  // namespace uipc
