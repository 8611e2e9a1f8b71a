// The case runner (lib/run/case_runner.hpp). A case opens its layout, communicators and
// data and computes the dense reference once; each run then opens its transports, times
// its layers, checks and judges them, traces one more layer, computes its statistics,
// closes and prints its line.
#include "lib/run/case_runner.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

#include "api/internal.hpp"
#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/transport/transports.hpp"
#include "lib/run/cpu_estimate.hpp"
#include "lib/run/layer_data.hpp"
#include "lib/run/layer_graph.hpp"
#include "lib/run/layout.hpp"
#include "lib/run/parity.hpp"
#include "lib/run/pipeline.hpp"
#include "lib/run/traced_layer.hpp"

namespace uipc {
namespace {

// Unix seconds, for placing the timed layers on the clock of samplers beside the run.
double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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

// The sum over all ranks (what every rank of the run sent in some phase).
int64_t sum_over_ranks(int64_t mine, double timeout_s) {
  int64_t all = 0;
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iallreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, timeout_s, "the byte counts of a step", {});
  return all;
}

// The runs of one transport under each schedule of the case: the full design (ablation
// ""), then each ablation of the case (or of --ablations) that applies to it.
std::vector<std::pair<std::string, std::string>> schedule_runs(const Case& c, const RunOptions& opt,
                                                               const std::string& transport) {
  const std::vector<std::string>& ablations = opt.ablations_set ? opt.ablations : c.ablations;
  const TransportKind* kind = find_transport_kind(transport);
  const bool ipc_protocol = kind && kind->ipc_protocol;
  std::vector<std::pair<std::string, std::string>> runs;
  for (const auto& sname : c.schedules) {
    runs.emplace_back(sname, "");
    const bool fused = make_schedule(sname, c.fused_qkv).fused;
    for (const auto& a : ablations) {
      const AblationKind* ab = find_ablation(a);
      if (!ab) continue;                                // "none"
      if (ab->ipc_protocol_only && !ipc_protocol) continue;
      if (ab->fused_only && !fused) continue;           // separate projections have no strided views
      runs.emplace_back(sname, a);
    }
  }
  return runs;
}

// What an ablation switches off, in the transport and in the layer pipeline.
TransportOptions ablated(TransportOptions topts, const std::string& ablation) {
  topts.cache_targets = ablation != "no-target-cache";
  topts.copy_priority = ablation == "normal-priority" ? StreamPriority::kNormal : StreamPriority::kHigh;
  return topts;
}

PipelineOptions pipeline_options(const std::string& ablation, bool stage_timing) {
  PipelineOptions popts;
  popts.stage_timing = stage_timing;
  popts.own_slice_by_producer = ablation != "own-slice-copy";
  popts.pack_strided = ablation == "no-pitched-copies";
  popts.grouped_handshake = ablation != "no-grouped-handshake";
  return popts;
}

// A case opened on every rank: its layout and communicators, what its transports are
// made from, its data, and per denoising step this rank's input rows and its rows of
// the dense reference (none in --mode model). Members are released in reverse order.
struct OpenCase {
  OpenCase(const DeckRun& dr, const Case& c, CaseProgress& progress);

  const Case& c;
  CaseProgress& progress;  // a long simulated case's progress lines
  const RunShape shape;
  const Layout l;
  MpiComm ucomm, tcomm;
  const NodeLayout unodes;
  std::unique_ptr<Collectives> ucoll, tcoll;
  std::string ce_unavailable;
  std::unique_ptr<Collectives> cecoll;  // nccl-ce's zero-CTA communicator, where a run asks for it
  TransportSetup setup;
  HostLayerData host;
  LayerData data;
  const double wd;
  std::vector<std::vector<float>> inputs, refs;
  std::vector<float> full_ref;  // step 0's, for --dump
  // Per schedule, this rank's output at every step of the case's first exact run: what
  // an approximate (V-major) run of that schedule is measured against.
  std::map<std::string, std::vector<std::vector<float>>> exact_out;
  size_t out_elems = 0;  // 0 in --mode model
};

TransportSetup transport_setup(const DeckRun& dr, const Case& c, const OpenCase& oc) {
  Backend& be = dr.be;
  TransportSetup setup{*be.device, oc.ucomm.get(), oc.unodes, *oc.ucoll,
                       [&be](MPI_Comm c) { return be.make_collectives(c); }, {}};
  setup.options.cache_capacity = dr.opt.cache_capacity;
  setup.options.time_v_copy = dr.opt.stage_timing;
  setup.hier_chunks = dr.opt.hier_chunks;
  setup.vmajor_threshold = c.vmajor_threshold;
  setup.row_change = [&be](Stream& s, const void* now, const void* last, DType t, int64_t rows, int64_t row_elems,
                           double* out) { be.kernels->row_change(s, now, last, t, rows, row_elems, out); };
  setup.ce_coll = oc.cecoll.get();
  if (!oc.ce_unavailable.empty()) setup.ce_unavailable = oc.ce_unavailable;
  return setup;
}

OpenCase::OpenCase(const DeckRun& dr, const Case& c, CaseProgress& progress)
    : c(c),
      progress(progress),
      shape(run_shape(c, dr.mode)),
      l(make_layout(c, dr.world, dr.rank)),
      ucomm(split_comm(MPI_COMM_WORLD, l.ulysses_group(), dr.rank)),
      tcomm(split_comm(MPI_COMM_WORLD, l.tp_group(), dr.rank)),
      unodes(dr.nodes.of(ucomm.get(), MPI_COMM_WORLD)),
      ucoll(dr.be.make_collectives(ucomm.get())),
      tcoll(l.tp > 1 ? dr.be.make_collectives(tcomm.get()) : nullptr),
      cecoll(std::find(c.transports.begin(), c.transports.end(), "nccl-ce") != c.transports.end()
                 ? dr.be.make_ce_collectives(ucomm.get(), &ce_unavailable)
                 : nullptr),
      setup(transport_setup(dr, c, *this)),
      // --mode model: full-size buffers, never written.
      host(shape.has_data ? generate_layer_data(c, l) : HostLayerData{}),
      data(shape.has_data ? upload_layer_data(*dr.be.device, c, l, host) : allocate_layer_data(*dr.be.device, c, l)),
      wd(dr.be.device->watchdog_seconds()),
      inputs(static_cast<size_t>(shape.steps)),
      refs(static_cast<size_t>(shape.steps)) {
  // The reference is serial work on rank 0: the others wait longer for it.
  for (int t = 0; t < (shape.has_data ? shape.steps : 0); ++t) {
    inputs[static_cast<size_t>(t)] = t == 0 ? host.x : generate_layer_input(c, l, t);
    std::vector<float> full;
    set_activity("computing the dense reference");
    if (dr.rank == 0) full = dense_reference(*dr.be.device, *dr.be.kernels, c, dr.compute, t);
    progress.reference_done();
    set_activity("distributing the reference");
    refs[static_cast<size_t>(t)] = distribute_reference(full, c, l, 20 * wd);
    if (t == 0) full_ref = std::move(full);
  }
  out_elems = refs[0].size();
}

// The output gather: NCCL (the seed measured it faster) unless asked otherwise or
// unusable; IPC reuses the scatter's transport when that is ipc, vmm or hier (the same
// protocol; hier's gather is its hierarchical path backwards), and the report then names
// the one that carried it.
Transport* open_gather(const DeckRun& dr, const OpenCase& oc, const SelectedTransport& sel,
                       std::optional<ulysses_ipc::Communicator>& own_gather, std::string* gather_name) {
  *gather_name = dr.opt.gather;
  if (*gather_name == "auto") *gather_name = (dr.mode == Mode::kGpu && !dr.be.nccl_usable) ? "ipc" : "nccl";
  const TransportKind* used = find_transport_kind(sel.used);
  if (*gather_name == "ipc" && used && used->carries_gather) {
    *gather_name = sel.used;
    return sel.transport.get();
  }
  own_gather = ulysses_ipc::internal::open(*gather_name, oc.setup);
  *gather_name = own_gather->transport();
  return &ulysses_ipc::internal::transport(*own_gather);
}

// A run's result before anything ran: what it is, and its arrays sized by the shape.
RunResult new_run_result(const DeckRun& dr, const OpenCase& oc, const std::string& tname, const std::string& sname,
                         const std::string& ablation, const SelectedTransport& sel, const std::string& gather_name,
                         bool fused, bool approx) {
  const RunShape& shape = oc.shape;
  RunResult rr;
  rr.transport_requested = tname;
  rr.transport_used = sel.used;
  rr.fallback_reason = sel.fallback_reason;
  rr.transport_note = sel.note;
  rr.gather_transport = gather_name;
  rr.collectives = oc.ucoll->name();
  rr.schedule = sname;
  rr.ablation = ablation;
  rr.stage_timing = dr.opt.stage_timing ? "on" : "off";
  rr.projection = fused ? "fused" : "separate";
  rr.approximate = approx;
  rr.repeats = shape.report_repeats;
  rr.iterations = shape.report_iterations;
  rr.ranks = dr.world;
  rr.steps = shape.steps;
  rr.stage_ms.assign(static_cast<size_t>(rr.repeats) * rr.iterations * dr.world * kNumStages, 0.0);
  rr.v_overlap_ms.assign(static_cast<size_t>(rr.repeats) * rr.iterations * dr.world, 0.0);
  rr.v_copy_ms.assign(rr.v_overlap_ms.size(), -1.0);
  for (auto* v : {&rr.step_max_abs, &rr.step_rel_l2, &rr.step_vs_exact_max_abs, &rr.step_vs_exact_rel_l2})
    v->assign(static_cast<size_t>(shape.steps), std::numeric_limits<double>::quiet_NaN());
  rr.step_inter_bytes_sent.assign(static_cast<size_t>(shape.steps), 0);
  rr.step_inter_bytes_full.assign(static_cast<size_t>(shape.steps), 0);
  return rr;
}

// One run's layer pipeline over its transports, and what its timed layers found.
struct RunInProgress {
  const DeckRun& dr;
  OpenCase& oc;
  const SelectedTransport& sel;
  LayerPipeline& pipe;
  GraphedLayer& layer;  // the pipeline's layers, replayed as graphs where they can be
  const std::string& sname;
  const bool approx;
  const std::string layer_start;  // the barrier's label before a timed layer
  const double align_spin_s;
  RunResult& rr;
  bool defines_exact = false;                     // the case's first exact run of the schedule
  std::vector<std::vector<float>>* exact = nullptr;  // that run's outputs (for the others)
  Parity worst;                                   // over the steps, against the dense reference
  bool vs_exact_pass = true;                      // approximate runs: every step within tolerance
  bool modeled_as_replay = false;                 // --mode model: the GPU run would replay its layers
};

// Step t's input, in place: the pipeline reads data.x.
void load_step_input(RunInProgress& run, int t) {
  const DeckRun& dr = run.dr;
  const std::vector<float>& in = run.oc.inputs[static_cast<size_t>(t)];
  dr.compute.synchronize();
  std::vector<unsigned char> x(in.size() * dtype_size(run.oc.c.dtype));
  for (size_t i = 0; i < in.size(); ++i) store_from_float(run.oc.c.dtype, x.data(), i, in[i]);
  dr.be.device->copy_to_device(run.oc.data.x.get(), x.data(), x.size());
}

// Step t of repeat rep: its warmup layers, then its timed ones, their timings gathered
// on rank 0; in the last repeat, the inter-node bytes of the step's first layer.
void time_step(RunInProgress& run, int rep, int t) {
  const DeckRun& dr = run.dr;
  const RunShape& shape = run.oc.shape;
  const bool last_rep = rep == shape.repeats - 1;
  if (shape.steps > 1) load_step_input(run, t);
  // V-major: the first steps with full communication, then selective.
  run.sel.transport->set_selective(t >= run.oc.c.full_steps);
  const TransportStats before = run.sel.transport->stats();
  bool first_layer = true;
  auto count_first_layer = [&] {
    if (!first_layer) return;
    first_layer = false;
    const TransportStats after = run.sel.transport->stats();
    if (last_rep) {
      run.rr.step_inter_bytes_sent[static_cast<size_t>(t)] =
          sum_over_ranks(after.inter_bytes_sent - before.inter_bytes_sent, run.oc.wd);
      run.rr.step_inter_bytes_full[static_cast<size_t>(t)] =
          sum_over_ranks(after.inter_bytes_full - before.inter_bytes_full, run.oc.wd);
    }
  };
  for (int w = 0; w < shape.warmup; ++w) {
    set_activity("starting a warmup layer");
    run.layer.enqueue_layer();
    dr.compute.synchronize();
    run.oc.progress.layer_done();
    count_first_layer();
  }
  std::vector<LayerTiming> times;
  for (int it = 0; it < shape.iterations; ++it) {
    run.pipe.poison_output();
    // Ranks start each timed layer together, so that a stage's time is the layer's own
    // and not one rank's host delay in launching it (which every transport would
    // otherwise pay as waiting in its first collective).
    set_activity("at the barrier before a timed layer");
    barrier_bounded(MPI_COMM_WORLD, run.oc.wd, run.layer_start, run.align_spin_s);
    set_activity("starting a timed layer");
    run.layer.enqueue_layer();
    run.rr.host_enqueue_ms.push_back(run.layer.last_enqueue_ms());
    run.rr.graph_replayed.push_back(run.layer.last_replayed() ? 1 : 0);
    dr.compute.synchronize();
    run.oc.progress.layer_done();
    times.push_back(run.pipe.last_timing());
    count_first_layer();
  }
  set_activity("gathering the timings");
  gather_timings(times, dr.world, rep, t * shape.iterations, run.rr, run.oc.wd);
  run.rr.timed_wall_end_s = wall_clock_s();
}

// Step t's output (last repeat): against the dense reference, and (approximate runs, or
// exact runs after the first) against the exact run's output of the step.
void check_step(RunInProgress& run, int t) {
  const DeckRun& dr = run.dr;
  OpenCase& oc = run.oc;
  const Case& c = oc.c;
  const size_t ts = static_cast<size_t>(t);
  if (t == oc.shape.steps - 1) corrupt_output_for_tests(*dr.be.device, run.pipe.output(), c.dtype, dr.rank);
  if (t == oc.shape.steps - 1) overreach_for_tests(*dr.be.device, dr.compute, run.pipe.output(), dr.rank);
  set_activity("checking parity");
  const Parity p = check_parity(*dr.be.device, run.pipe.output(), c.dtype, oc.refs[ts], oc.wd);
  run.rr.step_max_abs[ts] = p.max_abs;
  run.rr.step_rel_l2[ts] = p.rel_l2;
  run.worst.max_abs = std::max(run.worst.max_abs, p.max_abs);
  run.worst.rel_l2 = std::max(run.worst.rel_l2, p.rel_l2);
  run.worst.finite = run.worst.finite && p.finite;
  if (run.defines_exact) {
    oc.exact_out[run.sname][ts] = output_values(*dr.be.device, run.pipe.output(), c.dtype, oc.out_elems);
  } else if (run.exact) {
    const Parity e = check_parity(*dr.be.device, run.pipe.output(), c.dtype, (*run.exact)[ts], oc.wd);
    run.rr.step_vs_exact_max_abs[ts] = e.max_abs;
    run.rr.step_vs_exact_rel_l2[ts] = e.rel_l2;
    if (run.approx) run.vs_exact_pass = run.vs_exact_pass && e.finite && e.rel_l2 <= c.vmajor_tol_rel_l2;
  }
}

// Every layer of the run before the traced one: --mode model's warmups, or the timed
// repeats of every step, the last repeat's outputs checked.
void time_and_check_layers(RunInProgress& run) {
  const RunShape& shape = run.oc.shape;
  for (int w = 0; w < shape.model_warmup; ++w) {
    set_activity("starting a warmup layer");
    run.layer.enqueue_layer();
    run.dr.compute.synchronize();
  }
  if (shape.has_data) run.rr.timed_wall_start_s = wall_clock_s();
  for (int rep = 0; rep < shape.repeats; ++rep)
    for (int t = 0; t < shape.steps; ++t) {
      time_step(run, rep, t);
      if (rep == shape.repeats - 1) check_step(run, t);
    }
}

// Pass or fail: an approximate run is judged by its own tolerance and never counts as an
// exact pass; --mode model has no data and never passes.
void judge(RunInProgress& run) {
  const DeckRun& dr = run.dr;
  const Case& c = run.oc.c;
  RunResult& rr = run.rr;
  rr.parity_max_abs = run.worst.max_abs;
  rr.parity_rel_l2 = run.worst.rel_l2;
  rr.parity_finite = run.worst.finite;
  rr.attention = dr.be.attention_path();
  rr.parity_pass = !run.approx && run.worst.finite && run.worst.max_abs <= c.tol_max_abs &&
                   run.worst.rel_l2 <= c.tol_rel_l2;
  rr.approx_pass = run.approx && run.vs_exact_pass && run.worst.finite;
  if (run.oc.shape.has_data) {
    rr.output_digest =
        output_digest(*dr.be.device, run.pipe.output(), run.oc.out_elems * dtype_size(c.dtype), run.oc.wd);
  } else {
    rr.parity_computed = false;  // no data: never reported as passed
    rr.parity_pass = rr.approx_pass = false;
    rr.parity_max_abs = rr.parity_rel_l2 = std::nan("");
  }
}

// One more layer, traced (and modelled where a machine is loaded), after the output was
// checked; its times stay out of the timed statistics. In --mode model its modelled
// stages are the run's times.
void trace_layer(RunInProgress& run, const std::string& tname, const std::string& run_label) {
  const DeckRun& dr = run.dr;
  const bool model_mode = !run.oc.shape.has_data;
  RunResult& rr = run.rr;
  TracedLayerSetup ts;
  ts.machine = dr.machine;
  ts.measure = !model_mode;
  ts.watchdog_s = run.oc.wd;
  ts.barrier_label = "the start of the traced layer of " + tname + "/" + run_label;
  ts.spin_s = run.align_spin_s;
  // Modelled as the timed layers' median ran: replayed as graphs when most of them were (or,
  // in --mode model, when the GPU run would replay them), else op by op; the rule `model
  // validate` applies to the stored report.
  ts.issue = mostly_replayed(run.rr.graph_replayed) || run.modeled_as_replay ? model::Issue::kGraphReplay
                                                                              : model::Issue::kOpByOp;
  run_traced_layer(*dr.be.tracer, run.pipe, dr.compute, ts, model_mode, rr);
  if (!rr.machine.empty()) rr.modeled_as = ts.issue == model::Issue::kGraphReplay ? "graph replay" : "op by op";
  if (rr.machine.empty() && rr.model_note.empty()) rr.model_note = dr.machine_note;
  if (model_mode && dr.rank == 0) {
    rr.stage_ms = rr.modeled_stage_ms;
    rr.v_overlap_ms = rr.modeled_v_overlap_ms;
    rr.v_copy_ms = rr.modeled_v_copy_ms;
  }
}

// The run's counters and sizes: handshakes, caches, the split of tokens and heads, the
// bytes one rank sends.
void run_statistics(RunInProgress& run) {
  const DeckRun& dr = run.dr;
  const OpenCase& oc = run.oc;
  const Case& c = oc.c;
  const Layout& l = oc.l;
  RunResult& rr = run.rr;
  // No separate copy stream (nccl): nothing was overlapped or measured.
  if (std::all_of(rr.v_copy_ms.begin(), rr.v_copy_ms.end(), [](double v) { return v < 0; })) {
    rr.v_copy_ms.clear();
    rr.v_overlap_ms.clear();
  }
  TransportStats st = run.sel.transport->stats();
  rr.handshakes_per_layer = static_cast<int>(st.handshakes / std::max<int64_t>(1, oc.shape.layers()));
  rr.ulysses_nodes = oc.unodes.nodes();
  int64_t tokens = 0, heads = 0, most_tokens = 0, most_heads = 0;
  for (int r = 0; r < dr.world; ++r) {
    const Layout lr = make_layout(c, dr.world, r);
    rr.tokens_per_rank.push_back(lr.seq_local);
    rr.heads_per_rank.push_back(lr.heads_local);
    tokens += lr.seq_local;
    heads += lr.heads_local;
    most_tokens = std::max<int64_t>(most_tokens, lr.seq_local);
    most_heads = std::max<int64_t>(most_heads, lr.heads_local);
  }
  rr.token_imbalance = static_cast<double>(most_tokens) * dr.world / static_cast<double>(tokens);
  rr.head_imbalance = static_cast<double>(most_heads) * dr.world / static_cast<double>(heads);
  const TransportKind* used = find_transport_kind(run.sel.used);
  rr.hier_chunks = used && used->multi_node ? dr.opt.hier_chunks : 0;
  rr.cache_hits = st.cache_hits;
  rr.cache_misses = st.cache_misses;
  rr.cache_evictions = st.cache_evictions;
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t off_rank_heads = l.heads_tp - l.heads_local;
  rr.scatter_bytes_per_rank = 3 * l.batch * l.seq_local * off_rank_heads * l.head_dim * es;
  rr.gather_bytes_per_rank = l.batch * l.seq_local * off_rank_heads * l.head_dim * es;
}

// The run's console line: parity (or the approximate run's loss), the layer's median
// time and, where modelled, the modelled layer.
void print_run_line(const DeckRun& dr, const OpenCase& oc, const RunResult& rr, const std::string& tname,
                    const std::string& run_label) {
  const Case& c = oc.c;
  const int steps = oc.shape.steps;
  std::vector<double> layer_ms;
  for (size_t i = 0; i < rr.stage_ms.size(); i += kNumStages) layer_ms.push_back(rr.stage_ms[i + kStageLayer]);
  const double median = dr.rank == 0 ? percentile(layer_ms, 50) : 0.0;
  const std::string used_note = rr.transport_used == tname ? "" : "->" + rr.transport_used;
  double modeled_layer = 0;
  for (size_t i = 0; i < rr.modeled_stage_ms.size(); i += kNumStages)
    modeled_layer = std::max(modeled_layer, rr.modeled_stage_ms[i + kStageLayer]);
  char modeled_text[160] = "";
  if (!rr.machine.empty())
    std::snprintf(modeled_text, sizeof(modeled_text), "  modeled on %s: layer %.3f ms", rr.machine.c_str(),
                  modeled_layer);
  const char* time_kind = dr.mode == Mode::kGpu ? "measured" : "CPU time";
  if (!oc.shape.has_data) {
    dr.out.line("  %-24s %-5s%-6s %-14s parity not computed (model mode)%s\n", c.name.c_str(), tname.c_str(),
                used_note.c_str(), run_label.c_str(), modeled_text);
  } else if (rr.approximate) {
    double vs = 0;
    int64_t sent = 0, full = 0;
    for (int t = 0; t < steps; ++t) {
      vs = std::max(vs, rr.step_vs_exact_rel_l2[static_cast<size_t>(t)]);
      sent += rr.step_inter_bytes_sent[static_cast<size_t>(t)];
      full += rr.step_inter_bytes_full[static_cast<size_t>(t)];
    }
    dr.out.line("  %-24s %-5s%-6s %-14s approx %s (vs exact: rel_l2 <= %.2e, tolerance %.2e; inter-node bytes "
                "%.1f%% of full over %d steps)  layer median %.3f ms (%s)%s\n",
                c.name.c_str(), tname.c_str(), used_note.c_str(), run_label.c_str(), rr.approx_pass ? "PASS" : "FAIL",
                vs, c.vmajor_tol_rel_l2,
                full > 0 ? 100.0 * static_cast<double>(sent) / static_cast<double>(full) : 100.0, steps, median,
                time_kind, modeled_text);
  } else {
    dr.out.line("  %-24s %-5s%-6s %-14s parity %s (max_abs %.2e, rel_l2 %.2e)  layer median %.3f ms (%s)%s\n",
                c.name.c_str(), tname.c_str(), used_note.c_str(), run_label.c_str(), rr.parity_pass ? "PASS" : "FAIL",
                rr.parity_max_abs, rr.parity_rel_l2, median, time_kind, modeled_text);
  }
}

// Why this run's layers cannot be replayed as graphs ("": they can). In --mode model the
// layers are traced op by op whatever this says; it says whether the GPU run would replay
// them, and so how the traced layer is modelled (its collectives stand for NCCL there).
std::string graphs_why_not(const DeckRun& dr, const OpenCase& oc, const SelectedTransport& sel, const Transport& gather,
                           const std::string& ablation) {
  if (!dr.opt.graphs) return "--graphs off";
  if (ablation == "no-graphs") return "ablation no-graphs";
  if (std::string why = dr.be.device->graph_ineligible_reason(); !why.empty()) return "the device: " + why;
  if (std::string why = sel.transport->graph_ineligible_reason(); !why.empty()) return "the scatter: " + why;
  if (std::string why = gather.graph_ineligible_reason(); !why.empty()) return "the gather: " + why;
  if (oc.l.tp > 1)
    if (std::string why = oc.tcoll->graph_ineligible_reason(); !why.empty()) return "the TP all-reduce: " + why;
  return {};
}

void note_graphs(const GraphedLayer& layer, RunResult& rr) {
  rr.graphs = layer.mode();
  rr.graph_captures = layer.stats().captures;
  rr.graph_replays = layer.stats().replays;
  rr.graph_divergences = layer.stats().divergences;
  rr.graph_last_divergence = layer.stats().last_divergence;
  if (rr.graph_captures == 0 && !layer.stats().unsteady.empty())
    rr.graph_last_divergence = "never captured: every layer made " + layer.stats().unsteady;
}

// One run: transport `tname` under schedule `sname`, with `ablation` switched off ("":
// the full design).
RunResult run_one(const DeckRun& dr, OpenCase& oc, const std::string& tname, const std::string& sname,
                  const std::string& ablation) {
  const Case& c = oc.c;
  Schedule sched = make_schedule(sname, c.fused_qkv);
  const bool approx = !transport_is_exact(tname);
  set_activity("selecting the scatter transport");
  TransportSetup run_setup = oc.setup;
  run_setup.options = ablated(oc.setup.options, ablation);
  // Through the public API (include/ulysses_ipc), as an engine of one's own would.
  ulysses_ipc::Communicator scatter = ulysses_ipc::internal::open(tname, run_setup);
  const SelectedTransport& sel = ulysses_ipc::internal::selected(scatter);
  std::optional<ulysses_ipc::Communicator> own_gather;
  std::string gather_name;
  Transport* gather = open_gather(dr, oc, sel, own_gather, &gather_name);
  RunResult rr = new_run_result(dr, oc, tname, sname, ablation, sel, gather_name, sched.fused, approx);

  set_activity("building the layer pipeline");
  const std::string run_label = sname + (ablation.empty() ? "" : "+" + ablation);
  // On GPUs the ranks must leave a barrier together (polling, not napping); simulated
  // ranks share the CPU with their streams' workers and time nothing real.
  const double align_spin_s = dr.mode == Mode::kGpu ? 0.05 : 0.0;
  LayerPipeline pipe(*dr.be.device, *dr.be.kernels, c, oc.l, oc.data, sched, *sel.transport, *gather, oc.tcoll.get(),
                     dr.compute, pipeline_options(ablation, dr.opt.stage_timing));
  const std::string why_not = graphs_why_not(dr, oc, sel, *gather, ablation);
  GraphedLayer layer(*dr.be.tracer, pipe, dr.compute,
                     dr.mode == Mode::kModel ? "--mode model traces its layers op by op" : why_not);
  const bool defines_exact = !approx && oc.exact_out.count(sname) == 0;
  RunInProgress run{dr, oc, sel, pipe, layer, sname, approx, "the start of a timed layer of " + tname + "/" + run_label,
                    align_spin_s, rr, defines_exact, oc.exact_out.count(sname) ? &oc.exact_out[sname] : nullptr,
                    Parity{}, true};
  if (run.defines_exact) oc.exact_out[sname].resize(static_cast<size_t>(oc.shape.steps));
  run.modeled_as_replay = dr.mode == Mode::kModel && why_not.empty();

  time_and_check_layers(run);
  note_graphs(layer, rr);
  judge(run);
  trace_layer(run, tname, run_label);
  run_statistics(run);

  // Importers close before exporters free.
  dr.compute.synchronize();
  sel.transport->close_peer_mappings();
  if (own_gather) ulysses_ipc::internal::transport(*own_gather).close_peer_mappings();
  set_activity("at the barrier ending a run");
  barrier_bounded(MPI_COMM_WORLD, dr.be.device->watchdog_seconds(), "the end of run " + tname + "/" + run_label);
  print_run_line(dr, oc, rr, tname, run_label);
  return rr;
}

// --dump: rank 0's full tensors of the case, regenerated densely.
void add_dump(const Case& c, const std::vector<float>& full_ref, CaseResult& cr) {
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

}  // namespace

CaseResult run_case(const DeckRun& dr, const Case& c, const CpuEstimate& est, bool* all_pass) {
  dr.be.device->set_watchdog_seconds(dr.opt.watchdog_s > 0 ? dr.opt.watchdog_s : sim_watchdog_for(c.watchdog_s, est));
  CaseProgress progress(c, est, [&dr](const std::string& line) { dr.out.line("%s", line.c_str()); });
  OpenCase oc(dr, c, progress);
  CaseResult cr;
  cr.spec = c;
  for (const auto& tname : c.transports)
    for (const auto& [sname, ablation] : schedule_runs(c, dr.opt, tname)) {
      RunResult rr = run_one(dr, oc, tname, sname, ablation);
      *all_pass = *all_pass && (rr.approximate ? rr.approx_pass : rr.parity_pass);
      cr.runs.push_back(std::move(rr));
    }
  if (dr.opt.dump && dr.rank == 0) add_dump(c, oc.full_ref, cr);
  return cr;
}

}  // namespace uipc
