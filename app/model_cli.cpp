// `ulysses-ipc model calibrate|validate|loo` (docs/model.md, "Calibration").
//
// On CLI11 like the other command lines (lib/cli.hpp). Every command takes pairs MEASURED=TRACES: a GPU report and a --mode model report of
// the same cases on the same number of ranks (its traced layers carry the traces and
// the stage terms). Runs are joined by case and run name and must agree in shape and
// in the transport that ran.
#include "app/model_cli.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "app/cli.hpp"
#include "lib/report/report.hpp"
#include "lib/report/trace_report.hpp"
#include "lib/run/traced_layer.hpp"
#include "model/calibrate.hpp"
#include "model/machine.hpp"

namespace uipc {
namespace {

struct Options {
  std::string command, machine, output;
  std::vector<std::string> pair_args;
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> without;
  std::string ablation;  // traced runs of this ablation stand for the measured runs (below)
  bool markdown = false;
};

// The three subcommands share their options: each declared once here.
void declare(CLI::App& app, Options& o) {
  app.require_subcommand(1);
  app.footer(
      "MEASURED is a GPU report (--mode gpu), TRACES a --mode model report of the same cases on the same\n"
      "number of ranks (scripts/model_traces.sh makes those of docs/measured/). The machine: a JSON file or\n"
      "a shipped name (inputs/machines/). docs/model.md says more.");
  struct Sub {
    const char* name;
    const char* help;
  };
  for (const Sub& sub : {Sub{"calibrate", "Fit the machine's free parameters (\"fit\") to the measured stage medians."},
                         Sub{"validate", "Print modelled against measured, stage by stage, for every run."},
                         Sub{"loo", "Leave-one-out: calibrate without each measured report in turn, predict it."}}) {
    CLI::App* c = app.add_subcommand(sub.name, sub.help);
    c->add_option("--machine", o.machine, "the machine (calibrate, loo: the start of the fit) [default: h200-nvlink]")
        ->type_name("FILE|NAME");
    c->add_option("--ablation", o.ablation,
                  "join each measured run R to the traced run R+NAME where there is one: for reports measured "
                  "before a change of the protocol that the ablation NAME undoes (e.g. own-slice-copy)")
        ->type_name("NAME");
    c->add_option("--pair", o.pair_args, "a measured report and its traces (repeatable)")
        ->type_name("MEASURED=TRACES")
        ->required()
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
              const size_t eq = v.find('=');
              return eq == std::string::npos || eq == 0 || eq + 1 == v.size() ? "'" + v + "' is not MEASURED=TRACES"
                                                                               : "";
            },
            ""));
    if (std::string(sub.name) == "calibrate") {
      c->add_option("--without", o.without, "leave this measured report out of the fit (repeatable)")
          ->type_name("MEASURED");
      c->add_option("-o,--output", o.output, "the fitted machine to write")->type_name("OUT.json")->required();
    } else {
      c->add_flag("--markdown", o.markdown, "a markdown table");
    }
  }
}

Options parse(int argc, char** argv, std::string* text) {
  Options o;
  CLI::App app{"The machine model's tools (serial: no mpirun).", "ulysses-ipc model"};
  declare(app, o);
  *text = cli::parse(app, std::vector<std::string>(argv, argv + argc));
  if (!text->empty()) return o;
  for (const char* name : {"calibrate", "validate", "loo"})
    if (app.got_subcommand(name)) o.command = name;
  for (const std::string& v : o.pair_args) {
    const size_t eq = v.find('=');
    o.pairs.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  for (const auto& w : o.without) {
    bool found = false;
    for (const auto& p : o.pairs) found = found || p.first == w;
    if (!found) throw InputError("model " + o.command + ": --without " + w + ": not a measured report of any --pair");
  }
  return o;
}

std::string base_name(const std::string& path) {
  const size_t s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

struct Joined {
  std::string measured_report;
  std::string case_name, run_name;
  model::ReplayCase replay;
};

std::vector<Joined> join_pairs(const Options& o) {
  std::vector<Joined> out;
  for (const auto& [mpath, tpath] : o.pairs) {
    std::vector<StoredRun> measured = read_report_runs(mpath);
    std::vector<StoredRun> traced = read_report_runs(tpath);
    if (!measured.empty() && measured.front().mode != "gpu")
      throw InputError(mpath + ": mode '" + measured.front().mode + "': a measured report must come from --mode gpu");
    if (!traced.empty() && traced.front().mode != "model")
      throw InputError(tpath + ": mode '" + traced.front().mode + "': the traces must come from --mode model");
    std::map<std::string, const StoredRun*> by_name;
    for (const StoredRun& t : traced) by_name[t.case_name + "/" + t.run_name] = &t;
    for (const StoredRun& m : measured) {
      auto it = o.ablation.empty() ? by_name.end() : by_name.find(m.case_name + "/" + m.run_name + "+" + o.ablation);
      if (it == by_name.end()) it = by_name.find(m.case_name + "/" + m.run_name);
      if (it == by_name.end())
        throw InputError(tpath + ": has no run " + m.case_name + "/" + m.run_name + " (of " + mpath + ")");
      const StoredRun& t = *it->second;
      if (t.shape_key() != m.shape_key())
        throw InputError(m.case_name + "/" + m.run_name + ": " + mpath + " is " + m.shape_key() + " but " + tpath +
                         " is " + t.shape_key());
      if (t.transport_used != m.transport_used)
        throw InputError(m.case_name + "/" + m.run_name + ": ran on " + m.transport_used + " in " + mpath + " but on " +
                         t.transport_used + " in " + tpath);
      if (t.traces.empty() || t.stage_terms.size() != t.traces.size())
        throw InputError(tpath + ": " + t.case_name + "/" + t.run_name + " has no traced layer with stage terms");
      Joined j;
      j.measured_report = mpath;
      j.case_name = m.case_name;
      j.run_name = m.run_name;
      j.replay.label = base_name(mpath) + " " + m.case_name + " " + m.run_name;
      j.replay.traces = t.traces;
      j.replay.terms = t.stage_terms;
      j.replay.measured = m.median_ms;
      out.push_back(std::move(j));
    }
  }
  return out;
}

std::vector<model::ReplayCase> replays(const std::vector<Joined>& js, const std::set<std::string>& skip) {
  std::vector<model::ReplayCase> v;
  for (const auto& j : js)
    if (!skip.count(j.measured_report)) v.push_back(j.replay);
  return v;
}

std::string pct(double modeled, double measured) {
  if (!(measured > 0) || !std::isfinite(modeled)) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%+.1f%%", 100.0 * (modeled / measured - 1.0));
  return b;
}

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

// One row per run: measured -> modelled (error) for layer and scatter, errors for the rest.
struct Row {
  std::string report, case_name, run;
  std::vector<double> measured, modeled;
};

void print_rows(const std::vector<Row>& rows, bool markdown, FILE* out) {
  const char* heads[kNumStages] = {"projection", "norm_rope", "scatter", "attention", "gather", "out_proj", "layer"};
  if (markdown) {
    std::fprintf(out, "| report | case | run | layer ms measured / modelled | scatter ms measured / modelled |");
    for (int s = 0; s < kNumStages; ++s) std::fprintf(out, " %s |", heads[s]);
    std::fprintf(out, "\n|---|---|---|---|---|");
    for (int s = 0; s < kNumStages; ++s) std::fprintf(out, "---|");
    std::fprintf(out, "\n");
  } else {
    std::fprintf(out, "%-28s %-22s %-18s %-20s %-20s", "report", "case", "run", "layer meas/model", "scatter meas/model");
    for (int s = 0; s < kNumStages; ++s) std::fprintf(out, " %10s", heads[s]);
    std::fprintf(out, "\n");
  }
  for (const Row& r : rows) {
    const std::string layer = ms(r.measured[kStageLayer]) + " / " + ms(r.modeled[kStageLayer]);
    const std::string scatter = ms(r.measured[kStageScatter]) + " / " + ms(r.modeled[kStageScatter]);
    if (markdown) {
      std::fprintf(out, "| %s | %s | %s | %s | %s |", r.report.c_str(), r.case_name.c_str(), r.run.c_str(),
                   layer.c_str(), scatter.c_str());
      for (int s = 0; s < kNumStages; ++s) std::fprintf(out, " %s |", pct(r.modeled[s], r.measured[s]).c_str());
    } else {
      std::fprintf(out, "%-28s %-22s %-18s %-20s %-20s", r.report.c_str(), r.case_name.c_str(), r.run.c_str(),
                   layer.c_str(), scatter.c_str());
      for (int s = 0; s < kNumStages; ++s) std::fprintf(out, " %10s", pct(r.modeled[s], r.measured[s]).c_str());
    }
    std::fprintf(out, "\n");
  }
  // The aims of docs/model.md: layer within 10%, scatter within 15%.
  int layer_ok = 0, scatter_ok = 0;
  double worst_layer = 0, worst_scatter = 0;
  for (const Row& r : rows) {
    const double el = std::fabs(r.modeled[kStageLayer] / r.measured[kStageLayer] - 1);
    const double es = std::fabs(r.modeled[kStageScatter] / r.measured[kStageScatter] - 1);
    layer_ok += el <= 0.10;
    scatter_ok += es <= 0.15;
    worst_layer = std::max(worst_layer, el);
    worst_scatter = std::max(worst_scatter, es);
  }
  std::fprintf(out, "%s%d of %zu runs with the layer within 10%% (worst %.1f%%), %d of %zu with the scatter within 15%% (worst %.1f%%)\n",
               markdown ? "\n" : "", layer_ok, rows.size(), 100 * worst_layer, scatter_ok, rows.size(), 100 * worst_scatter);
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char b[16];
  std::strftime(b, sizeof(b), "%Y-%m-%d", std::gmtime(&now));
  return b;
}

}  // namespace

int model_command(int argc, char** argv) {
  std::string text;
  const Options o = parse(argc, argv, &text);
  if (!text.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  const model::Machine base = model::load_machine(machine_path(o.machine));
  const std::vector<Joined> joined = join_pairs(o);

  if (o.command == "calibrate") {
    std::set<std::string> skip(o.without.begin(), o.without.end());
    std::string from;
    for (const auto& p : o.pairs)
      if (!skip.count(p.first)) from += (from.empty() ? "" : ", ") + base_name(p.first);
    model::FitResult fit =
        model::calibrate(replays(joined, skip), base, kNumStages, "ulysses-ipc model calibrate on " + today() + " to " + from);
    std::ofstream out(o.output);
    out << model::machine_to_json(fit.machine);
    out.close();
    if (!out) throw RuntimeError(o.output + ": cannot write the machine file");
    std::printf("calibrated %s: %zu free parameter(s), rms log error %.4f after %d replays; wrote %s\n",
                base.name.c_str(), [&] { size_t n = 0; for (auto& [k, p] : base.params) n += p.free; return n; }(),
                std::sqrt(fit.objective), fit.evaluations, o.output.c_str());
    for (const auto& [name, p] : fit.machine.params)
      if (p.free) std::printf("  %-26s %10.4g  (in [%g, %g])\n", name.c_str(), p.value, p.lo, p.hi);
    return 0;
  }

  std::vector<Row> rows;
  if (o.command == "validate") {
    for (const Joined& j : joined)
      rows.push_back({base_name(j.measured_report), j.case_name, j.run_name, j.replay.measured,
                      model::modeled_stages(j.replay, base, kNumStages)});
    std::printf("%smodelled on %s against measured medians (critical path), stage by stage\n",
                o.markdown ? "" : "# ", base.name.c_str());
    print_rows(rows, o.markdown, stdout);
    return 0;
  }

  // loo: each measured report predicted by a machine fitted to the others.
  std::vector<std::string> reports;
  for (const auto& p : o.pairs)
    if (std::find(reports.begin(), reports.end(), p.first) == reports.end()) reports.push_back(p.first);
  if (reports.size() < 2) throw InputError("model loo: needs at least two measured reports");
  for (const std::string& left_out : reports) {
    model::FitResult fit = model::calibrate(replays(joined, {left_out}), base, kNumStages, "all but " + base_name(left_out));
    std::fprintf(stderr, "loo: without %s: rms log error %.4f on the others (%d replays)\n", base_name(left_out).c_str(),
                 std::sqrt(fit.objective), fit.evaluations);
    for (const Joined& j : joined)
      if (j.measured_report == left_out)
        rows.push_back({base_name(j.measured_report), j.case_name, j.run_name, j.replay.measured,
                        model::modeled_stages(j.replay, fit.machine, kNumStages)});
  }
  std::printf("%sleave-one-out on %s: each report predicted by a machine fitted to the others only\n",
              o.markdown ? "" : "# ", base.name.c_str());
  print_rows(rows, o.markdown, stdout);
  return 0;
}

}  // namespace uipc
