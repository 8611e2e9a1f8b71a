// The discrete-event simulator (model/simulator.hpp): fluid rates between events, so a
// resource shared by several ops changes every sharer's rate at the instant one starts
// or ends. Only stream heads and running ops are visited per event.
#include "model/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "base/error.hpp"

namespace uipc::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-12;  // ms: times closer than this are the same instant

// The machine in the units the simulator works in: ms, bytes per ms, flops per ms.
struct Rates {
  int sm_count, gpus_per_node, gpus;
  double gemm, attention_scale, norm, stream, sm_copy, copy_engine, link, nic;  // per ms
  double kernel_lat, copy_lat, hop, work_hop, event_record, memop, link_lat, nic_lat, nccl_lat;  // ms
  double host_launch, host_gemm, host_attention, host_nccl, host_copy, host_api, skew;  // ms
  double host_alloc, host_export, host_import, host_unmap, host_close_export;  // ms
  double host_free_per_byte;  // ms per byte freed
  double sm_copy_share, kernel_share, ipc_factor, nccl_link, nccl_nic, nccl_peer, fp32_out, spread, peer_beside_gemm;
  double copy_behind_gemm;
  int engines;
  bool peer_on_sm;
  const Machine* m;

  // A GPU's own measured costs (Machine::device), ms: each kind's least time in all (0: none),
  // a same-device copy's fixed cost and NCCL's at one rank.
  double floor_gemm = 0, floor_norm = 0, floor_attention = 0, floor_convert = 0, floor_copy = 0;
  double local_copy_lat, nccl_self_lat;

  explicit Rates(const Machine& mc, Issue issue = Issue::kOpByOp) : m(&mc) {
    auto us = [&](const char* n) { return mc.p(n) * 1e-3; };
    auto gbs = [&](const char* n) { return mc.p(n) * 1e6; };  // GB/s -> bytes per ms
    sm_count = static_cast<int>(mc.p("sm_count"));
    gpus_per_node = mc.gpus_per_node;
    gpus = mc.gpus_per_node * mc.nodes;
    gemm = mc.p("gemm_tflops") * 1e9;
    attention_scale = mc.p("attention_scale");
    norm = gbs("norm_rope_gbs");
    stream = gbs("stream_gbs");
    sm_copy = gbs("sm_copy_gbs");
    copy_engine = gbs("copy_engine_gbs");
    link = gbs("link_gbs");
    nic = gbs("nic_gbs");
    kernel_lat = us("kernel_latency_us");
    copy_lat = us("copy_latency_us");
    hop = us("event_hop_us");
    work_hop = us("work_event_hop_us");
    event_record = us("event_record_us");
    memop = us("memop_latency_us");
    link_lat = us("link_latency_us");
    nic_lat = us("nic_latency_us");
    nccl_lat = us("nccl_latency_us");
    host_launch = us("host_launch_us");
    host_gemm = us("host_gemm_us");
    host_attention = us("host_attention_us");
    host_nccl = us("host_nccl_us");
    host_copy = us("host_copy_us");
    host_api = us("host_api_us");
    host_alloc = us("host_alloc_us");
    host_export = us("host_export_us");
    host_import = us("host_import_us");
    host_unmap = us("host_unmap_us");
    host_close_export = us("host_close_export_us");
    host_free_per_byte = us("host_free_us_per_mib") / (1024.0 * 1024.0);
    skew = us("start_skew_us");
    sm_copy_share = mc.p("sm_copy_share");
    kernel_share = mc.p("kernel_share_beside_copy");
    ipc_factor = mc.p("ipc_mapping_factor");
    nccl_link = mc.p("nccl_link_fraction");
    nccl_nic = mc.p("nccl_nic_fraction");
    nccl_peer = gbs("nccl_peer_gbs");
    fp32_out = mc.p("gemm_fp32_out_factor");
    spread = mc.p("gpu_speed_spread");
    peer_beside_gemm = mc.p("peer_copy_share_beside_gemm");
    copy_behind_gemm = mc.p("sm_copy_share_behind_gemm");
    engines = static_cast<int>(mc.p("copy_engines"));
    peer_on_sm = mc.p("peer_copy_on_sm") >= 0.5;
    local_copy_lat = copy_lat;
    nccl_self_lat = nccl_lat;
    if (!mc.device.empty()) own_device_costs(mc.device, issue == Issue::kGraphReplay);
  }

  // What the bench measured on this GPU stands for the machine's fitted device costs
  // (model/machine.hpp, DeviceCosts): each figure as the layer was issued.
  void own_device_costs(const DeviceCosts& d, bool graph) {
    auto ms = [&](const IssueCost& c) { return c.at(graph) * 1e-3; };
    if (ms(d.empty_kernel) > 0) kernel_lat = local_copy_lat = ms(d.empty_kernel);
    if (ms(d.record_after_work) > 0) event_record = ms(d.record_after_work);
    if (ms(d.memop) > 0) memop = ms(d.memop);
    if (ms(d.nccl_one_rank) > 0) nccl_self_lat = std::max(0.0, ms(d.nccl_one_rank) - 2 * d.nccl_one_rank_bytes / stream);
    floor_gemm = ms(d.gemm);
    floor_norm = ms(d.norm_rope);
    floor_attention = ms(d.attention);
    floor_convert = ms(d.convert);
    floor_copy = ms(d.copy);
  }
  // The least time in all the bench measured for an op of this kind (0: none).
  double floor_of(const Op& op, bool local_copy) const {
    if (op.kind == OpKind::kCopy) return local_copy ? floor_copy : 0.0;
    if (op.kind != OpKind::kKernel) return 0.0;
    switch (op.kernel) {
      case KernelKind::kGemm: return floor_gemm;
      case KernelKind::kNormRope: return floor_norm;
      case KernelKind::kAttention: return floor_attention;
      case KernelKind::kConvert: return floor_convert;
      case KernelKind::kNone: return 0.0;
    }
    return 0.0;
  }
  int node_of(int gpu) const { return gpu / gpus_per_node; }
};

// Fraction of the GPU's SMs busy on average over the waves of `tiles` equal tiles.
double wave_efficiency(double tiles, int sm_count) {
  if (tiles <= 0) return 1.0;
  const double waves = std::ceil(tiles / sm_count);
  return tiles / (waves * sm_count);
}

// A GEMM's share of the SMs over its waves: 128x256 output tiles while they fill at
// least one wave; a GEMM too small to fill one (the latency floor's 256 x 512) is tiled
// finer by cuBLAS's heuristics (64x64 tiles, at most one wave), not left on a few SMs:
// 4 tiles of 128x256 on 132 SMs would model a 0.13 GFLOP GEMM at 6 us, where the
// measured layer has about that for the whole GEMM with its launch.
double gemm_wave_efficiency(int64_t m, int64_t n, int sm_count) {
  const double big = std::ceil(m / 128.0) * std::ceil(n / 256.0);
  if (big >= sm_count) return wave_efficiency(big, sm_count);
  const double small = std::ceil(m / 64.0) * std::ceil(n / 64.0);
  return std::max(big / sm_count, std::min(1.0, small / sm_count));
}

double attention_tiles(int64_t batch, int64_t heads, int64_t seq) {
  return static_cast<double>(batch) * static_cast<double>(heads) * std::ceil(static_cast<double>(seq) / 128.0);
}

// A measured curve of (log x, rate) points, sorted here: the rate at log x, linear
// between points, flat beyond the ends.
double interp_log(std::vector<std::pair<double, double>> curve, double x) {
  std::sort(curve.begin(), curve.end());
  if (x <= curve.front().first) return curve.front().second;
  if (x >= curve.back().first) return curve.back().second;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (x <= curve[i].first) {
      const double w = (x - curve[i - 1].first) / std::max(kEps, curve[i].first - curve[i - 1].first);
      return curve[i - 1].second + w * (curve[i].second - curve[i - 1].second);
    }
  }
  return curve.back().second;
}

// Attention rate (flops per ms) for a shape: the profile's points of the nearest
// head_dim, each with its own wave quantisation taken out (points of one seq, several
// head counts, averaged), interpolated in log(seq) (flat beyond the ends), then the
// shape's own quantisation put back.
double attention_rate(const Rates& r, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const auto& pts = r.m->attention;
  int64_t best = -1;
  for (const auto& p : pts) {
    const int64_t d = std::llabs(p.head_dim - head_dim);
    if (best < 0 || d < best) best = d;
  }
  std::vector<std::pair<double, double>> curve;  // (log seq, normalised TFLOP/s)
  for (const auto& p : pts) {
    if (std::llabs(p.head_dim - head_dim) != best) continue;
    curve.emplace_back(std::log(static_cast<double>(p.seq)),
                       p.tflops / wave_efficiency(attention_tiles(p.batch, p.heads, p.seq), r.sm_count));
  }
  std::sort(curve.begin(), curve.end());
  std::vector<std::pair<double, double>> merged;  // one point per seq: the mean
  for (size_t i = 0; i < curve.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < curve.size() && curve[j].first == curve[i].first; ++j) sum += curve[j].second;
    merged.emplace_back(curve[i].first, sum / static_cast<double>(j - i));
    i = j;
  }
  curve = std::move(merged);
  const double tf = interp_log(std::move(curve), std::log(static_cast<double>(std::max<int64_t>(seq, 1))));
  return tf * 1e9 * r.attention_scale * wave_efficiency(attention_tiles(batch, heads, seq), r.sm_count);
}

// A bf16 GEMM's rate (flops per ms) for a shape. With a GEMM profile: its points of the
// nearest (K, N) (log distance), each with its own wave quantisation taken out,
// interpolated in log(M), then the shape's quantisation put back; else gemm_tflops at the
// shape's quantisation.
double gemm_rate(const Rates& r, int64_t m, int64_t n, int64_t k) {
  const auto& pts = r.m->gemm;
  if (pts.empty()) return r.gemm * gemm_wave_efficiency(m, n, r.sm_count);
  auto dist = [&](const GemmPoint& p) {
    return std::fabs(std::log(static_cast<double>(p.k) / static_cast<double>(std::max<int64_t>(k, 1)))) +
           std::fabs(std::log(static_cast<double>(p.n) / static_cast<double>(std::max<int64_t>(n, 1))));
  };
  double best = kInf;
  for (const auto& p : pts) best = std::min(best, dist(p));
  std::vector<std::pair<double, double>> curve;  // (log M, normalised TFLOP/s)
  for (const auto& p : pts) {
    if (dist(p) > best + 1e-12) continue;
    curve.emplace_back(std::log(static_cast<double>(p.m)), p.tflops / gemm_wave_efficiency(p.m, p.n, r.sm_count));
  }
  const double tf = interp_log(std::move(curve), std::log(static_cast<double>(std::max<int64_t>(m, 1))));
  return tf * 1e9 * gemm_wave_efficiency(m, n, r.sm_count);
}

// Bytes per ms of a norm+RoPE kernel: the profile's point of its norm kind and dtype with
// the nearest head_dim, else the machine's one rate (no profile, or an older trace).
double norm_rope_rate(const Rates& r, const Op& op) {
  const int kind = norm_rope_kind(op.dims[3]), dtype = norm_rope_dtype(op.dims[3]);
  if (kind < 0 || kind > 3 || dtype < 0 || dtype > 2) return r.norm;
  const NormRopePoint* best = nullptr;
  for (const NormRopePoint& p : r.m->norm_rope) {
    if (p.norm != kNormKindNames[kind] || p.dtype != kDTypeNames[dtype]) continue;
    if (!best || std::llabs(p.head_dim - op.dims[2]) < std::llabs(best->head_dim - op.dims[2])) best = &p;
  }
  return best ? best->gbs * 1e6 : r.norm;
}

// Work of a kernel or local copy in ms of its standalone time (after its latency).
double sm_work_ms(const Op& op, const Rates& r) {
  switch (op.kind) {
    case OpKind::kKernel:
      switch (op.kernel) {
        case KernelKind::kGemm:
          return op.flops / (gemm_rate(r, op.dims[0], op.dims[1], op.dims[2]) * (op.dims[3] == 4 ? r.fp32_out : 1.0));
        case KernelKind::kAttention:
          return op.flops / attention_rate(r, op.dims[0], op.dims[1], op.dims[2], op.dims[3]);
        case KernelKind::kNormRope: return op.bytes / norm_rope_rate(r, op);
        case KernelKind::kConvert:
        case KernelKind::kNone: return op.bytes / r.stream;
      }
      return 0;
    case OpKind::kMemset: return op.bytes / r.stream;
    case OpKind::kCopy: return 2 * op.bytes / r.sm_copy;  // read and write
    default: return 0;
  }
}

enum class State { kPending, kBlocked, kLatency, kEngineWait, kWorking, kDone };
enum class Work { kNone, kSm, kFlow };

struct SimOp {
  const Op* op = nullptr;
  int rank = 0, index = 0;
  double issue = kInf;
  State state = State::kPending;
  double start = 0, end = 0;
  double phase_end = 0;      // end of the fixed latency (or of a resolved wait / collective)
  Work work = Work::kNone;
  bool sm_copy = false;      // takes part in SM sharing as a copy
  bool needs_engine = false;
  int src_gpu = 0, dst_gpu = 0;
  double remaining = 0;      // kSm: standalone ms; kFlow: bytes
  double cap = 0;            // kFlow: most bytes per ms it can move
  double rate = 0;           // per ms
  double engine_request = 0; // when it asked for a copy engine
  double work_start = 0;     // when its work phase began
  bool counted = false;      // a wait already counted as satisfied before the trace
};

struct WordKey {
  uint64_t mem, offset;
  int private_rank;  // -1 for exported memory, else the rank whose private word it is
  bool operator<(const WordKey& o) const {
    return std::tie(mem, offset, private_rank) < std::tie(o.mem, o.offset, o.private_rank);
  }
};

struct WordWrite {
  double visible;
  uint64_t value;
};

class Simulation {
 public:
  Simulation(const std::vector<RankTrace>& traces, const Machine& m, Issue issue)
      : tr_(traces), r_(m, issue), issue_(issue) {
    const int world = static_cast<int>(traces.size());
    if (world == 0) throw InputError("simulate: no traces");
    if (world > r_.gpus)
      throw InputError("machine '" + m.name + "' has " + std::to_string(r_.gpus) + " GPU(s) (" +
                       std::to_string(m.nodes) + " node(s) x " + std::to_string(m.gpus_per_node) + "); the traces have " +
                       std::to_string(world) + " ranks");
    for (int rk = 0; rk < world; ++rk) {
      if (traces[rk].rank != rk || traces[rk].world != world)
        throw InputError("simulate: trace " + std::to_string(rk) + " is rank " + std::to_string(traces[rk].rank) +
                         " of " + std::to_string(traces[rk].world) + "; expected rank " + std::to_string(rk) + " of " +
                         std::to_string(world));
      for (uint64_t e : traces[rk].exported) {
        auto ins = owner_.emplace(e, rk);
        if (!ins.second && ins.first->second != rk)
          throw InputError("simulate: memory id " + std::to_string(e) + " is exported by ranks " +
                           std::to_string(ins.first->second) + " and " + std::to_string(rk) +
                           " (ambiguous memory identity)");
      }
    }
    for (int rk = 0; rk < world; ++rk)
      for (const WordValue& p : traces[rk].prior_writes) {
        const WordKey w = p.mem == 0 ? WordKey{0, p.offset, rk} : WordKey{p.mem, p.offset, -1};
        words_[w].push_back({-kInf, p.value});
      }
    ops_.resize(world);
    behind_work_.resize(world);
    record_cost_.resize(world);
    stream_ops_.resize(world);
    heads_.resize(world);
    host_next_.assign(world, 0);
    launched_.assign(world, false);
    host_clock_.resize(world);
    for (int rk = 0; rk < world; ++rk) {
      const RankTrace& t = traces[rk];
      host_clock_[rk] = world > 1 ? r_.skew * rk / (world - 1) : 0.0;
      ops_[rk].resize(t.ops.size());
      total_ += t.ops.size();
      stream_ops_[rk].resize(t.streams.size());
      heads_[rk].assign(t.streams.size(), 0);
      // Which event records sit behind device work: the last op before them on their
      // stream, records aside, is a kernel, copy, memset or collective.
      // And which timed records come right after device work (no timed record between):
      // those hold their stream event_record_us. An ordering record (dims[0] 1) is an edge
      // of a graph, no node: it holds nothing and does not stand between the work before it
      // and a timed record after it (bench_kernels' graph rows: an ordering record after a
      // kernel adds 0.00 us).
      behind_work_[rk].assign(t.ops.size(), false);
      record_cost_[rk].assign(t.ops.size(), false);
      std::vector<bool> work_last(t.streams.size(), false), right_after(t.streams.size(), false);
      for (size_t i = 0; i < t.ops.size(); ++i) {
        const Op& o = t.ops[i];
        if (o.stream < 0 || o.stream >= static_cast<int>(t.streams.size())) continue;
        if (o.kind == OpKind::kEventRecord) {
          const bool ordering = o.dims[0] == 1;
          behind_work_[rk][i] = work_last[o.stream];
          record_cost_[rk][i] = right_after[o.stream] && !ordering;
          if (!ordering) right_after[o.stream] = false;
        } else {
          work_last[o.stream] = o.kind == OpKind::kKernel || o.kind == OpKind::kCopy || o.kind == OpKind::kMemset ||
                                o.kind == OpKind::kCollective;
          right_after[o.stream] = work_last[o.stream];
        }
      }
      for (size_t i = 0; i < t.ops.size(); ++i) {
        SimOp& s = ops_[rk][i];
        s.op = &t.ops[i];
        s.rank = rk;
        s.index = static_cast<int>(i);
        if (s.op->stream >= 0) stream_ops_[rk][s.op->stream].push_back(static_cast<int>(i));
        classify(s);
        if (s.op->kind == OpKind::kCollective) {
          const auto& members = t.groups[s.op->group];
          if (std::find(members.begin(), members.end(), rk) == members.end())
            throw InputError("simulate: rank " + std::to_string(rk) + " calls a collective of a group it is not in");
          collectives_[{members, s.op->sequence}].push_back({rk, static_cast<int>(i)});
        }
      }
    }
    for (auto& [key, calls] : collectives_) {
      if (calls.size() != key.first.size()) {
        std::ostringstream msg;
        msg << "simulate: collective #" << key.second << " of the group {";
        for (size_t i = 0; i < key.first.size(); ++i) msg << (i ? "," : "") << key.first[i];
        msg << "} was called by " << calls.size() << " of its " << key.first.size() << " ranks";
        throw InputError(msg.str());
      }
      for (const auto& [rk, i] : calls) {
        const Op& a = *ops_[rk][i].op;
        const Op& b = *ops_[calls[0].first][calls[0].second].op;
        // A grouped send/recv moves what each member says; the others must agree in size.
        if (a.collective != b.collective || (a.collective != CollectiveKind::kSendRecv && a.bytes != b.bytes))
          throw InputError("simulate: collective #" + std::to_string(key.second) +
                           " differs between ranks (kind or size)");
      }
    }
  }

  Timeline run() {
    double t = 0;
    for (;;) {
      bool changed = true;
      while (changed) {
        changed = false;
        for (size_t rk = 0; rk < ops_.size(); ++rk) changed |= advance_host(static_cast<int>(rk));
        for (size_t rk = 0; rk < ops_.size(); ++rk)
          for (size_t s = 0; s < stream_ops_[rk].size(); ++s) changed |= advance_stream(static_cast<int>(rk), s, t);
        changed |= grant_engines(t);
      }
      if (all_done()) break;
      compute_rates();
      double next = kInf;
      for (size_t rk = 0; rk < ops_.size(); ++rk)
        for (size_t s = 0; s < stream_ops_[rk].size(); ++s) {
          SimOp* h = head(static_cast<int>(rk), s);
          if (!h) continue;
          if (h->state == State::kPending && h->issue > t) next = std::min(next, h->issue);
          if ((h->state == State::kLatency || h->state == State::kBlocked) && h->phase_end > t)
            next = std::min(next, h->phase_end);
          if (h->state == State::kWorking && h->rate > 0) next = std::min(next, t + h->remaining / h->rate);
        }
      if (!(next < kInf)) throw RuntimeError(stuck_message());
      const double dt = next - t;
      for (SimOp* w : working_) w->remaining = std::max(0.0, w->remaining - w->rate * dt);
      t = next;
      for (SimOp* w : working_)
        if (w->remaining <= w->rate * kEps + 1e-9 * std::max(1.0, w->cap)) w->remaining = 0;
    }
    Timeline tl;
    tl.ranks.resize(ops_.size());
    for (size_t rk = 0; rk < ops_.size(); ++rk)
      for (const SimOp& s : ops_[rk]) tl.ranks[rk].push_back({s.start, s.end});
    tl.waits_before_trace = waits_before_trace_;
    return tl;
  }

 private:
  using CollectiveKey = std::pair<std::vector<int>, int64_t>;

  int owner_of(uint64_t mem, int rank) const {
    if (mem == 0) return rank;
    auto it = owner_.find(mem);
    if (it == owner_.end())
      throw InputError("simulate: rank " + std::to_string(rank) + " reaches memory id " + std::to_string(mem) +
                       " that no rank exported");
    return it->second;
  }

  WordKey word_of(const Op& op, int rank) const {
    return op.word_mem == 0 ? WordKey{0, op.word_offset, rank} : WordKey{op.word_mem, op.word_offset, -1};
  }

  void classify(SimOp& s) {
    const Op& op = *s.op;
    switch (op.kind) {
      case OpKind::kKernel:
      case OpKind::kMemset:
        s.work = Work::kSm;
        s.remaining = sm_work_ms(op, r_) * speed_factor(s.rank);
        break;
      case OpKind::kCopy: {
        s.src_gpu = owner_of(op.src_mem, s.rank);
        s.dst_gpu = owner_of(op.dst_mem, s.rank);
        if (s.src_gpu == s.dst_gpu) {
          s.work = Work::kSm;
          s.sm_copy = true;
          s.remaining = sm_work_ms(op, r_);
          break;
        }
        if (r_.node_of(s.src_gpu) != r_.node_of(s.dst_gpu))
          throw InputError("simulate: rank " + std::to_string(s.rank) + " copies between GPUs " +
                           std::to_string(s.src_gpu) + " and " + std::to_string(s.dst_gpu) + ", which machine '" +
                           r_.m->name + "' puts on different nodes: a mapped copy cannot cross nodes");
        s.work = Work::kFlow;
        s.remaining = op.bytes;
        s.cap = r_.link;
        if (op.src_via == Via::kIpcHandle || op.dst_via == Via::kIpcHandle) s.cap *= r_.ipc_factor;
        if (r_.peer_on_sm) {
          s.sm_copy = true;
        } else {
          s.needs_engine = true;
          s.cap = std::min(s.cap, r_.copy_engine);
        }
        break;
      }
      default:
        break;
    }
  }

  // GPUs are not alike: rank r's kernels take 1 + spread r / (world - 1) as long.
  double speed_factor(int rank) const {
    const size_t w = tr_.size();
    return w > 1 ? 1.0 + r_.spread * rank / static_cast<double>(w - 1) : 1.0;
  }

  double host_cost(const Op& op) const {
    // A replayed graph: one launch call (its first op's), nothing between the rest.
    if (issue_ == Issue::kGraphReplay) return 0.0;
    // Each kind of call costs the host its own: a library call (cuBLASLt, cuDNN, NCCL)
    // does work before its launch that a plain kernel launch does not. A near-empty layer
    // is bound by these: the GPU runs each op faster than the host issues the next.
    switch (op.kind) {
      case OpKind::kKernel:
        return op.kernel == KernelKind::kGemm ? r_.host_gemm
               : op.kernel == KernelKind::kAttention ? r_.host_attention
                                                     : r_.host_launch;
      case OpKind::kCollective: return r_.host_nccl;
      case OpKind::kCopy: return op.dims[2] > 0 ? 0.0 : r_.host_copy;  // a batch is issued once
      case OpKind::kMemset: return r_.host_copy;
      default: return r_.host_api;
    }
  }

  // A memory-management call (kHostCall) holds the host for its measured time, issued op
  // by op or not (a graph cannot hold one: the layer that makes it runs op by op). What
  // bench_kernels did not time on its own costs what any API call does (docs/model.md).
  double host_call_cost(const Op& op) const {
    switch (static_cast<HostCall>(op.dims[0])) {
      case HostCall::kAllocRuntime:
      case HostCall::kAllocVmm: return r_.host_alloc;
      case HostCall::kExportFd: return r_.host_export;
      case HostCall::kImportFd: return r_.host_import;
      case HostCall::kFreeRuntime:
      case HostCall::kFreeVmm: return r_.host_unmap + r_.host_free_per_byte * op.bytes;
      case HostCall::kCloseFd: return r_.host_unmap;
      case HostCall::kCloseExport: return r_.host_close_export;
      default: return r_.host_api;  // the IPC handle's export, open and close
    }
  }

  // Issues this rank's ops in order until a host sync whose op is not done.
  bool advance_host(int rk) {
    bool changed = false;
    auto& ops = ops_[rk];
    while (host_next_[rk] < ops.size()) {
      SimOp& s = ops[host_next_[rk]];
      if (s.op->kind == OpKind::kHostSync) {
        double ready = host_clock_[rk];
        if (s.op->waits_for != kNoOp) {
          const SimOp& target = ops[s.op->waits_for];
          if (target.state != State::kDone) break;
          ready = std::max(ready, target.end);
        }
        s.start = host_clock_[rk];
        host_clock_[rk] = ready + r_.host_api;
        s.end = host_clock_[rk];
        s.issue = s.start;
        s.state = State::kDone;
        ++done_;
      } else if (s.op->kind == OpKind::kHostCall) {
        s.start = s.issue = host_clock_[rk];
        host_clock_[rk] += host_call_cost(*s.op);
        s.end = host_clock_[rk];
        s.state = State::kDone;
        ++done_;
      } else {
        const bool launch = issue_ == Issue::kGraphReplay && !launched_[rk];
        host_clock_[rk] += launch ? r_.host_api : host_cost(*s.op);
        if (launch) launched_[rk] = true;
        s.issue = host_clock_[rk];
      }
      ++host_next_[rk];
      changed = true;
    }
    return changed;
  }

  SimOp* head(int rk, size_t s) {
    auto& list = stream_ops_[rk][s];
    size_t& h = heads_[rk][s];
    while (h < list.size() && ops_[rk][list[h]].state == State::kDone) ++h;
    return h < list.size() ? &ops_[rk][list[h]] : nullptr;
  }

  void finish(SimOp& s, double t) {
    s.state = State::kDone;
    ++done_;
    s.end = t;
    if (s.op->kind == OpKind::kWriteValue) {
      const WordKey w = word_of(*s.op, s.rank);
      const int owner = w.private_rank >= 0 ? w.private_rank : owner_of(w.mem, s.rank);
      const double lat = owner == s.rank ? 0.0 : (r_.node_of(owner) == r_.node_of(s.rank) ? r_.link_lat : r_.nic_lat);
      words_[w].push_back({t + lat, s.op->value});
    }
    if (s.needs_engine) ++engines_released_[s.rank];
    working_.erase(std::remove(working_.begin(), working_.end(), &s), working_.end());
  }

  // When the wait can end (kInf: not yet known); counts waits satisfied before the trace.
  double wait_resolution(SimOp& s) {
    const Op& op = *s.op;
    if (op.kind == OpKind::kStreamWaitEvent) {
      if (op.waits_for == kNoOp) return s.start;
      const SimOp& target = ops_[s.rank][op.waits_for];
      if (target.state != State::kDone) return kInf;
      if (target.op->stream == op.stream) return std::max(s.start, target.end);
      // An event recorded behind a kernel or copy reaches a stream waiting on it later than
      // one recorded behind a stream wait (measured op by op on one H200, scripts/model_wake.py:
      // 6.4-21.7 us against 1.2-1.3 us, timed events all; bench_kernels' hop of 1.52 us is the
      // latter kind). Not an ordering event waited on op by op: created without timing
      // (cudaEventDisableTiming: "the best performance when used with cudaStreamWaitEvent",
      // CUDA Runtime API), it takes the plain hop behind work too: the one-H200 FLUX layers at
      // Ulysses1 of 9d2ed1a measured such a hop, a memory-op write and wait and a hop back at
      // 7-8 us op by op, against 11-12 us replayed as a graph (there the record is an edge).
      const bool ordering = target.op->dims[0] == 1;
      const bool slow = behind_work_[s.rank][op.waits_for] && !(ordering && issue_ == Issue::kOpByOp);
      return std::max(s.start, target.end + (slow ? std::max(r_.hop, r_.work_hop) : r_.hop));
    }
    if (op.kind == OpKind::kWaitValue) {
      // Words start at 0; then each write (before the trace or in it) raises them.
      if (op.value == 0) return s.start + r_.memop;
      double best = kInf;
      auto it = words_.find(word_of(op, s.rank));
      if (it != words_.end())
        for (const WordWrite& ww : it->second)
          if (ww.value >= op.value) best = std::min(best, ww.visible);
      if (best == -kInf && !s.counted) {
        ++waits_before_trace_;
        s.counted = true;
      }
      return best < kInf ? std::max(s.start, best) + r_.memop : kInf;
    }
    return kInf;
  }

  // A collective whose every call has arrived: all end together.
  void try_collective(SimOp& s) {
    const auto& members = tr_[s.rank].groups[s.op->group];
    auto& calls = collectives_.at({members, s.op->sequence});
    double begin = 0;
    for (const auto& [rk, i] : calls) {
      const SimOp& c = ops_[rk][i];
      if (c.state != State::kBlocked) return;
      begin = std::max(begin, c.start);
    }
    double bytes = 0;  // a send/recv lasts as long as its largest sender's share
    for (const auto& [rk, i] : calls) bytes = std::max(bytes, ops_[rk][i].op->bytes);
    Op sized = *s.op;
    sized.bytes = bytes;
    const double end = begin + collective_ms(sized, members);
    for (const auto& [rk, i] : calls) {
      ops_[rk][i].state = State::kLatency;
      ops_[rk][i].phase_end = end;
    }
  }

  // NCCL inside a node: each peer gets its own channels (nccl_peer_gbs of them together),
  // so a rank sending to k peers reaches min(k x peer rate, the link's NCCL ceiling); a
  // ring all-reduce runs every channel to one neighbour and reaches the ceiling. Across
  // nodes the rank's one NIC is the bottleneck (NCCL does not aggregate NICs in an
  // all-to-all). Public anchors and the fit: docs/model.md, "NCCL as it scales".
  double nvlink_rate(int peers) const { return std::min(peers * r_.nccl_peer, r_.link * r_.nccl_link); }

  double collective_ms(const Op& op, const std::vector<int>& members) const {
    const double p = static_cast<double>(members.size());
    // The chunk a rank sends itself is one contiguous device-to-device copy (NCCL's own
    // send/recv to self): at the streaming rate, not the strided 2-D copy's (measured op by
    // op on one H200: a one-rank all-to-all of 311 MB in 148 us, 4.2 TB/s read+write).
    if (members.size() <= 1) return r_.nccl_self_lat + (op.collective == CollectiveKind::kAllToAll ? 2 * op.bytes / r_.stream : 0);
    bool cross = false;
    for (int a : members)
      for (int b : members) cross = cross || r_.node_of(a) != r_.node_of(b);
    const double lat = r_.nccl_lat + (cross ? r_.nic_lat : 0.0);
    const double nic = r_.nic * r_.nccl_nic;
    if (op.collective == CollectiveKind::kSendRecv) return lat + op.bytes / (cross ? nic : nvlink_rate(1));
    if (op.collective == CollectiveKind::kAllToAll) {
      double worst = 2 * op.bytes / r_.stream;  // the chunk to itself, one contiguous copy alongside
      for (int a : members) {
        int local = 0, remote = 0;
        for (int b : members) {
          if (a == b) continue;
          ++(r_.node_of(a) == r_.node_of(b) ? local : remote);
        }
        if (local > 0) worst = std::max(worst, local * op.bytes / nvlink_rate(local));
        if (remote > 0) worst = std::max(worst, remote * op.bytes / nic);
      }
      return lat + worst;
    }
    // All-reduce as a ring: every rank sends 2 (p-1)/p of the buffer over the ring's slowest hop.
    const double bw = cross ? nic : r_.link * r_.nccl_link;
    return lat + 2 * (p - 1) / p * op.bytes / bw;
  }

  // A kernel's or copy's fixed cost before its work: the machine's latency; where the GPU's
  // own costs give a least time for its kind, at least that less the op's own work.
  double fixed_cost(const SimOp& s) const {
    const Op& op = *s.op;
    const bool local = op.kind == OpKind::kCopy && s.src_gpu == s.dst_gpu;
    const double lat = op.kind != OpKind::kCopy ? r_.kernel_lat : local ? r_.local_copy_lat : r_.copy_lat;
    const double least = r_.floor_of(op, local);
    return least > 0 ? std::max(lat, least - s.remaining) : lat;
  }

  bool advance_stream(int rk, size_t sidx, double t) {
    SimOp* h = head(rk, sidx);
    if (!h) return false;
    SimOp& s = *h;
    switch (s.state) {
      case State::kPending: {
        if (s.issue > t + kEps) return false;
        s.start = t;
        switch (s.op->kind) {
          case OpKind::kEventRecord:
            // A timed record right after device work holds its stream event_record_us
            // (bench_kernels' graph rows: a kernel then a record, 2.2 us more than the
            // kernel in a graph, 2.0 op by op); an ordering one (dims[0] 1) is an edge of a
            // graph, taken as free op by op too; a record behind a wait or a record, free
            // (an event hop, a record and a wait, takes 1.6 us in all).
            if (!record_cost_[s.rank][s.index] || r_.event_record <= 0) {
              finish(s, t);
              return true;
            }
            s.state = State::kLatency;
            s.phase_end = t + r_.event_record;
            break;
          case OpKind::kStreamWaitEvent:
          case OpKind::kWaitValue:
          case OpKind::kCollective:
            s.state = State::kBlocked;
            s.phase_end = kInf;
            break;
          case OpKind::kWriteValue:
            s.state = State::kLatency;
            s.phase_end = t + r_.memop;
            break;
          case OpKind::kKernel:
          case OpKind::kMemset:
          case OpKind::kCopy:
            s.state = State::kLatency;
            s.phase_end = t + fixed_cost(s);
            break;
          case OpKind::kHostSync:
          case OpKind::kHostCall:
            break;  // host-only, never on a stream
        }
        return true;
      }
      case State::kBlocked: {
        if (s.op->kind == OpKind::kCollective) {
          try_collective(s);
          return s.state != State::kBlocked;
        }
        const double at = wait_resolution(s);
        s.phase_end = at;
        if (at <= t + kEps) {
          finish(s, t);
          return true;
        }
        return false;
      }
      case State::kLatency: {
        if (s.phase_end > t + kEps) return false;
        if (s.work == Work::kNone || s.remaining <= 0) {
          finish(s, t);
          return true;
        }
        if (s.needs_engine) {
          s.state = State::kEngineWait;
          s.engine_request = t;
          waiting_engine_.push_back(&s);
        } else {
          s.state = State::kWorking;
          s.work_start = t;
          working_.push_back(&s);
        }
        return true;
      }
      case State::kEngineWait:
        return false;
      case State::kWorking:
        if (s.remaining > 0) return false;
        finish(s, t);
        return true;
      case State::kDone:
        return false;
    }
    return false;
  }

  // Copy engines in order of request (then rank, then op): deterministic and FIFO.
  bool grant_engines(double t) {
    bool changed = false;
    std::stable_sort(waiting_engine_.begin(), waiting_engine_.end(), [](const SimOp* a, const SimOp* b) {
      return std::tie(a->engine_request, a->rank, a->index) < std::tie(b->engine_request, b->rank, b->index);
    });
    for (auto it = waiting_engine_.begin(); it != waiting_engine_.end();) {
      SimOp* s = *it;
      int& busy = engines_busy_[s->rank];
      busy -= engines_released_[s->rank];
      engines_released_[s->rank] = 0;
      if (busy < r_.engines) {
        ++busy;
        s->state = State::kWorking;
        s->work_start = t;
        working_.push_back(s);
        it = waiting_engine_.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    return changed;
  }

  void compute_rates() {
    // SM sharing per GPU.
    // Per GPU: kernels, SM copies, and GEMMs/attention working.
    std::vector<std::pair<int, int>>& per_gpu = per_gpu_;
    per_gpu.assign(ops_.size(), {0, 0});
    compute_bound_.assign(ops_.size(), 0);
    for (SimOp* w : working_) {
      if (w->work == Work::kSm && !w->sm_copy) ++per_gpu[w->rank].first;
      if (w->sm_copy) ++per_gpu[w->rank].second;
      if (w->op->kind == OpKind::kKernel &&
          (w->op->kernel == KernelKind::kGemm || w->op->kernel == KernelKind::kAttention)) {
        ++compute_bound_[w->rank];
      }
    }
    // A GEMM or attention holds the SMs: an SM copy beside it gets little and does not
    // slow it. Beside memory-bound kernels, the copy and the kernel share.
    auto sm_share = [&](const SimOp& w) {
      const auto [k, c] = per_gpu[w.rank];
      const bool held = compute_bound_[w.rank] > 0;
      if (w.sm_copy) {
        if (k == 0) return 1.0 / c;
        return (held ? r_.copy_behind_gemm : r_.sm_copy_share) / c;
      }
      if (c == 0) return 1.0 / k;
      return (held ? 1.0 : r_.kernel_share) / k;
    };
    // Flows over link egress/ingress, max-min fair (progressive filling).
    std::vector<SimOp*> flows;
    for (SimOp* w : working_) {
      if (w->work == Work::kSm) w->rate = sm_share(*w);
      if (w->work == Work::kFlow) flows.push_back(w);
    }
    if (flows.empty()) return;
    std::map<std::pair<int, int>, double> used;  // (gpu, 0 egress / 1 ingress) -> bytes per ms
    std::vector<double> cap(flows.size());
    std::vector<bool> frozen(flows.size(), false);
    for (size_t i = 0; i < flows.size(); ++i) {
      flows[i]->rate = 0;
      cap[i] = flows[i]->cap * (flows[i]->sm_copy ? sm_share(*flows[i]) : 1.0) *
               (compute_bound_[flows[i]->rank] > 0 ? r_.peer_beside_gemm : 1.0);
    }
    auto res = [&](size_t i, int dir) { return std::make_pair(dir == 0 ? flows[i]->src_gpu : flows[i]->dst_gpu, dir); };
    for (size_t left = flows.size(); left > 0;) {
      std::map<std::pair<int, int>, int> n;
      for (size_t i = 0; i < flows.size(); ++i)
        if (!frozen[i]) ++n[res(i, 0)], ++n[res(i, 1)];
      double inc = kInf;
      for (const auto& [k, cnt] : n) inc = std::min(inc, (r_.link - used[k]) / cnt);
      for (size_t i = 0; i < flows.size(); ++i)
        if (!frozen[i]) inc = std::min(inc, cap[i] - flows[i]->rate);
      inc = std::max(0.0, inc);
      for (size_t i = 0; i < flows.size(); ++i)
        if (!frozen[i]) {
          flows[i]->rate += inc;
          used[res(i, 0)] += inc;
          used[res(i, 1)] += inc;
        }
      for (size_t i = 0; i < flows.size(); ++i) {
        if (frozen[i]) continue;
        const double tol = 1e-9 * r_.link;
        if (flows[i]->rate >= cap[i] - tol || used[res(i, 0)] >= r_.link - tol || used[res(i, 1)] >= r_.link - tol) {
          frozen[i] = true;
          --left;
        }
      }
    }
  }

  bool all_done() const { return done_ == total_; }

  std::string stuck_message() {
    std::ostringstream msg;
    msg << "simulate: no op can make progress (deadlock in the traces):";
    int shown = 0;
    for (size_t rk = 0; rk < ops_.size() && shown < 6; ++rk)
      for (size_t s = 0; s < stream_ops_[rk].size() && shown < 6; ++s) {
        SimOp* h = head(static_cast<int>(rk), s);
        if (!h) continue;
        msg << " rank " << rk << " stream " << s << " op " << h->index << " (" << op_kind_name(h->op->kind);
        if (h->op->kind == OpKind::kWaitValue) msg << " >= " << h->op->value << " for peer " << h->op->label_peer;
        msg << ");";
        ++shown;
      }
    return msg.str();
  }

  const std::vector<RankTrace>& tr_;
  Rates r_;
  std::map<uint64_t, int> owner_;
  std::vector<std::vector<SimOp>> ops_;
  std::vector<std::vector<bool>> behind_work_;  // [rank][op]: an event record behind device work
  std::vector<std::vector<bool>> record_cost_;  // [rank][op]: a timed record right after device work
  std::vector<std::vector<std::vector<int>>> stream_ops_;
  std::vector<std::vector<size_t>> heads_;
  std::vector<size_t> host_next_;
  std::vector<bool> launched_;  // graph replay: the rank's launch call is made
  Issue issue_ = Issue::kOpByOp;
  std::vector<double> host_clock_;
  std::map<WordKey, std::vector<WordWrite>> words_;
  std::map<CollectiveKey, std::vector<std::pair<int, int>>> collectives_;
  std::vector<SimOp*> working_, waiting_engine_;
  std::vector<std::pair<int, int>> per_gpu_;
  std::vector<int> compute_bound_;  // per GPU: GEMMs and attention working now
  std::map<int, int> engines_busy_, engines_released_;
  int waits_before_trace_ = 0;
  size_t done_ = 0, total_ = 0;
};

}  // namespace

Timeline simulate(const std::vector<RankTrace>& traces, const Machine& machine, Issue issue) {
  return Simulation(traces, machine, issue).run();
}

double standalone_work_ms(const Op& op, const Machine& machine, bool peer) {
  Rates r(machine);
  if (op.kind == OpKind::kCopy && peer) return op.bytes / r.link;
  return sm_work_ms(op, r);
}

}  // namespace uipc::model
