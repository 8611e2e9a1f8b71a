// The run driver, a table of contents: plan the cases, set up the backend and the nodes,
// check memory, gather provenance, run each case (lib/run/case_runner.cpp), and rank 0
// writes the report.
#include "lib/run/run.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "base/error.hpp"
#include "git_rev.h"
#include "comm/bootstrap.hpp"
#include "comm/nodes.hpp"
#include "lib/run/case_runner.hpp"
#include "lib/run/cpu_estimate.hpp"
#include "lib/run/layout.hpp"
#include "lib/run/memory_estimate.hpp"
#include "lib/deck/deck_wire.hpp"
#include "lib/report/report.hpp"
#include "lib/run/traced_layer.hpp"
#include "model/machine.hpp"

namespace uipc {
namespace {

std::string iso_date_utc() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

std::string mpi_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v, static_cast<size_t>(len));
  auto nl = s.find_first_of("\r\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// --dump stores whole tensors in the report: small cases only.
constexpr int64_t kMaxDumpElements = 16 << 20;

// The cases of the deck this run executes, and a note for each it skips.
struct Plan {
  Deck deck;
  std::vector<Case> todo;
  std::vector<std::string> skipped;
};

// The deck and which of its cases fit this world, alike on every rank. An error here is
// agreed by all ranks and reported once.
Plan plan_cases(const RunOptions& opt, int world) {
  // Rank 0 alone parses the (possibly hostile) file, in a child process bounded in time
  // and memory; the others get plain values, or rank 0's error, bounded in time too.
  // Itself collective (every rank returns the same deck or throws the same error), so it
  // stays outside collective_phase: a rank 0 that died must not leave the others in an
  // unbounded MPI_Allreduce.
  Plan plan;
  Deck& deck = plan.deck;
  deck = read_deck_on_root(opt.deck_path, MPI_COMM_WORLD,
                           opt.watchdog_s > 0 ? std::max(10.0, 2 * opt.watchdog_s) : kDeckReadTimeoutS);
  std::vector<Case>& todo = plan.todo;
  std::vector<std::string>& skipped = plan.skipped;
  collective_phase(MPI_COMM_WORLD, [&] {
    for (const auto& name : opt.cases) {
      bool found = false;
      for (const auto& c : deck.cases) found = found || c.name == name;
      if (!found) throw InputError("--case: no case named '" + name + "' in " + opt.deck_path);
    }
    for (const auto& c : deck.cases) {
      if (!opt.cases.empty() && std::find(opt.cases.begin(), opt.cases.end(), c.name) == opt.cases.end()) continue;
      try {
        validate_case_for_world(c, world);
        todo.push_back(c);
      } catch (const InputError& e) {
        // A named case, or the only one, must fit; others that do not are skipped.
        if (!opt.cases.empty() || deck.cases.size() == 1) throw;
        skipped.push_back(c.name + ": " + e.what());
      }
    }
    for (const auto& c : todo)
      if (opt.dump && c.batch * c.seq_len * c.width() > kMaxDumpElements)
        throw InputError("--dump: case '" + c.name + "' has " + std::to_string(c.batch * c.seq_len * c.width()) +
                         " input elements; --dump is for cases up to " + std::to_string(kMaxDumpElements));
    if (todo.empty())
      throw InputError(opt.deck_path + ": no case of the deck can run on " + std::to_string(world) + " rank(s): " +
                       (skipped.empty() ? std::string("none selected") : skipped.front()));
  });
  return plan;
}

// The machine each run's traced layer is replayed under (docs/model.md). The shipped
// default may be absent from an installed copy: then nothing is modelled, outside
// --mode model, which needs it.
struct MachineChoice {
  model::Machine machine;
  bool have_machine = false;
  std::string machine_note;  // why there is none
};

MachineChoice load_run_machine(const RunOptions& opt, bool model_mode) {
  MachineChoice mc;
  model::Machine& machine = mc.machine;
  bool& have_machine = mc.have_machine;
  std::string& machine_note = mc.machine_note;
  collective_phase(MPI_COMM_WORLD, [&] {
    const std::string path = model::machine_path(opt.machine);
    if (opt.machine.empty() && !model_mode && !std::ifstream(path)) {
      machine_note = "no machine file at " + path + " (--machine)";
      return;
    }
    try {
      machine = model::load_machine(path);
    } catch (const InputError& e) {
      throw InputError(std::string("--machine: ") + e.what());
    }
    have_machine = true;
  });
  return mc;
}

// Before anything is allocated: does every case fit? On GPUs each rank has its own
// device memory; in simulation every rank of a node shares the node's memory, so the
// node's ranks' needs add up. (The estimate is per case: cases run one after another.)
void check_memory(const std::vector<Case>& todo, const Backend& be, Mode mode, int world, int rank) {
  MPI_Comm node_raw;
  UIPC_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  MpiComm node(node_raw);
  // --mode model touches no data (its memory is mapped, never written): nothing to check.
  for (const auto& c : mode == Mode::kModel ? std::vector<Case>{} : todo) {
    const double mine = static_cast<double>(estimate_case_bytes_per_rank(c, world, rank == 0, mode == Mode::kSim));
    double need = mine;
    if (mode == Mode::kSim) UIPC_MPI_CHECK(MPI_Allreduce(&mine, &need, 1, MPI_DOUBLE, MPI_SUM, node.get()));
    collective_phase(MPI_COMM_WORLD, [&] {
      const double have = static_cast<double>(be.device->free_memory());
      if (need > 0.9 * have) {
        char buf[320];
        std::snprintf(buf, sizeof(buf), "case '%s' needs about %.2f GiB of %s, which has %.2f GiB free",
                      c.name.c_str(), need / (1 << 30),
                      mode == Mode::kGpu ? ("device memory on rank " + std::to_string(rank)).c_str()
                                       : "host memory on this node (simulation: all its ranks together)",
                      have / (1 << 30));
        throw InputError(buf + std::string(": fewer tokens, more ranks, or --case to run the others; or ") +
                         sim_alternatives(c));
      }
    });
  }
}

// Simulation: every case's CPU time too (lib/run/cpu_estimate); a case too long for the
// CPU is refused before anything runs. Elsewhere no estimate (empty ones).
std::vector<CpuEstimate> check_cpu_time(const std::vector<Case>& todo, const Backend& be, Mode mode,
                                        const RunOptions& opt, int world, const Printer& out) {
  if (mode != Mode::kSim) return std::vector<CpuEstimate>(todo.size());
  MPI_Comm node_raw;
  UIPC_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  MpiComm node(node_raw);
  int node_ranks = 1;
  UIPC_MPI_CHECK(MPI_Comm_size(node.get(), &node_ranks));
  return check_sim_cpu_time(todo, world, node_ranks, opt.sim_time_limit_s,
                            opt.watchdog_s > 0 ? opt.watchdog_s : be.device->watchdog_seconds(), *be.device,
                            *be.kernels, [&out](const std::string& line) { out.line("%s", line.c_str()); });
}

// What the report says of where and how it was made.
Provenance gather_provenance(const RunOptions& opt, const Backend& be, const NodeLayout& nodes, int world) {
  Provenance prov;
  prov.version = ULYSSES_GIT_REV;
  prov.date = iso_date_utc();
  prov.command_line = opt.command_line;
  prov.mode = mode_name(be.mode);
  prov.deck_path = opt.deck_path;
  prov.world_size = world;
  prov.hosts = allgather_strings(MPI_COMM_WORLD, host_name(), be.device->watchdog_seconds(), "the provenance");
  prov.host_cpus = allgather_strings(MPI_COMM_WORLD, host_cpu(), be.device->watchdog_seconds(), "the provenance");
  prov.devices =
      allgather_strings(MPI_COMM_WORLD, be.device->name(), be.device->watchdog_seconds(), "the provenance");
  prov.node_of_rank.assign(nodes.node_of.begin(), nodes.node_of.end());
  prov.node_layout = nodes.describe();
  prov.versions["ulysses-ipc"] = ULYSSES_VERSION;
  prov.versions["mpi"] = mpi_version();
  if (!opt.kokkos_version.empty()) prov.versions["kokkos"] = opt.kokkos_version;
  if (!be.versions_cuda.empty()) prov.versions["cuda"] = be.versions_cuda;
  if (!be.versions_nccl.empty()) prov.versions["nccl"] = be.versions_nccl;
  return prov;
}

}  // namespace

int run_deck(const RunOptions& opt) {
  int world = 1, rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  UIPC_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  Printer out(opt.quiet);
  const auto t_start = std::chrono::steady_clock::now();

  const Plan plan = plan_cases(opt, world);
  for (const auto& s : plan.skipped) out.line("skipped %s\n", s.c_str());
  Backend be;
  collective_phase(MPI_COMM_WORLD, [&] { be = make_backend(opt.backend, MPI_COMM_WORLD); });
  const Mode mode = be.mode;
  // The one node layout of the run: eligibility and the report read it.
  NodeLayout nodes;
  collective_phase(MPI_COMM_WORLD,
                   [&] { nodes = discover_nodes(MPI_COMM_WORLD, opt.ranks_per_node, be.device->watchdog_seconds()); });
  const MachineChoice mc = load_run_machine(opt, mode == Mode::kModel);
  check_memory(plan.todo, be, mode, world, rank);
  const std::vector<CpuEstimate> cpu_est = check_cpu_time(plan.todo, be, mode, opt, world, out);
  const Provenance prov = gather_provenance(opt, be, nodes, world);
  out.line("ulysses-ipc %s: %d rank(s), mode %s, deck %s (%zu case(s) to run)\n", ULYSSES_GIT_REV, world,
           mode_name(be.mode), opt.deck_path.c_str(), plan.todo.size());
  if (!nodes.one_node() || nodes.declared_ranks_per_node > 0) out.line("nodes: %s\n", nodes.describe().c_str());

  std::vector<CaseResult> results;
  bool all_pass = true;
  std::unique_ptr<Stream> compute = be.device->create_stream(StreamPriority::kNormal);
  const DeckRun dr{opt, be, mode, nodes, mc.have_machine ? &mc.machine : nullptr, mc.machine_note, *compute, out,
                   world, rank};
  for (size_t ci = 0; ci < plan.todo.size(); ++ci) {
    const auto t_case = std::chrono::steady_clock::now();
    results.push_back(run_case(dr, plan.todo[ci], cpu_est[ci], &all_pass));
    const double case_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_case).count();
    const double per_case = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() / (ci + 1);
    out.line("[%zu/%zu] %s done in %.1f s, about %.0f s left\n", ci + 1, plan.todo.size(), plan.todo[ci].name.c_str(),
             case_s, per_case * static_cast<double>(plan.todo.size() - ci - 1));
  }

  if (rank == 0) write_report(opt.report_path, prov, results);
  UIPC_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (mode == Mode::kModel) {
    out.line("report: %s; modeled only, parity not computed (--mode model)\n", opt.report_path.c_str());
    return kExitModelOnly;
  }
  out.line("report: %s; parity %s\n", opt.report_path.c_str(), all_pass ? "PASS" : "FAIL");
  return all_pass ? kExitOk : kExitParityFailed;
}

}  // namespace uipc
