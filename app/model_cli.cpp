// `ulysses-ipc model calibrate|validate|loo` (docs/model.md, "Calibration").
//
// On CLI11 like the other command lines (lib/cli.hpp). Every command takes pairs MEASURED=TRACES: a GPU report and a --mode model report of
// the same cases on the same number of ranks (its traced layers carry the traces and
// the stage terms). Runs are joined by case and run name and must agree in shape and
// in the transport that ran.
#include "app/model_cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "base/error.hpp"
#include "app/cli.hpp"
#include "lib/report/model_bench.hpp"
#include "lib/report/model_predict.hpp"
#include "lib/report/report.hpp"
#include "lib/report/trace_report.hpp"
#include "lib/run/traced_layer.hpp"
#include "model/calibrate.hpp"
#include "model/machine.hpp"
#include "model/simulator.hpp"
#include "model/trace/trace.hpp"

namespace uipc {
namespace {

struct Options {
  std::string command, machine, output;
  std::vector<std::string> pair_args;
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> without;
  std::vector<std::string> ablation_args;  // [MEASURED=]NAME
  // Traced runs of this ablation stand for the measured runs (below): per measured
  // report, "" for every report without its own.
  std::map<std::string, std::string> ablation;
  bool markdown = false;
  std::vector<int> nccl_ranks;      // `model nccl`: the rank counts of the modelled sweep
  std::vector<int64_t> nccl_bytes;  // `model nccl`: sizes (bytes per rank) in place of 1 KiB..1 GiB
  std::vector<std::string> gemms, attentions;  // `model kernel`: M,N,K and B,H,S,D shapes (bf16)
  std::vector<std::string> predict_reports;     // `model predict`: --mode model reports
  std::vector<std::string> op_runs;              // `model ops`: CASE/RUN names (all when empty)
  std::vector<std::string> bench_args;                       // MEASURED=BENCH.h5
  std::map<std::string, std::string> bench;                  // measured report -> its code's bench_kernels file
  std::vector<std::string> rates;  // bench_kernels files whose profiles (norm+RoPE, GEMM, attention) become the machine's
  std::vector<std::string> profiles;  // `model rates`: only these of the files' profiles (all when empty)
  std::vector<std::string> group_args;                       // MEASURED=NAME
  std::map<std::string, std::string> group;                  // measured report -> the group left out with it
  std::vector<std::string> host_args;                         // validate --host MEASURED=BENCH.h5
  std::map<std::string, std::string> host;                    // measured report -> the bench of its host
  std::string host_bench;                                     // predict --host BENCH.h5
  std::vector<std::string> gpu_args;                          // validate --gpu MEASURED=BENCH.h5
  std::map<std::string, std::string> gpu;                     // measured report -> the bench of its GPU
  std::string gpu_bench;                                      // predict, ops --gpu BENCH.h5
  std::vector<std::string> timed_events;  // measured reports whose code recorded every event timed
  int jobs = 0;  // calibrate, loo: threads replaying the cases (0: one per hardware thread)
};

// --rates of predict and ops (calibrate, validate and loo say more: the fitted file keeps them).
constexpr const char* kRatesHelp =
    "a bench_kernels -o file: its profiles (norm+RoPE, GEMM and attention by shape) become the machine's; repeatable";

// --gpu of predict and ops (validate's takes it per report).
constexpr const char* kGpuHelp =
    "a bench_kernels -o file of the GPU to predict (its latency section's graph-node and floor-op rows): its "
    "device costs replace the machine's";

// calibrate, validate and loo: the subcommands over measured reports and their traces share
// their options, each declared once here.
void declare_measured_commands(CLI::App& app, Options& o) {
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
    c->add_option("--ablation", o.ablation_args,
                  "join each measured run R to the traced run R+NAME where there is one: for reports measured "
                  "before a change of the protocol that the ablation NAME undoes (e.g. own-slice-copy); "
                  "MEASURED=NAME for that report only (repeatable)")
        ->type_name("[MEASURED=]NAME");
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
    c->add_option("--bench", o.bench_args,
                  "the bench_kernels -o file of the code that made MEASURED: its norm+RoPE profile replaces the "
                  "machine's in that report's replays (repeatable)")
        ->type_name("MEASURED=BENCH.h5");
    c->add_option("--rates", o.rates,
                  "a bench_kernels -o file of the current code: the profiles it holds (norm+RoPE, GEMM and attention by shape) "
                  "become the machine's (and the fitted file's); repeatable, one file a profile")
        ->type_name("BENCH.h5");
    c->add_option("--timed-events", o.timed_events,
                  "the code that made MEASURED recorded every event as a timed one (before ordering events, "
                  "EventUse): its traces' event records are replayed as timed, each a node of its graph (repeatable)")
        ->type_name("MEASURED");
    c->add_option("--group", o.group_args,
                  "loo: leave this measured report out together with every other of the same NAME (reports of "
                  "one deck on one machine, measured at different code: each would all but predict the other); "
                  "calibrate and validate ignore it (repeatable)")
        ->type_name("MEASURED=NAME");
    if (std::string(sub.name) == "validate")
      c->add_option("--host", o.host_args,
                    "a bench_kernels -o file measured beside MEASURED, on its host (the floor-op rows of its latency "
                    "section): that host's call costs (host_gemm_us, host_attention_us, host_launch_us, "
                    "host_copy_us, host_api_us) replace the machine's in that report's replays (repeatable)")
          ->type_name("MEASURED=BENCH.h5");
    if (std::string(sub.name) == "validate")
      c->add_option("--gpu", o.gpu_args,
                    "a bench_kernels -o file measured beside MEASURED, on its GPU (the graph-node and floor-op rows "
                    "of its latency section): that GPU's device costs, op by op and as graph nodes (an empty "
                    "kernel, each kind's floor op, a record, a stream write or wait, NCCL at one rank), replace the "
                    "machine's in that report's replays (repeatable)")
          ->type_name("MEASURED=BENCH.h5");
    if (std::string(sub.name) != "validate")
      c->add_option("--jobs", o.jobs,
                    "threads replaying the cases during the fit (the fit is the same at any number) "
                    "[default: one per hardware thread]")
          ->check(CLI::Range(1, 1024));
    if (std::string(sub.name) == "calibrate") {
      c->add_option("--without", o.without, "leave this measured report out of the fit (repeatable)")
          ->type_name("MEASURED");
      c->add_option("-o,--output", o.output, "the fitted machine to write")->type_name("OUT.json")->required();
    } else {
      c->add_flag("--markdown", o.markdown, "a markdown table");
    }
  }
}

// predict, ops and nodes: replays of reports or a bench on the machine.
void declare_replay_commands(CLI::App& app, Options& o) {
  CLI::App* pr = app.add_subcommand(
      "predict", "Replay --mode model reports on the machine, with each run's most sensitive parameter (JSON; MODELLED).");
  pr->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  pr->add_option("--host", o.host_bench,
                 "a bench_kernels -o file of the host to predict (its latency section's floor-op rows): its call "
                 "costs replace the machine's")
      ->type_name("BENCH.h5");
  pr->add_option("--gpu", o.gpu_bench, kGpuHelp)->type_name("BENCH.h5");
  pr->add_option("--rates", o.rates, kRatesHelp)
      ->type_name("BENCH.h5");
  pr->add_option("reports", o.predict_reports, "--mode model reports")->required()->type_name("REPORT.h5");
  pr->add_option("-o,--output", o.output, "the JSON to write")->required()->type_name("OUT.json");
  CLI::App* op = app.add_subcommand(
      "ops", "Op by op: a GPU report's traced layers, measured (events around each op) against their replay (MODELLED).");
  op->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  op->add_option("--gpu", o.gpu_bench, kGpuHelp)->type_name("BENCH.h5");
  op->add_option("--rates", o.rates, kRatesHelp)
      ->type_name("BENCH.h5");
  op->add_option("--run", o.op_runs, "only this run (CASE/RUN; repeatable)")->type_name("CASE/RUN");
  op->add_option("reports", o.predict_reports, "--mode gpu reports with measured traced layers")
      ->required()
      ->type_name("REPORT.h5");
  CLI::App* nd = app.add_subcommand(
      "nodes", "A GPU's bench: its graph-node rows against the same steps replayed on the machine with that GPU's own "
               "costs (MODELLED).");
  nd->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  nd->add_option("--gpu", o.gpu_bench, "a bench_kernels -o file (its latency section's graph-node and floor-op rows)")
      ->type_name("BENCH.h5")
      ->required();
  nd->add_flag("--markdown", o.markdown, "a markdown table");
}

// nccl, kernel and rates: the machine itself.
void declare_machine_commands(CLI::App& app, Options& o) {
  CLI::App* n = app.add_subcommand(
      "nccl", "The modelled NCCL all-to-all of the machine, as nccl-tests' alltoall_perf prints it (MODELLED).");
  n->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  n->add_option("--ranks", o.nccl_ranks, "rank counts (ranks fill nodes in order) [default: 2 4 8]")
      ->check(CLI::Range(2, 1 << 16));
  n->add_option("--bytes", o.nccl_bytes,
                "sizes in bytes per rank, each rounded down to a multiple of the rank count [default: 1 KiB to 1 GiB, "
                "x4 a step]")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  n->add_flag("--markdown", o.markdown, "a markdown table");
  CLI::App* k = app.add_subcommand("kernel", "The modelled rate of a bf16 GEMM or attention on the machine (MODELLED).");
  k->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  k->add_option("--gemm", o.gemms, "a GEMM M,N,K (bf16 in and out; repeatable)")->type_name("M,N,K");
  k->add_option("--attention", o.attentions, "an attention B,H,S,D (bf16, forward; repeatable)")->type_name("B,H,S,D");
  CLI::App* ra = app.add_subcommand(
      "rates", "Write the machine with the rate profiles that bench_kernels files measured in place of its own (no fit).");
  ra->add_option("--machine", o.machine, "the machine [default: h200-nvlink]")->type_name("FILE|NAME");
  ra->add_option("--rates", o.rates, "a bench_kernels -o file; repeatable, one file a profile")
      ->type_name("BENCH.h5")
      ->required();
  ra->add_option("--profile", o.profiles,
                 "only this profile of the files (repeatable) [default: every profile they hold]")
      ->check(CLI::IsMember({"norm_rope", "gemm", "attention"}));
  ra->add_option("-o,--output", o.output, "the machine file to write")->type_name("OUT.json")->required();
}

void declare(CLI::App& app, Options& o) {
  app.require_subcommand(1);
  app.footer(
      "MEASURED is a GPU report (--mode gpu), TRACES a --mode model report of the same cases on the same\n"
      "number of ranks (scripts/model_traces.sh makes those of docs/measured/). The machine: a JSON file or\n"
      "a shipped name (inputs/machines/). docs/model.md says more.");
  declare_measured_commands(app, o);
  declare_replay_commands(app, o);
  declare_machine_commands(app, o);
}

Options parse(int argc, char** argv, std::string* text) {
  Options o;
  CLI::App app{"The machine model's tools (serial: no mpirun).", "ulysses-ipc model"};
  declare(app, o);
  *text = cli::parse(app, std::vector<std::string>(argv, argv + argc));
  if (!text->empty()) return o;
  for (const char* name : {"calibrate", "validate", "loo", "nccl", "kernel", "predict", "ops", "nodes", "rates"})
    if (app.got_subcommand(name)) o.command = name;
  for (const std::string& v : o.pair_args) {
    const size_t eq = v.find('=');
    o.pairs.emplace_back(v.substr(0, eq), v.substr(eq + 1));
  }
  for (const std::string& v : o.ablation_args) {
    const size_t eq = v.find('=');
    const std::string key = eq == std::string::npos ? "" : v.substr(0, eq);
    if (!key.empty()) {
      bool found = false;
      for (const auto& p : o.pairs) found = found || p.first == key;
      if (!found) throw InputError("model " + o.command + ": --ablation " + key + ": not a measured report of any --pair");
    }
    o.ablation[key] = eq == std::string::npos ? v : v.substr(eq + 1);
  }
  // A report named by `option` must be the measured one of some --pair.
  auto require_measured = [&](const char* option, const std::string& mpath) {
    for (const auto& p : o.pairs)
      if (p.first == mpath) return;
    throw InputError("model " + o.command + ": " + option + " " + mpath + ": not a measured report of any --pair");
  };
  // --bench and --group: MEASURED=VALUE, MEASURED one of the pairs' measured reports.
  auto per_report = [&](const std::vector<std::string>& args, const char* option, const char* value,
                        std::map<std::string, std::string>& into) {
    for (const std::string& v : args) {
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        throw InputError("model " + o.command + ": " + option + " '" + v + "' is not MEASURED=" + value);
      const std::string mpath = v.substr(0, eq);
      require_measured(option, mpath);
      into[mpath] = v.substr(eq + 1);
    }
  };
  per_report(o.bench_args, "--bench", "BENCH.h5", o.bench);
  per_report(o.group_args, "--group", "NAME", o.group);
  per_report(o.host_args, "--host", "BENCH.h5", o.host);
  per_report(o.gpu_args, "--gpu", "BENCH.h5", o.gpu);
  for (const auto& w : o.without) require_measured("--without", w);
  for (const auto& w : o.timed_events) require_measured("--timed-events", w);
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
    const auto bench = o.bench.find(mpath);
    const std::vector<model::NormRopePoint> norm_rope =
        bench == o.bench.end() ? std::vector<model::NormRopePoint>{} : read_norm_rope_profile(bench->second);
    const auto host = o.host.find(mpath);
    const std::map<std::string, double> host_costs =
        host == o.host.end() ? std::map<std::string, double>{} : read_host_costs(host->second);
    const auto gpu = o.gpu.find(mpath);
    const model::DeviceCosts device = gpu == o.gpu.end() ? model::DeviceCosts{} : read_device_costs(gpu->second);
    const auto own_ablation = o.ablation.find(mpath), any_ablation = o.ablation.find("");
    const std::string ablation = own_ablation != o.ablation.end()   ? own_ablation->second
                                 : any_ablation != o.ablation.end() ? any_ablation->second
                                                                    : "";
    std::vector<StoredRun> measured = read_report_runs(mpath);
    std::vector<StoredRun> traced = read_report_runs(tpath);
    if (!measured.empty() && measured.front().mode != "gpu")
      throw InputError(mpath + ": mode '" + measured.front().mode + "': a measured report must come from --mode gpu");
    if (!traced.empty() && traced.front().mode != "model")
      throw InputError(tpath + ": mode '" + traced.front().mode + "': the traces must come from --mode model");
    std::map<std::string, const StoredRun*> by_name;
    for (const StoredRun& t : traced) by_name[t.case_name + "/" + t.run_name] = &t;
    for (const StoredRun& m : measured) {
      auto it = ablation.empty() ? by_name.end() : by_name.find(m.case_name + "/" + m.run_name + "+" + ablation);
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
      // A layer timed as a whole holds none of the stage timing's records: its trace must be
      // made the same way (a staged trace of a lean run models records it never had).
      if (t.stage_timing != m.stage_timing)
        throw InputError(m.case_name + "/" + m.run_name + ": stage timing " + m.stage_timing + " in " + mpath +
                         " but " + t.stage_timing + " in " + tpath + " (trace it with --stage-timing " +
                         m.stage_timing + ")");
      if (t.traces.empty() || t.stage_terms.size() != t.traces.size())
        throw InputError(tpath + ": " + t.case_name + "/" + t.run_name + " has no traced layer with stage terms");
      Joined j;
      j.measured_report = mpath;
      j.case_name = m.case_name;
      j.run_name = m.run_name;
      j.replay.label = base_name(mpath) + " " + m.case_name + " " + m.run_name;
      j.replay.traces = t.traces;
      if (std::count(o.timed_events.begin(), o.timed_events.end(), mpath))  // recorded before ordering events
        for (model::RankTrace& rt : j.replay.traces)
          for (model::Op& op : rt.ops)
            if (op.kind == model::OpKind::kEventRecord) op.dims[0] = 0;
      j.replay.terms = t.stage_terms;
      j.replay.measured = m.median_ms;
      j.replay.norm_rope = norm_rope;
      j.replay.host_costs = host_costs;
      j.replay.device = device;
      j.replay.issue = m.graph_replay ? model::Issue::kGraphReplay : model::Issue::kOpByOp;
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

// The aims of issue #19 (docs/model.md): per run, the layer within 10%, every stage that
// takes at least 10% of its layer within 20%, the scatter within 15%.
constexpr double kLayerAim = 0.10, kStageAim = 0.20, kScatterAim = 0.15, kStageShare = 0.10;
const char* const kStageNames[kNumStages] = {"projection", "norm_rope", "scatter", "attention",
                                             "gather",     "out_proj",  "layer"};

double rel_err(const Row& r, int s) { return std::fabs(r.modeled[s] / r.measured[s] - 1); }

// The stages of a run judged against kStageAim: those that take >= 10% of its layer.
bool big_stage(const Row& r, int s) {
  return s != kStageLayer && r.measured[s] > 0 && r.measured[s] >= kStageShare * r.measured[kStageLayer];
}

// Per report and stage: how many runs within the stage aim, and the worst error.
void print_stage_table(const std::vector<Row>& rows, bool markdown, FILE* out) {
  std::vector<std::string> reports;
  for (const Row& r : rows)
    if (std::find(reports.begin(), reports.end(), r.report) == reports.end()) reports.push_back(r.report);
  if (markdown)
    std::fprintf(out, "\nPer report and stage: runs within 20%% of n (worst error); * marks a stage taking >= 10%% of "
                      "its layer in some run\n\n| report |");
  else
    std::fprintf(out, "\n# per report and stage: runs within 20%% of n (worst error); * = >= 10%% of its layer in some "
                      "run\n%-32s", "report");
  for (int s = 0; s < kNumStages; ++s) std::fprintf(out, markdown ? " %s |" : " %18s", kStageNames[s]);
  std::fprintf(out, "\n");
  if (markdown) {
    std::fprintf(out, "|---|");
    for (int s = 0; s < kNumStages; ++s) std::fprintf(out, "---|");
    std::fprintf(out, "\n");
  }
  for (const std::string& rep : reports) {
    std::fprintf(out, markdown ? "| %s |" : "%-32s", rep.c_str());
    for (int s = 0; s < kNumStages; ++s) {
      int n = 0, ok = 0;
      bool big = false;
      double worst = 0;
      for (const Row& r : rows) {
        if (r.report != rep || !(r.measured[s] > 0) || !std::isfinite(r.modeled[s])) continue;
        const double e = rel_err(r, s);
        ++n;
        ok += e <= kStageAim;
        big = big || big_stage(r, s) || s == kStageLayer;
        if (e > std::fabs(worst)) worst = r.modeled[s] / r.measured[s] - 1;
      }
      char b[64];
      std::snprintf(b, sizeof(b), "%d/%d (%+.0f%%)%s", ok, n, 100 * worst, big ? "*" : "");
      std::fprintf(out, markdown ? " %s |" : " %18s", n ? b : "-");
    }
    std::fprintf(out, "\n");
  }
}

// The one line that says whether the model meets its aims on these runs.
void print_summary(const std::vector<Row>& rows, bool markdown, FILE* out) {
  int layer_ok = 0, stage_ok = 0, scatter_ok = 0;
  size_t staged = 0;  // runs whose stages were timed (not --stage-timing off): the stage and scatter counts' n
  double worst_layer = 0, worst_scatter = 0, worst_stage = 0;
  std::string worst_stage_name = "-";
  for (const Row& r : rows) {
    const double el = rel_err(r, kStageLayer), es = rel_err(r, kStageScatter);
    layer_ok += el <= kLayerAim;
    worst_layer = std::max(worst_layer, el);
    if (!std::isfinite(r.measured[kStageScatter])) continue;
    ++staged;
    scatter_ok += es <= kScatterAim;
    worst_scatter = std::max(worst_scatter, es);
    bool all = true;
    for (int s = 0; s < kNumStages; ++s) {
      if (!big_stage(r, s)) continue;
      const double e = rel_err(r, s);
      all = all && e <= kStageAim;
      if (e > worst_stage) {
        worst_stage = e;
        worst_stage_name = kStageNames[s];
      }
    }
    stage_ok += all;
  }
  const size_t n = rows.size();
  std::fprintf(out,
               "%ssummary: %d of %zu runs with the layer within 10%% (aim 95%%; worst %.1f%%), %d of %zu with every "
               "stage of >= 10%% of its layer within 20%% (worst %.1f%%, %s), %d of %zu with the scatter within 15%% "
               "(aim 90%%; worst %.1f%%)\n",
               markdown ? "\n" : "", layer_ok, n, 100 * worst_layer, stage_ok, staged, 100 * worst_stage,
               worst_stage_name.c_str(), scatter_ok, staged, 100 * worst_scatter);
}

void print_rows(const std::vector<Row>& rows, bool markdown, FILE* out) {
  const char* const* heads = kStageNames;
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
  print_stage_table(rows, markdown, out);
  print_summary(rows, markdown, out);
}

// The modelled all-to-all of `ranks` GPUs of `m` (ranks fill nodes in order): one call
// per rank of `bytes` per rank (bytes / ranks to each peer), timed from the last arrival
// to its end, as nccl-tests' alltoall_perf times a call; busbw = algbw (n - 1) / n.
double modeled_alltoall_us(const model::Machine& m, int ranks, double bytes) {
  std::vector<model::RankTrace> traces(ranks);
  std::vector<int> group(ranks);
  for (int r = 0; r < ranks; ++r) group[r] = r;
  for (int r = 0; r < ranks; ++r) {
    model::RankTrace& t = traces[r];
    t.rank = r;
    t.world = ranks;
    t.streams.resize(1);
    t.groups.push_back(group);
    model::Op op;
    op.kind = model::OpKind::kCollective;
    op.collective = model::CollectiveKind::kAllToAll;
    op.stream = 0;
    op.group = 0;
    op.sequence = 0;
    op.bytes = bytes / ranks;
    t.ops.push_back(op);
  }
  const model::Timeline tl = model::simulate(traces, m);
  double begin = 0, end = 0;
  for (const auto& r : tl.ranks) {
    begin = std::max(begin, r[0].start_ms);
    end = std::max(end, r[0].end_ms);
  }
  return (end - begin) * 1e3;
}

int print_modeled_alltoall(const model::Machine& m, std::vector<int> ranks, std::vector<int64_t> sizes,
                           bool markdown) {
  if (ranks.empty()) ranks = {2, 4, 8};
  if (sizes.empty())
    for (int64_t b = 1024; b <= (int64_t{1} << 30); b *= 4) sizes.push_back(b);
  const int gpus = m.gpus_per_node * m.nodes;
  for (int n : ranks)
    if (n > gpus)
      throw InputError("model nccl: --ranks " + std::to_string(n) + ": machine '" + m.name + "' has " +
                       std::to_string(gpus) + " GPUs");
  for (int n : ranks)
    for (int64_t b : sizes)
      if (b < n)
        throw InputError("model nccl: --bytes " + std::to_string(b) + " is less than a byte to each of " +
                         std::to_string(n) + " ranks");
  std::printf("%sMODELLED NCCL all-to-all on %s (%d x %d GPUs): size = bytes per rank, busbw = algbw (n-1)/n\n",
              markdown ? "" : "# ", m.name.c_str(), m.nodes, m.gpus_per_node);
  if (markdown) std::printf("\n| ranks | size (B) | time (us) | algbw (GB/s) | busbw (GB/s) |\n|---|---|---|---|---|\n");
  for (int n : ranks)
    for (int64_t b : sizes) {
      const double bytes = static_cast<double>(b / n * n);
      const double us = modeled_alltoall_us(m, n, bytes);
      const double algbw = bytes / us * 1e-3;
      std::printf(markdown ? "| %d | %.0f | %.2f | %.2f | %.2f |\n" : "%6d %12.0f %12.2f %10.2f %10.2f\n", n, bytes, us,
                  algbw, algbw * (n - 1) / n);
    }
  return 0;
}

std::vector<int64_t> shape_of(const std::string& v, size_t n, const std::string& what) {
  std::vector<int64_t> out;
  std::string cur;
  for (char c : v + ",") {
    if (c != ',') {
      cur += c;
      continue;
    }
    char* end = nullptr;
    const long long x = std::strtoll(cur.c_str(), &end, 10);
    if (cur.empty() || *end != '\0' || x <= 0) throw InputError("model kernel: " + what + " '" + v + "': not positive integers");
    out.push_back(x);
    cur.clear();
  }
  if (out.size() != n) throw InputError("model kernel: " + what + " '" + v + "': needs " + std::to_string(n) + " numbers");
  return out;
}

// The standalone time of one kernel on an idle GPU of `m` (its work plus the kernel's
// fixed cost), as a benchmark timing it back to back would see it.
int print_modeled_kernels(const model::Machine& m, const std::vector<std::string>& gemms,
                          const std::vector<std::string>& attentions) {
  std::printf("# MODELLED kernel rates on %s (bf16; the kernel's fixed cost %.2f us included)\n", m.name.c_str(),
              m.p("kernel_latency_us"));
  for (const std::string& g : gemms) {
    const std::vector<int64_t> d = shape_of(g, 3, "--gemm");
    model::Op op;
    op.kind = model::OpKind::kKernel;
    op.kernel = model::KernelKind::kGemm;
    op.flops = 2.0 * d[0] * d[1] * d[2];
    op.dims[0] = d[0];
    op.dims[1] = d[1];
    op.dims[2] = d[2];
    op.dims[3] = 2;
    const double ms = model::standalone_work_ms(op, m, false) + m.p("kernel_latency_us") * 1e-3;
    std::printf("gemm      M%lld N%lld K%lld: %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(d[0]),
                static_cast<long long>(d[1]), static_cast<long long>(d[2]), ms, op.flops / ms * 1e-9);
  }
  for (const std::string& a : attentions) {
    const std::vector<int64_t> d = shape_of(a, 4, "--attention");
    model::Op op;
    op.kind = model::OpKind::kKernel;
    op.kernel = model::KernelKind::kAttention;
    op.flops = 4.0 * d[0] * d[1] * d[2] * d[2] * d[3];
    op.dims[0] = d[0];  // B S H D, as the trace records attention
    op.dims[1] = d[2];
    op.dims[2] = d[1];
    op.dims[3] = d[3];
    const double ms = model::standalone_work_ms(op, m, false) + m.p("kernel_latency_us") * 1e-3;
    std::printf("attention B%lld H%lld S%lld D%lld: %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(d[0]),
                static_cast<long long>(d[1]), static_cast<long long>(d[2]), static_cast<long long>(d[3]), ms,
                op.flops / ms * 1e-9);
  }
  return 0;
}

// bench_kernels' graph-node sequences (lib/report/node_sequences.hpp) as `bench` measured them and
// as the machine replays them with that GPU's own costs: the simulator's rules for records, hops
// and memory operations against the composites the bench timed, one sequence at a time.
int print_node_rows(const model::Machine& m, const std::string& bench, bool markdown) {
  const std::vector<NodeRowReplay> rows = replay_node_rows(m, bench);
  std::printf("%sgraph-node rows of %s against their replay on %s with its GPU's own costs (MODELLED): us per "
              "kernel\n",
              markdown ? "" : "# ", bench.c_str(), m.name.c_str());
  if (markdown)
    std::printf("| sequence | op by op, measured | modelled | error | graph, measured | modelled | error |\n"
                "|---|---|---|---|---|---|---|\n");
  auto pct = [](double modelled, double measured) { return 100.0 * (modelled - measured) / measured; };
  for (const NodeRowReplay& n : rows) {
    const double eo = pct(n.modelled.op_by_op, n.measured.op_by_op), eg = pct(n.modelled.graph, n.measured.graph);
    if (markdown)
      std::printf("| %s | %.2f | %.2f | %+.0f%% | %.2f | %.2f | %+.0f%% |\n", n.what.c_str(), n.measured.op_by_op,
                  n.modelled.op_by_op, eo, n.measured.graph, n.modelled.graph, eg);
    else
      std::printf("%-96s op by op %6.2f / %6.2f (%+5.0f%%)  graph %6.2f / %6.2f (%+5.0f%%)\n", n.what.c_str(),
                  n.measured.op_by_op, n.modelled.op_by_op, eo, n.measured.graph, n.modelled.graph, eg);
  }
  return 0;
}

// `model ops`: every op of each traced layer with its measured duration (the events the
// GPU run put around it) beside its replay's, and the host time of the call that issued it
// (reports written since the traces carried it; nan before); device ops and the host's memory
// calls (host_call, stream -1: no device times), host syncs left out. In a measured traced layer
// each op sits between two extra events, so the measured layer is longer than a timed
// one; the durations of work-bound ops are what to compare.
int print_ops(const std::vector<std::string>& reports, const std::vector<std::string>& only, const model::Machine& m) {
  std::printf("# op by op: measured (events around each op, GPU) against MODELLED on %s; us\n", m.name.c_str());
  std::printf("# run rank op stream kind bytes dims measured_start measured_us modelled_start modelled_us host_us\n");
  for (const std::string& path : reports)
    for (const StoredRun& r : read_report_runs(path)) {
      const std::string name = r.case_name + "/" + r.run_name;
      if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
      if (r.traces.empty()) continue;
      const model::Timeline tl = model::simulate(r.traces, m);
      for (size_t rk = 0; rk < r.traces.size(); ++rk)
        for (size_t i = 0; i < r.traces[rk].ops.size(); ++i) {
          const model::Op& op = r.traces[rk].ops[i];
          if (op.kind == model::OpKind::kHostSync) continue;
          std::string kind = model::op_kind_name(op.kind);
          if (op.kind == model::OpKind::kKernel) kind += std::string("/") + model::kernel_kind_name(op.kernel);
          if (op.kind == model::OpKind::kHostCall)
            kind += std::string("/") + model::host_call_name(static_cast<model::HostCall>(op.dims[0]));
          const model::OpTime& t = tl.ranks[rk][i];
          const auto dim = [&](int d) { return static_cast<long long>(op.dims[d]); };
          std::printf("%s %zu %zu %d %s %.0f %lldx%lldx%lldx%lld %.1f %.1f %.1f %.1f %.1f\n", name.c_str(), rk, i,
                      op.stream, kind.c_str(), op.bytes, dim(0), dim(1), dim(2), dim(3), 1e3 * op.measured_start_ms,
                      1e3 * (op.measured_end_ms - op.measured_start_ms), 1e3 * t.start_ms,
                      1e3 * (t.end_ms - t.start_ms), op.measured_host_us);
        }
    }
  return 0;
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char b[16];
  std::strftime(b, sizeof(b), "%Y-%m-%d", std::gmtime(&now));
  return b;
}

// The machine the command models: the named file, with the profiles of --rates, the host
// costs of predict's --host and the device costs of --gpu in place of its own.
model::Machine base_machine(const Options& o) {
  model::Machine base = model::load_machine(model::machine_path(o.machine));
  if (!o.rates.empty()) {
    BenchRates rates = read_bench_rates(o.rates);
    const auto wanted = [&](const char* profile, bool held) {
      const bool asked = std::find(o.profiles.begin(), o.profiles.end(), profile) != o.profiles.end();
      if (asked && !held)
        throw InputError(std::string("model rates: --profile ") + profile + ": no --rates file holds that profile");
      return held && (o.profiles.empty() || asked);
    };
    if (wanted("norm_rope", !rates.norm_rope.empty())) base.norm_rope = std::move(rates.norm_rope);
    if (wanted("gemm", !rates.gemm.empty())) base.gemm = std::move(rates.gemm);
    if (wanted("attention", !rates.attention.empty())) base.attention = std::move(rates.attention);
  }
  if (!o.host_bench.empty())  // predict on the host that bench measured
    for (const auto& [name, us] : read_host_costs(o.host_bench)) {
      model::Param& p = base.params.at(name);
      p.value = us;
      p.source = std::string(kHostCostsSource) + "bench_kernels' floor-op rows (" + o.host_bench + ")";
    }
  if (!o.gpu_bench.empty()) base.device = read_device_costs(o.gpu_bench);  // predict on the GPU it measured
  return base;
}

// A machine file written whole or not at all: into a temporary beside it, then renamed into place.
void save_machine(const model::Machine& m, const std::string& path) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(tmp);
  out << model::machine_to_json(m);
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw RuntimeError(path + ": cannot write the machine file: " + why);
  }
}

// `model rates`: the machine as base_machine made it (its profiles from --rates), written.
int write_machine(const model::Machine& m, const std::string& path) {
  save_machine(m, path);
  std::printf("wrote %s: %s with %zu norm+RoPE, %zu GEMM and %zu attention profile points\n", path.c_str(),
              m.name.c_str(), m.norm_rope.size(), m.gemm.size(), m.attention.size());
  return 0;
}

// `model calibrate`: fit the machine's free parameters to every pair but --without's; write it.
int calibrate_command(const Options& o, const std::vector<Joined>& joined, const model::Machine& base, int jobs) {
  std::set<std::string> skip(o.without.begin(), o.without.end());
  std::string from;
  for (const auto& p : o.pairs)
    if (!skip.count(p.first)) from += (from.empty() ? "" : ", ") + base_name(p.first);
  model::FitResult fit =
      model::calibrate(replays(joined, skip), base, kNumStages, "ulysses-ipc model calibrate on " + today() + " to " + from, jobs);
  save_machine(fit.machine, o.output);
  size_t free_params = 0;
  for (const auto& [name, p] : base.params) free_params += p.free;
  std::printf("calibrated %s: %zu free parameter(s), rms log error %.4f after %d replays; wrote %s\n",
              base.name.c_str(), free_params, std::sqrt(fit.objective), fit.evaluations, o.output.c_str());
  for (const auto& [name, p] : fit.machine.params)
    if (p.free) std::printf("  %-26s %10.4g  (in [%g, %g])\n", name.c_str(), p.value, p.lo, p.hi);
  return 0;
}

// The first joined run of a measured report: where join_pairs put the costs of its --host or
// --gpu bench (nullptr when no run of it joined: nothing replayed with them).
const Joined* first_run_of(const std::vector<Joined>& joined, const std::string& report) {
  const auto j = std::find_if(joined.begin(), joined.end(), [&](const Joined& x) { return x.measured_report == report; });
  return j == joined.end() ? nullptr : &*j;
}

// validate's header lines: which reports replay with their own host's call costs, and what.
void print_own_hosts(const Options& o, const std::vector<Joined>& joined) {
  for (const auto& [report, bench] : o.host) {
    const Joined* j = first_run_of(joined, report);
    if (!j) continue;
    std::string costs;
    for (const auto& [name, us] : j->replay.host_costs) {
      char b[64];
      std::snprintf(b, sizeof(b), " %s %.2f", name.c_str(), us);
      costs += b;
    }
    std::printf("%s%s: its host's call costs from %s:%s\n", o.markdown ? "" : "# ", base_name(report).c_str(),
                bench.c_str(), costs.c_str());
  }
}

// validate's header lines: which reports replay with their own GPU's device costs, and what.
void print_own_gpus(const Options& o, const std::vector<Joined>& joined) {
  auto both = [](const model::IssueCost& c) {
    char b[48];
    std::snprintf(b, sizeof(b), "%.2f/%.2f", c.op_by_op, c.graph);
    return std::string(b);
  };
  for (const auto& [report, bench] : o.gpu) {
    const Joined* j = first_run_of(joined, report);
    if (!j) continue;
    const model::DeviceCosts& d = j->replay.device;
    std::printf("%s%s: its GPU's device costs from %s (us, op by op/graph): empty kernel %s, record %s, memop %s, "
                "nccl at one rank %s; least in all: gemm %s, norm_rope %s, attention %s, convert %s, copy %s\n",
                o.markdown ? "" : "# ", base_name(report).c_str(), bench.c_str(), both(d.empty_kernel).c_str(),
                both(d.record_after_work).c_str(), both(d.memop).c_str(), both(d.nccl_one_rank).c_str(),
                both(d.gemm).c_str(), both(d.norm_rope).c_str(), both(d.attention).c_str(), both(d.convert).c_str(),
                both(d.copy).c_str());
  }
}

// `model validate`: every joined run replayed on the machine as it is, stage by stage.
int validate_command(const Options& o, const std::vector<Joined>& joined, const model::Machine& base) {
  std::vector<Row> rows;
  for (const Joined& j : joined)
    rows.push_back({base_name(j.measured_report), j.case_name, j.run_name, j.replay.measured,
                    model::modeled_stages(j.replay, base, kNumStages)});
  std::printf("%smodelled on %s against measured medians (critical path), stage by stage\n",
              o.markdown ? "" : "# ", base.name.c_str());
  print_own_hosts(o, joined);
  print_own_gpus(o, joined);
  print_rows(rows, o.markdown, stdout);
  return 0;
}

// `model loo`: each measured report (with the others of its --group) predicted by a machine
// fitted to the rest.
int loo_command(const Options& o, const std::vector<Joined>& joined, const model::Machine& base, int jobs) {
  std::vector<std::string> groups;  // in the order of the pairs
  auto group_of = [&](const std::string& report) {
    const auto g = o.group.find(report);
    return g == o.group.end() ? report : "group " + g->second;
  };
  for (const auto& p : o.pairs)
    if (std::find(groups.begin(), groups.end(), group_of(p.first)) == groups.end()) groups.push_back(group_of(p.first));
  if (groups.size() < 2) throw InputError("model loo: needs at least two measured reports (or groups)");
  std::vector<Row> rows;
  for (const std::string& g : groups) {
    std::set<std::string> left_out;
    std::string names;
    for (const auto& p : o.pairs)
      if (group_of(p.first) == g && left_out.insert(p.first).second) names += (names.empty() ? "" : " + ") + base_name(p.first);
    model::FitResult fit = model::calibrate(replays(joined, left_out), base, kNumStages, "all but " + names, jobs);
    std::fprintf(stderr, "loo: without %s: rms log error %.4f on the others (%d replays)\n", names.c_str(),
                 std::sqrt(fit.objective), fit.evaluations);
    for (const Joined& j : joined)
      if (left_out.count(j.measured_report))
        rows.push_back({base_name(j.measured_report), j.case_name, j.run_name, j.replay.measured,
                        model::modeled_stages(j.replay, fit.machine, kNumStages)});
  }
  std::printf("%sleave-one-out on %s: each report predicted by a machine fitted to the others only\n",
              o.markdown ? "" : "# ", base.name.c_str());
  print_rows(rows, o.markdown, stdout);
  return 0;
}

}  // namespace

int model_command(int argc, char** argv) {
  std::string text;
  const Options o = parse(argc, argv, &text);
  if (!text.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  const model::Machine base = base_machine(o);
  if (o.command == "nccl") return print_modeled_alltoall(base, o.nccl_ranks, o.nccl_bytes, o.markdown);
  if (o.command == "kernel") return print_modeled_kernels(base, o.gemms, o.attentions);
  if (o.command == "predict") return model_predict(o.predict_reports, base, o.output);
  if (o.command == "ops") return print_ops(o.predict_reports, o.op_runs, base);
  if (o.command == "nodes") return print_node_rows(base, o.gpu_bench, o.markdown);
  if (o.command == "rates") return write_machine(base, o.output);
  const std::vector<Joined> joined = join_pairs(o);
  const int jobs = o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.command == "calibrate") return calibrate_command(o, joined, base, jobs);
  if (o.command == "validate") return validate_command(o, joined, base);
  return loo_command(o, joined, base, jobs);
}

}  // namespace uipc
