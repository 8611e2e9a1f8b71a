// The run driver: every rank reads the deck, runs its share of every case for each
// transport and schedule, checks parity against the dense reference, and rank 0
// writes the report.
#include "lib/run.hpp"

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "api/internal.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "git_rev.h"
#include "comm/bootstrap.hpp"
#include "comm/nodes.hpp"
#include "lib/cpu_estimate.hpp"
#include "lib/layout.hpp"
#include "lib/deck_wire.hpp"
#include "lib/pipeline.hpp"
#include "lib/report.hpp"
#include "lib/traced_layer.hpp"
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

// The reference rows of every rank's shard, sent from rank 0 (which computed the dense
// layer) to their owners. Returns this rank's (B, S_local, C) reference values (shards
// may differ by a token: a scatter of variable counts).
std::vector<float> distribute_reference(const std::vector<float>& full, const Case& c, const Layout& l,
                                        double timeout_s) {
  const int64_t C = c.width(), S = c.seq_len;
  const size_t shard = static_cast<size_t>(l.batch * l.seq_local * C);
  std::vector<float> sendbuf, mine(shard);
  std::vector<int> counts(static_cast<size_t>(l.world)), displs(static_cast<size_t>(l.world));
  int64_t at = 0;
  for (int r = 0; r < l.world; ++r) {
    const Layout lr = make_layout(c, l.world, r);
    const int64_t n = l.batch * lr.seq_local * C;
    UIPC_CHECK(at + n <= static_cast<int64_t>(INT32_MAX), "reference too large for MPI_Scatterv");
    counts[static_cast<size_t>(r)] = static_cast<int>(n);
    displs[static_cast<size_t>(r)] = static_cast<int>(at);
    if (l.rank == 0) {
      sendbuf.resize(static_cast<size_t>(at + n));
      for (int64_t b = 0; b < l.batch; ++b)
        std::copy_n(full.begin() + (b * S + lr.seq_offset) * C, lr.seq_local * C,
                    sendbuf.begin() + at + b * lr.seq_local * C);
    }
    at += n;
  }
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iscatterv(sendbuf.data(), counts.data(), displs.data(), MPI_FLOAT, mine.data(),
                               static_cast<int>(shard), MPI_FLOAT, 0, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, timeout_s, "the dense reference of case '" + c.name + "' (computed by rank 0)", {0});
  return mine;
}

struct Parity {
  double max_abs = 0, rel_l2 = 0;
  bool finite = true;
};

Parity check_parity(Device& dev, const DeviceBuffer& y, DType t, const std::vector<float>& ref, double timeout_s) {
  std::vector<unsigned char> raw(ref.size() * dtype_size(t));
  dev.copy_to_host(raw.data(), y.get(), raw.size());
  double sums[2] = {0, 0};  // ||y - ref||^2, ||ref||^2
  double max_abs = 0, nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = load_as_float(t, raw.data(), i), r = ref[i];
    if (!std::isfinite(v)) {
      nonfinite += 1;
      continue;
    }
    const double d = v - r;
    sums[0] += d * d;
    sums[1] += r * r;
    max_abs = std::max(max_abs, std::fabs(d));
  }
  double gsums[2], gmax[2], local_max[2] = {max_abs, nonfinite};
  MPI_Request reqs[2];
  UIPC_MPI_CHECK(MPI_Iallreduce(sums, gsums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[0]));
  UIPC_MPI_CHECK(MPI_Iallreduce(local_max, gmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &reqs[1]));
  wait_bounded(reqs, 2, timeout_s, "the parity check", {});
  Parity p;
  p.max_abs = gmax[0];
  p.finite = gmax[1] == 0;
  p.rel_l2 = gsums[1] > 0 ? std::sqrt(gsums[0] / gsums[1]) : std::sqrt(gsums[0]);
  return p;
}

// A digest of the whole distributed output: every rank's bytes hashed, the hashes of all
// ranks combined in rank order, the same on every rank. Runs with equal digests produced
// bit-identical outputs (what "bit-exact against the nccl path" is checked with).
std::string output_digest(Device& dev, const DeviceBuffer& y, size_t bytes, double timeout_s) {
  std::vector<unsigned char> raw(bytes);
  dev.copy_to_host(raw.data(), y.get(), bytes);
  uint64_t h = splitmix64(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, raw.data() + i, std::min<size_t>(8, bytes - i));
    h = splitmix64(h ^ w);
  }
  int world = 1;
  UIPC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::vector<uint64_t> all(static_cast<size_t>(world));
  allgather_bounded(MPI_COMM_WORLD, &h, sizeof(h), all.data(), timeout_s, "the output digest");
  uint64_t d = 0;
  for (uint64_t v : all) d = splitmix64(d ^ v);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
  return buf;
}

// Rank 0 receives every rank's [iteration][stage] timings (and overlaps) of `mine`, the
// timed layers [first, first + mine.size()) of repeat `repeat`.
void gather_timings(const std::vector<LayerTiming>& mine, int world, int repeat, int first, RunResult& out,
                    double timeout_s) {
  std::vector<double> flat;
  for (const auto& t : mine) {
    flat.insert(flat.end(), t.stage_ms, t.stage_ms + kNumStages);
    flat.push_back(t.v_overlap_ms);
    flat.push_back(t.v_copy_ms);
  }
  const int per = static_cast<int>(flat.size());
  const int count = static_cast<int>(mine.size());
  std::vector<double> all(static_cast<size_t>(per) * world);
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Igather(flat.data(), per, MPI_DOUBLE, all.data(), per, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, timeout_s, "the collection of timings", {});
  for (int i = 0; i < count; ++i)
    for (int r = 0; r < world; ++r) {
      const double* src = all.data() + static_cast<size_t>(r) * per + static_cast<size_t>(i) * (kNumStages + 2);
      const size_t idx = (static_cast<size_t>(repeat) * out.iterations + first + i) * world + r;
      std::copy_n(src, kNumStages, out.stage_ms.begin() + idx * kNumStages);
      out.v_overlap_ms[idx] = src[kNumStages];
      out.v_copy_ms[idx] = src[kNumStages + 1];
    }
}

// This rank's output as fp32 values of the dtype.
std::vector<float> output_values(Device& dev, const DeviceBuffer& y, DType t, size_t n) {
  std::vector<unsigned char> raw(n * dtype_size(t));
  dev.copy_to_host(raw.data(), y.get(), raw.size());
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load_as_float(t, raw.data(), i);
  return v;
}

// The sum over all ranks (what every rank of the run sent in some phase).
int64_t sum_over_ranks(int64_t mine, double timeout_s) {
  int64_t all = 0;
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iallreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, timeout_s, "the byte counts of a step", {});
  return all;
}

// --dump stores whole tensors in the report: small cases only.
constexpr int64_t kMaxDumpElements = 16 << 20;

// Test hook: a rank named by this variable adds 1 to its first output element before
// the parity check, so tests can see a parity failure end to end.
const char* const kCorruptRankEnv = "ULYSSES_TEST_CORRUPT_RANK";

void corrupt_output_for_tests(Device& dev, const DeviceBuffer& y, DType t, int rank) {
  const char* v = std::getenv(kCorruptRankEnv);
  if (!v || !*v || std::atoi(v) != rank) return;
  unsigned char e[4];
  dev.copy_to_host(e, y.get(), dtype_size(t));
  store_from_float(t, e, 0, load_as_float(t, e, 0) + 1.0f);
  dev.copy_to_device(y.get(), e, dtype_size(t));
}

// Test hook: a rank named by this variable issues a copy of two rows, each more than half
// its output buffer, so tests can see the device layer's reach check end the run on that
// rank (exit 3, no report) instead of a copy past the buffer.
const char* const kOverreachRankEnv = "ULYSSES_TEST_OVERREACH_RANK";

void overreach_for_tests(Device& dev, Stream& s, const DeviceBuffer& y, int rank) {
  const char* v = std::getenv(kOverreachRankEnv);
  if (!v || !*v || std::atoi(v) != rank) return;
  const size_t row = y.bytes() / 2 + 1;
  dev.copy_2d(s, y.get(), row, y.get(), row, row, 2);
}

// The runs of one transport under each schedule of the case: the full design (ablation
// ""), then each ablation of the case (or of --ablations) that applies to it.
std::vector<std::pair<std::string, std::string>> schedule_runs(const Case& c, const RunOptions& opt,
                                                               const std::string& transport) {
  const std::vector<std::string>& ablations = opt.ablations_set ? opt.ablations : c.ablations;
  const bool ipc_family = transport == "ipc" || transport == "vmm";
  std::vector<std::pair<std::string, std::string>> runs;
  for (const auto& sname : c.schedules) {
    runs.emplace_back(sname, "");
    const bool fused = make_schedule(sname, c.fused_qkv).fused;
    for (const auto& a : ablations) {
      if (a == "none") continue;
      if ((a == "no-target-cache" || a == "normal-priority") && !ipc_family) continue;  // IPC protocol parts
      if (a == "no-pitched-copies" && !fused) continue;  // separate projections have no strided views
      runs.emplace_back(sname, a);
    }
  }
  return runs;
}

class Printer {
 public:
  explicit Printer(bool quiet) : quiet_(quiet) { MPI_Comm_rank(MPI_COMM_WORLD, &rank_); }
  template <typename... A>
  void line(const char* fmt, A... a) const {
    if (rank_ == 0 && !quiet_) {
      std::printf(fmt, a...);
      std::fflush(stdout);
    }
  }

 private:
  bool quiet_;
  int rank_ = 0;
};

}  // namespace

int run_deck(const RunOptions& opt) {
  int world = 1, rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  UIPC_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  Printer out(opt.quiet);
  const auto t_start = std::chrono::steady_clock::now();

  // Phase 1, alike on every rank: the deck and which of its cases fit this world.
  // An error here is agreed by all ranks and reported once.
  // Rank 0 alone parses the (possibly hostile) file, in a child process bounded in time
  // and memory; the others get plain values, or rank 0's error, bounded in time too.
  // Itself collective (every rank returns the same deck or throws the same error), so it
  // stays outside collective_phase: a rank 0 that died must not leave the others in an
  // unbounded MPI_Allreduce.
  Deck deck = read_deck_on_root(opt.deck_path, MPI_COMM_WORLD,
                                opt.watchdog_s > 0 ? std::max(10.0, 2 * opt.watchdog_s) : kDeckReadTimeoutS);
  std::vector<Case> todo;
  std::vector<std::string> skipped;
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
  for (const auto& s : skipped) out.line("skipped %s\n", s.c_str());

  Backend be;
  collective_phase(MPI_COMM_WORLD, [&] { be = make_backend(opt.backend, MPI_COMM_WORLD); });
  // The one node layout of the run: eligibility and the report read it.
  NodeLayout nodes;
  collective_phase(MPI_COMM_WORLD,
                   [&] { nodes = discover_nodes(MPI_COMM_WORLD, opt.ranks_per_node, be.device->watchdog_seconds()); });
  const bool model_mode = be.mode == "model";

  // The machine each run's traced layer is replayed under (docs/model.md). The shipped
  // default may be absent from an installed copy: then nothing is modelled, outside
  // --mode model, which needs it.
  model::Machine machine;
  bool have_machine = false;
  std::string machine_note;
  collective_phase(MPI_COMM_WORLD, [&] {
    const std::string path = machine_path(opt.machine);
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

  // Before anything is allocated: does every case fit? On GPUs each rank has its own
  // device memory; in simulation every rank of a node shares the node's memory, so the
  // node's ranks' needs add up. (The estimate is per case: cases run one after another.)
  MPI_Comm node_raw;
  UIPC_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_raw));
  MpiComm node(node_raw);
  // --mode model touches no data (its memory is mapped, never written): nothing to check.
  for (const auto& c : model_mode ? std::vector<Case>{} : todo) {
    const double mine = static_cast<double>(estimate_case_bytes_per_rank(c, world, rank == 0, be.mode == "sim"));
    double need = mine;
    if (be.mode == "sim") UIPC_MPI_CHECK(MPI_Allreduce(&mine, &need, 1, MPI_DOUBLE, MPI_SUM, node.get()));
    collective_phase(MPI_COMM_WORLD, [&] {
      const double have = static_cast<double>(be.device->free_memory());
      if (need > 0.9 * have) {
        char buf[320];
        std::snprintf(buf, sizeof(buf), "case '%s' needs about %.2f GiB of %s, which has %.2f GiB free",
                      c.name.c_str(), need / (1 << 30),
                      be.mode == "gpu" ? ("device memory on rank " + std::to_string(rank)).c_str()
                                       : "host memory on this node (simulation: all its ranks together)",
                      have / (1 << 30));
        throw InputError(buf + std::string(": fewer tokens, more ranks, or --case to run the others; or ") +
                         sim_alternatives(c));
      }
    });
  }
  // Simulation: every case's CPU time too; a long case prints its estimate and progress.
  const auto print = [&out](const std::string& line) { out.line("%s", line.c_str()); };
  int node_ranks = 1;
  UIPC_MPI_CHECK(MPI_Comm_size(node.get(), &node_ranks));
  const std::vector<CpuEstimate> cpu_est =
      be.mode == "sim" && !model_mode
          ? check_sim_cpu_time(todo, world, node_ranks, opt.sim_time_limit_s,
                               opt.watchdog_s > 0 ? opt.watchdog_s : be.device->watchdog_seconds(), *be.device,
                               *be.kernels, print)
          : std::vector<CpuEstimate>(todo.size());
  Provenance prov;
  prov.version = ULYSSES_GIT_REV;
  prov.date = iso_date_utc();
  prov.command_line = opt.command_line;
  prov.mode = be.mode;
  prov.deck_path = opt.deck_path;
  prov.world_size = world;
  prov.hosts = allgather_strings(MPI_COMM_WORLD, host_name(), be.device->watchdog_seconds(), "the provenance");
  prov.devices =
      allgather_strings(MPI_COMM_WORLD, be.device->name(), be.device->watchdog_seconds(), "the provenance");
  prov.node_of_rank.assign(nodes.node_of.begin(), nodes.node_of.end());
  prov.node_layout = nodes.describe();
  prov.versions["ulysses-ipc"] = ULYSSES_VERSION;
  prov.versions["mpi"] = mpi_version();
  if (!opt.kokkos_version.empty()) prov.versions["kokkos"] = opt.kokkos_version;
  if (!be.versions_cuda.empty()) prov.versions["cuda"] = be.versions_cuda;
  if (!be.versions_nccl.empty()) prov.versions["nccl"] = be.versions_nccl;

  out.line("ulysses-ipc %s: %d rank(s), mode %s, deck %s (%zu case(s) to run)\n", ULYSSES_GIT_REV, world,
           be.mode.c_str(), opt.deck_path.c_str(), todo.size());
  if (!nodes.one_node() || nodes.declared_ranks_per_node > 0) out.line("nodes: %s\n", nodes.describe().c_str());

  std::vector<CaseResult> results;
  bool all_pass = true;
  std::unique_ptr<Stream> compute = be.device->create_stream(StreamPriority::kNormal);

  for (size_t ci = 0; ci < todo.size(); ++ci) {
    const Case& c = todo[ci];
    const auto t_case = std::chrono::steady_clock::now();
    be.device->set_watchdog_seconds(opt.watchdog_s > 0 ? opt.watchdog_s : sim_watchdog_for(c.watchdog_s, cpu_est[ci]));
    CaseProgress progress(c, cpu_est[ci], print);
    Layout l = make_layout(c, world, rank);
    MpiComm ucomm = split_comm(MPI_COMM_WORLD, l.ulysses_group(), rank);
    MpiComm tcomm = split_comm(MPI_COMM_WORLD, l.tp_group(), rank);
    const NodeLayout unodes = nodes.of(ucomm.get(), MPI_COMM_WORLD);
    auto ucoll = be.make_collectives(ucomm.get());
    auto tcoll = l.tp > 1 ? be.make_collectives(tcomm.get()) : nullptr;
    // nccl-ce's zero-CTA communicator, made once per case where a run asks for it.
    std::unique_ptr<Collectives> cecoll;
    std::string ce_unavailable;
    if (std::find(c.transports.begin(), c.transports.end(), "nccl-ce") != c.transports.end())
      cecoll = be.make_ce_collectives(ucomm.get(), &ce_unavailable);
    TransportSetup setup{*be.device, ucomm.get(), unodes, *ucoll, [&be](MPI_Comm c) { return be.make_collectives(c); }, {}};
    setup.options.cache_capacity = opt.cache_capacity;
    setup.hier_chunks = opt.hier_chunks;
    setup.vmajor_threshold = c.vmajor_threshold;
    setup.row_change = [&be](Stream& s, const void* now, const void* last, DType t, int64_t rows, int64_t row_elems,
                             double* out) { be.kernels->row_change(s, now, last, t, rows, row_elems, out); };
    setup.ce_coll = cecoll.get();
    if (!ce_unavailable.empty()) setup.ce_unavailable = ce_unavailable;

    // --mode model: full-size buffers, never written; no inputs, no reference, no parity,
    // one step.
    HostLayerData host = model_mode ? HostLayerData{} : generate_layer_data(c, l);
    LayerData data = model_mode ? allocate_layer_data(*be.device, c, l) : upload_layer_data(*be.device, c, l, host);
    const int steps = model_mode ? 1 : c.steps;
    const double wd = be.device->watchdog_seconds();
    // Per denoising step: this rank's input rows, and its rows of the dense reference
    // (serial work on rank 0: the others wait longer for it).
    std::vector<std::vector<float>> inputs(static_cast<size_t>(steps)), refs(static_cast<size_t>(steps));
    std::vector<float> full_ref;  // step 0's, for --dump
    for (int t = 0; t < (model_mode ? 0 : steps); ++t) {
      inputs[static_cast<size_t>(t)] = t == 0 ? host.x : generate_layer_input(c, l, t);
      std::vector<float> full;
      set_activity("computing the dense reference");
      if (rank == 0) full = dense_reference(*be.device, *be.kernels, c, *compute, t);
      progress.reference_done();
      set_activity("distributing the reference");
      refs[static_cast<size_t>(t)] = distribute_reference(full, c, l, 20 * wd);
      if (t == 0) full_ref = std::move(full);
    }
    // Per schedule, this rank's output at every step of the case's first exact run: what
    // an approximate (V-major) run of that schedule is measured against.
    std::map<std::string, std::vector<std::vector<float>>> exact_out;
    const size_t out_elems = refs[0].size();  // 0 in --mode model

    CaseResult cr;
    cr.spec = c;
    for (const auto& tname : c.transports) {
      for (const auto& [sname, ablation] : schedule_runs(c, opt, tname)) {
        Schedule sched = make_schedule(sname, c.fused_qkv);
        const bool approx = !transport_is_exact(tname);
        TransportOptions topts = setup.options;
        topts.cache_targets = ablation != "no-target-cache";
        topts.copy_priority = ablation == "normal-priority" ? StreamPriority::kNormal : StreamPriority::kHigh;
        PipelineOptions popts;
        popts.own_slice_by_producer = ablation != "own-slice-copy";
        popts.pack_strided = ablation == "no-pitched-copies";
        popts.grouped_handshake = ablation != "no-grouped-handshake";
        set_activity("selecting the scatter transport");
        TransportSetup run_setup = setup;
        run_setup.options = topts;
        // Through the public API (include/ulysses_ipc), as an engine of one's own would.
        ulysses_ipc::Communicator scatter = ulysses_ipc::internal::open(tname, run_setup);
        const SelectedTransport& sel = ulysses_ipc::internal::selected(scatter);
        // The output gather: NCCL (the seed measured it faster) unless asked otherwise or
        // unusable; IPC reuses the scatter's transport when that is ipc, vmm or hier (the
        // same protocol; hier's gather is its hierarchical path backwards), and the report
        // then names the one that carried it.
        std::optional<ulysses_ipc::Communicator> own_gather;
        Transport* gather = nullptr;
        std::string gather_name = opt.gather;
        if (gather_name == "auto") gather_name = (be.mode == "gpu" && !be.nccl_usable) ? "ipc" : "nccl";
        if (gather_name == "ipc" &&
            (sel.used == "ipc" || sel.used == "vmm" || sel.used == "hier" || sel.used == "hier-vmajor")) {
          gather = sel.transport.get();
          gather_name = sel.used;
        } else {
          own_gather = ulysses_ipc::internal::open(gather_name, setup);
          gather_name = own_gather->transport();
          gather = &ulysses_ipc::internal::transport(*own_gather);
        }

        RunResult rr;
        rr.transport_requested = tname;
        rr.transport_used = sel.used;
        rr.fallback_reason = sel.fallback_reason;
        rr.transport_note = sel.note;
        rr.gather_transport = gather_name;
        rr.collectives = ucoll->name();
        rr.schedule = sname;
        rr.ablation = ablation;
        rr.projection = sched.fused ? "fused" : "separate";
        rr.approximate = approx;
        // --mode model times nothing: its one "timed" layer is the modelled traced layer.
        rr.repeats = model_mode ? 1 : c.repeats;
        rr.iterations = model_mode ? 1 : c.iterations * steps;  // step-major
        rr.ranks = world;
        rr.steps = steps;
        rr.stage_ms.assign(static_cast<size_t>(rr.repeats) * rr.iterations * world * kNumStages, 0.0);
        rr.v_overlap_ms.assign(static_cast<size_t>(rr.repeats) * rr.iterations * world, 0.0);
        rr.v_copy_ms.assign(rr.v_overlap_ms.size(), -1.0);
        for (auto* v : {&rr.step_max_abs, &rr.step_rel_l2, &rr.step_vs_exact_max_abs, &rr.step_vs_exact_rel_l2})
          v->assign(static_cast<size_t>(steps), std::numeric_limits<double>::quiet_NaN());
        rr.step_inter_bytes_sent.assign(static_cast<size_t>(steps), 0);
        rr.step_inter_bytes_full.assign(static_cast<size_t>(steps), 0);
        const bool defines_exact = !approx && exact_out.count(sname) == 0;
        std::vector<std::vector<float>>* exact = exact_out.count(sname) ? &exact_out[sname] : nullptr;
        if (defines_exact) exact_out[sname].resize(static_cast<size_t>(steps));

        set_activity("building the layer pipeline");
        const std::string run_label = sname + (ablation.empty() ? "" : "+" + ablation);
        const std::string layer_start = "the start of a timed layer of " + tname + "/" + run_label;
        // On GPUs the ranks must leave that barrier together (polling, not napping);
        // simulated ranks share the CPU with their streams' workers and time nothing real.
        const double align_spin_s = be.mode == "gpu" ? 0.05 : 0.0;
        LayerPipeline pipe(*be.device, *be.kernels, c, l, data, sched, *sel.transport, *gather, tcoll.get(), *compute,
                           popts);
        bool pass = true;
        Parity worst;  // over the steps, against the dense reference
        // --mode model: warmup layers only (at least one, so that the target cache is
        // filled as in a timed run before the traced layer).
        for (int w = 0; model_mode && w < std::max(c.warmup, 1); ++w) {
          set_activity("starting a warmup layer");
          pipe.enqueue_layer();
          compute->synchronize();
        }
        for (int rep = 0; rep < (model_mode ? 0 : c.repeats); ++rep) {
          const bool last_rep = rep == c.repeats - 1;
          for (int t = 0; t < steps; ++t) {
            if (steps > 1) {  // this step's input, in place: the pipeline reads data.x
              compute->synchronize();
              std::vector<unsigned char> x(inputs[static_cast<size_t>(t)].size() * dtype_size(c.dtype));
              for (size_t i = 0; i < inputs[static_cast<size_t>(t)].size(); ++i)
                store_from_float(c.dtype, x.data(), i, inputs[static_cast<size_t>(t)][i]);
              be.device->copy_to_device(data.x.get(), x.data(), x.size());
            }
            // V-major: the first steps with full communication, then selective.
            sel.transport->set_selective(t >= c.full_steps);
            const TransportStats before = sel.transport->stats();
            bool first_layer = true;
            auto count_first_layer = [&] {
              if (!first_layer) return;
              first_layer = false;
              const TransportStats after = sel.transport->stats();
              if (last_rep) {
                rr.step_inter_bytes_sent[static_cast<size_t>(t)] =
                    sum_over_ranks(after.inter_bytes_sent - before.inter_bytes_sent, wd);
                rr.step_inter_bytes_full[static_cast<size_t>(t)] =
                    sum_over_ranks(after.inter_bytes_full - before.inter_bytes_full, wd);
              }
            };
            for (int w = 0; w < c.warmup; ++w) {
              set_activity("starting a warmup layer");
              pipe.enqueue_layer();
              compute->synchronize();
              progress.layer_done();
              count_first_layer();
            }
            std::vector<LayerTiming> times;
            for (int it = 0; it < c.iterations; ++it) {
              pipe.poison_output();
              // Ranks start each timed layer together, so that a stage's time is the
              // layer's own and not one rank's host delay in launching it (which every
              // transport would otherwise pay as waiting in its first collective).
              set_activity("at the barrier before a timed layer");
              barrier_bounded(MPI_COMM_WORLD, wd, layer_start, align_spin_s);
              set_activity("starting a timed layer");
              pipe.enqueue_layer();
              compute->synchronize();
              progress.layer_done();
              times.push_back(pipe.last_timing());
              count_first_layer();
            }
            set_activity("gathering the timings");
            gather_timings(times, world, rep, t * c.iterations, rr, wd);
            if (!last_rep) continue;
            // The step's output: against the dense reference, and (approximate runs, or
            // exact runs after the first) against the exact run's output of the step.
            if (t == steps - 1) corrupt_output_for_tests(*be.device, pipe.output(), c.dtype, rank);
            if (t == steps - 1) overreach_for_tests(*be.device, *compute, pipe.output(), rank);
            set_activity("checking parity");
            const Parity p = check_parity(*be.device, pipe.output(), c.dtype, refs[static_cast<size_t>(t)], wd);
            rr.step_max_abs[static_cast<size_t>(t)] = p.max_abs;
            rr.step_rel_l2[static_cast<size_t>(t)] = p.rel_l2;
            worst.max_abs = std::max(worst.max_abs, p.max_abs);
            worst.rel_l2 = std::max(worst.rel_l2, p.rel_l2);
            worst.finite = worst.finite && p.finite;
            if (defines_exact) {
              exact_out[sname][static_cast<size_t>(t)] = output_values(*be.device, pipe.output(), c.dtype, out_elems);
            } else if (exact) {
              const Parity e = check_parity(*be.device, pipe.output(), c.dtype, (*exact)[static_cast<size_t>(t)], wd);
              rr.step_vs_exact_max_abs[static_cast<size_t>(t)] = e.max_abs;
              rr.step_vs_exact_rel_l2[static_cast<size_t>(t)] = e.rel_l2;
              if (approx) pass = pass && e.finite && e.rel_l2 <= c.vmajor_tol_rel_l2;
            }
          }
        }
        rr.parity_max_abs = worst.max_abs;
        rr.parity_rel_l2 = worst.rel_l2;
        rr.parity_finite = worst.finite;
        rr.attention = be.attention_path();
        // An approximate run is judged by its own tolerance and never counts as an exact pass.
        rr.parity_pass = !approx && worst.finite && worst.max_abs <= c.tol_max_abs && worst.rel_l2 <= c.tol_rel_l2;
        rr.approx_pass = approx && pass && worst.finite;
        if (!model_mode) rr.output_digest = output_digest(*be.device, pipe.output(), out_elems * dtype_size(c.dtype), wd);
        all_pass = all_pass && (approx ? rr.approx_pass : rr.parity_pass);
        if (model_mode) {
          rr.parity_computed = false;  // no data: never reported as passed
          rr.parity_pass = rr.approx_pass = false;
          rr.parity_max_abs = rr.parity_rel_l2 = std::nan("");
        }

        // One more layer, traced (and modelled where a machine is loaded), after the
        // output was checked; its times stay out of the timed statistics.
        TracedLayerSetup ts;
        ts.machine = have_machine ? &machine : nullptr;
        ts.measure = !model_mode;
        ts.watchdog_s = wd;
        ts.barrier_label = "the start of the traced layer of " + tname + "/" + run_label;
        ts.spin_s = align_spin_s;
        run_traced_layer(*be.tracer, pipe, *compute, ts, model_mode, rr);
        if (rr.machine.empty() && rr.model_note.empty()) rr.model_note = machine_note;
        if (model_mode && rank == 0) {
          rr.stage_ms = rr.modeled_stage_ms;
          rr.v_overlap_ms = rr.modeled_v_overlap_ms;
          rr.v_copy_ms = rr.modeled_v_copy_ms;
        }

        // No separate copy stream (nccl): nothing was overlapped or measured.
        if (std::all_of(rr.v_copy_ms.begin(), rr.v_copy_ms.end(), [](double v) { return v < 0; })) {
          rr.v_copy_ms.clear();
          rr.v_overlap_ms.clear();
        }
        TransportStats st = sel.transport->stats();
        // Every layer that ran: warmup and timed ones, and the traced one.
        const int64_t layers = model_mode ? std::max(c.warmup, 1) + 1
                                          : static_cast<int64_t>(c.repeats) * steps * (c.warmup + c.iterations) + 1;
        rr.handshakes_per_layer = static_cast<int>(st.handshakes / std::max<int64_t>(1, layers));
        rr.ulysses_nodes = unodes.nodes();
        {
          int64_t tokens = 0, heads = 0, most_tokens = 0, most_heads = 0;
          for (int r = 0; r < world; ++r) {
            const Layout lr = make_layout(c, world, r);
            rr.tokens_per_rank.push_back(lr.seq_local);
            rr.heads_per_rank.push_back(lr.heads_local);
            tokens += lr.seq_local;
            heads += lr.heads_local;
            most_tokens = std::max<int64_t>(most_tokens, lr.seq_local);
            most_heads = std::max<int64_t>(most_heads, lr.heads_local);
          }
          rr.token_imbalance = static_cast<double>(most_tokens) * world / static_cast<double>(tokens);
          rr.head_imbalance = static_cast<double>(most_heads) * world / static_cast<double>(heads);
        }
        rr.hier_chunks = sel.used == "hier" || sel.used == "hier-vmajor" ? opt.hier_chunks : 0;
        rr.cache_hits = st.cache_hits;
        rr.cache_misses = st.cache_misses;
        rr.cache_evictions = st.cache_evictions;
        const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
        const int64_t off_rank_heads = l.heads_tp - l.heads_local;
        rr.scatter_bytes_per_rank = 3 * l.batch * l.seq_local * off_rank_heads * l.head_dim * es;
        rr.gather_bytes_per_rank = l.batch * l.seq_local * off_rank_heads * l.head_dim * es;

        // Importers close before exporters free.
        compute->synchronize();
        sel.transport->close_peer_mappings();
        if (own_gather) ulysses_ipc::internal::transport(*own_gather).close_peer_mappings();
        set_activity("at the barrier ending a run");
        barrier_bounded(MPI_COMM_WORLD, be.device->watchdog_seconds(), "the end of run " + tname + "/" + run_label);

        std::vector<double> layer_ms;
        for (size_t i = 0; i < rr.stage_ms.size(); i += kNumStages) layer_ms.push_back(rr.stage_ms[i + kStageLayer]);
        const double median = rank == 0 ? percentile(layer_ms, 50) : 0.0;
        const std::string used_note = sel.used == tname ? "" : "->" + sel.used;
        double modeled_layer = 0;
        for (size_t i = 0; i < rr.modeled_stage_ms.size(); i += kNumStages)
          modeled_layer = std::max(modeled_layer, rr.modeled_stage_ms[i + kStageLayer]);
        char modeled_text[160] = "";
        if (!rr.machine.empty())
          std::snprintf(modeled_text, sizeof(modeled_text), "  modeled on %s: layer %.3f ms", rr.machine.c_str(),
                        modeled_layer);
        const char* time_kind = be.mode == "gpu" ? "measured" : "CPU time";
        if (model_mode) {
          out.line("  %-24s %-5s%-6s %-14s parity not computed (model mode)%s\n", c.name.c_str(), tname.c_str(),
                   used_note.c_str(), run_label.c_str(), modeled_text);
        } else if (approx) {
          double vs = 0;
          int64_t sent = 0, full = 0;
          for (int t = 0; t < steps; ++t) {
            vs = std::max(vs, rr.step_vs_exact_rel_l2[static_cast<size_t>(t)]);
            sent += rr.step_inter_bytes_sent[static_cast<size_t>(t)];
            full += rr.step_inter_bytes_full[static_cast<size_t>(t)];
          }
          out.line("  %-24s %-5s%-6s %-14s approx %s (vs exact: rel_l2 <= %.2e, tolerance %.2e; inter-node bytes "
                   "%.1f%% of full over %d steps)  layer median %.3f ms (%s)%s\n",
                   c.name.c_str(), tname.c_str(), used_note.c_str(), run_label.c_str(), rr.approx_pass ? "PASS" : "FAIL",
                   vs, c.vmajor_tol_rel_l2,
                   full > 0 ? 100.0 * static_cast<double>(sent) / static_cast<double>(full) : 100.0, steps, median,
                   time_kind, modeled_text);
        } else {
          out.line("  %-24s %-5s%-6s %-14s parity %s (max_abs %.2e, rel_l2 %.2e)  layer median %.3f ms (%s)%s\n",
                   c.name.c_str(), tname.c_str(), used_note.c_str(), run_label.c_str(), rr.parity_pass ? "PASS" : "FAIL",
                   worst.max_abs, worst.rel_l2, median, time_kind, modeled_text);
        }
        cr.runs.push_back(std::move(rr));
      }
    }
    if (opt.dump && rank == 0) {
      cr.has_dump = true;
      const int64_t C = c.width();
      cr.dump.tensors.push_back({"reference_output", full_ref});
      cr.dump.shapes["reference_output"] = {c.batch, c.seq_len, C};
      Case dense = c;
      dense.tp = 1;
      dense.ulysses = 1;
      HostLayerData full = generate_layer_data(dense, make_layout(dense, 1, 0));
      cr.dump.tensors.push_back({"x", full.x});
      cr.dump.shapes["x"] = {c.batch, c.seq_len, C};
      cr.dump.tensors.push_back({"w_qkv", full.w_qkv});
      cr.dump.shapes["w_qkv"] = {C, 3, c.heads, c.head_dim};
      cr.dump.tensors.push_back({"w_o", full.w_o});
      cr.dump.shapes["w_o"] = {C, C};
      for (auto* t : {&full.gamma_q, &full.gamma_k, &full.beta_q, &full.beta_k}) {
        if (t->empty()) continue;
        const char* n = t == &full.gamma_q ? "gamma_q" : t == &full.gamma_k ? "gamma_k" : t == &full.beta_q ? "beta_q" : "beta_k";
        cr.dump.tensors.push_back({n, *t});
        cr.dump.shapes[n] = {static_cast<int64_t>(t->size())};
      }
    }
    results.push_back(std::move(cr));
    const double case_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_case).count();
    const double per_case = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() / (ci + 1);
    out.line("[%zu/%zu] %s done in %.1f s, about %.0f s left\n", ci + 1, todo.size(), c.name.c_str(), case_s,
             per_case * static_cast<double>(todo.size() - ci - 1));
  }

  if (rank == 0) write_report(opt.report_path, prov, results);
  UIPC_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (model_mode) {
    out.line("report: %s; modeled only, parity not computed (--mode model)\n", opt.report_path.c_str());
    return kExitModelOnly;
  }
  out.line("report: %s; parity %s\n", opt.report_path.c_str(), all_pass ? "PASS" : "FAIL");
  return all_pass ? kExitOk : kExitParityFailed;
}

}  // namespace uipc
