// bench_kernels' HDF5 output as rates for the machine model (lib/model_bench.hpp).
#include "lib/report/model_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "lib/hdf5/hdf5_file.hpp"
#include "lib/report/node_sequences.hpp"
#include "model/simulator.hpp"

namespace uipc {

namespace {

// bench_kernels' rows (its group's parallel attribute lists) and the code they measured.
struct BenchRows {
  std::vector<std::string> section, what, shape, unit;
  std::vector<std::string> note;  // empty where the file has none (only the host costs read it)
  std::vector<double> rate, ms;
  std::string revision;
  bool one_launch = false;  // norm_rope_layer_launch = qk_one_launch
};

BenchRows read_bench_rows(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  const h5::Group root = f.root();
  if (!root.has_link("bench_kernels")) throw InputError(path + ": no group 'bench_kernels' (not bench_kernels -o output)");
  const h5::Group g = root.open_group("bench_kernels");
  BenchRows b;
  b.section = g.read_string_list("section", 1 << 16);
  b.what = g.read_string_list("what", 1 << 16);
  b.shape = g.read_string_list("shape", 1 << 16);
  b.unit = g.read_string_list("unit", 1 << 16);
  b.rate = g.read_double_list("rate");
  b.ms = g.has_attr("ms") ? g.read_double_list("ms") : std::vector<double>(b.rate.size(), 0.0);
  if (g.has_attr("note")) b.note = g.read_string_list("note", 1 << 16);
  const size_t n = b.section.size();
  if (b.what.size() != n || b.shape.size() != n || b.unit.size() != n || b.rate.size() != n || b.ms.size() != n)
    throw InputError(path + ": bench_kernels' section, what, shape, unit, rate and ms differ in length");
  // The code the bench measured: its `revision` attribute, else the stored file's name
  // (docs/measured/ names them bench_kernels-<revision>.h5), else unknown.
  b.revision = g.has_attr("revision") ? g.read_string("revision") : "";
  if (b.revision.empty()) {
    const size_t slash = path.find_last_of('/');
    const std::string file = path.substr(slash == std::string::npos ? 0 : slash + 1);
    const std::string pre = "bench_kernels-", post = ".h5";
    std::string rev = file.size() > pre.size() + post.size() && file.rfind(pre, 0) == 0 &&
                              file.compare(file.size() - post.size(), post.size(), post) == 0
                          ? file.substr(pre.size(), file.size() - pre.size() - post.size())
                          : "";
    const bool hex = rev.size() >= 7 && rev.find_first_not_of("0123456789abcdef") == std::string::npos;
    b.revision = hex ? rev + " (from the file name)" : "revision not recorded";
  }
  b.one_launch = g.has_attr(kNormRopeLayerLaunchAttr) && g.read_string(kNormRopeLayerLaunchAttr) == kNormRopeQkOneLaunch;
  return b;
}

// A profile point's source: the row, its rate, and the file and code that measured it.
std::string row_source(const BenchRows& b, size_t i, const std::string& path, const char* unit) {
  std::ostringstream src;
  src << "bench_kernels " << b.what[i] << " " << b.shape[i] << ": " << b.rate[i] << " " << unit << " (" << path
      << ", code " << b.revision << ")";
  return src.str();
}

std::vector<model::NormRopePoint> norm_rope_points(const BenchRows& b, const std::string& path) {
  const std::vector<std::string>&section = b.section, &what = b.what, &shape = b.shape, &unit = b.unit;
  const std::vector<double>& rate = b.rate;
  // The rows of the launch the measured code's layer ran: Q and K in one launch where the
  // file says so (norm_rope_layer_launch = qk_one_launch: "norm+RoPE <kind> (the pick, Q+K
  // one launch)"), else, as every bench of code before it, the dispatched kernel's two
  // launches ("norm+RoPE <kind>").
  const std::string suffix = b.one_launch ? kNormRopeQkRowSuffix : "";
  std::vector<model::NormRopePoint> out;
  for (size_t i = 0; i < section.size(); ++i) {
    if (section[i] != "norm+rope" || unit[i] != "TB/s") continue;
    // The dispatched kernel's rows read "norm+RoPE <kind>" (RoPE only: "none (RoPE only)");
    // the forced kernels' carry a parenthesis after the kind.
    model::NormRopePoint p;
    std::string kind = what[i].rfind("norm+RoPE ", 0) == 0 ? what[i].substr(10) : "";
    if (!suffix.empty()) {
      if (kind.size() <= suffix.size() || kind.compare(kind.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      kind.resize(kind.size() - suffix.size());
    }
    if (kind == "none (RoPE only)") kind = "none";
    bool known = false;
    for (const char* k : model::kNormKindNames) known = known || kind == k;
    if (!known) continue;
    long long m = 0, h = 0, d = 0;
    char dtype[16] = {0}, view[16] = {0};
    if (std::sscanf(shape[i].c_str(), "M%lld H%lld D%lld %15s %15s", &m, &h, &d, dtype, view) != 5) continue;
    if (std::string(view) != "fused") continue;
    p.norm = kind;
    p.dtype = dtype;
    p.head_dim = static_cast<int>(d);
    p.gbs = rate[i] * 1000.0;
    p.source = row_source(b, i, path, "TB/s read+write");
    out.push_back(p);
  }
  return out;
}

// The GEMM rows the profile takes: those the GPU's work bounds. The bench times GEMMs issued
// back to back, and a cuBLASLt call costs the host about 10 us (bench_kernels-gemm-59e55b4:
// every GEMM of M <= 2048 at 256 x 1152 x 576 up to 2048 x 1536 x 1536 took 10-12 us, from
// 0.3 to 9.7 GFLOP), so a row within kGemmHostBoundFactor of the file's fastest GEMM
// measures the host's issue rate, not the GPU's; the model's own fixed and host costs carry
// that part, and such shapes take the nearest GPU-bound point's rate at their own wave
// quantisation.
constexpr double kGemmHostBoundFactor = 3.0;

std::vector<model::GemmPoint> gemm_points(const BenchRows& b, const std::string& path) {
  std::vector<model::GemmPoint> out;
  double fastest = 0;
  for (size_t i = 0; i < b.section.size(); ++i)
    if (b.section[i] == "gemm" && b.what[i] == kGemmShapeRowWhat && b.ms[i] > 0)
      fastest = fastest == 0 ? b.ms[i] : std::min(fastest, b.ms[i]);
  for (size_t i = 0; i < b.section.size(); ++i) {
    if (b.section[i] != "gemm" || b.what[i] != kGemmShapeRowWhat || b.unit[i] != "TFLOP/s") continue;
    if (b.ms[i] < kGemmHostBoundFactor * fastest) continue;
    long long m = 0, k = 0, n = 0;
    char dtype[16] = {0};
    if (std::sscanf(b.shape[i].c_str(), "M%lld K%lld N%lld %15s", &m, &k, &n, dtype) != 4 || std::string(dtype) != "bf16")
      throw InputError(path + ": GEMM row '" + b.shape[i] + "' is not 'M<m> K<k> N<n> bf16'");
    if (m <= 0 || k <= 0 || n <= 0 || !(b.rate[i] > 0))
      throw InputError(path + ": GEMM row '" + b.shape[i] + "' has a non-positive shape or rate");
    model::GemmPoint p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.tflops = b.rate[i];
    p.source = row_source(b, i, path, "TFLOP/s");
    out.push_back(p);
  }
  return out;
}

std::vector<model::AttentionPoint> attention_points(const BenchRows& b, const std::string& path) {
  std::vector<model::AttentionPoint> out;
  for (size_t i = 0; i < b.section.size(); ++i) {
    if (b.section[i] != "attention" || b.what[i] != kAttentionShapeRowWhat || b.unit[i] != "TFLOP/s") continue;
    long long batch = 0, h = 0, s = 0, d = 0;
    char dtype[16] = {0};
    if (std::sscanf(b.shape[i].c_str(), "B%lld H%lld S%lld D%lld %15s", &batch, &h, &s, &d, dtype) != 5 ||
        std::string(dtype) != "bf16")
      throw InputError(path + ": attention row '" + b.shape[i] + "' is not 'B<b> H<h> S<s> D<d> bf16'");
    if (batch <= 0 || h <= 0 || s <= 0 || d <= 0 || !(b.rate[i] > 0))
      throw InputError(path + ": attention row '" + b.shape[i] + "' has a non-positive shape or rate");
    model::AttentionPoint p;
    p.batch = batch;
    p.heads = h;
    p.seq = s;
    p.head_dim = static_cast<int>(d);
    p.tflops = b.rate[i];
    p.source = row_source(b, i, path, "TFLOP/s");
    out.push_back(p);
  }
  return out;
}

}  // namespace

std::map<std::string, double> read_host_costs(const std::string& path) {
  const BenchRows b = read_bench_rows(path);
  auto host_us = [&](const char* op) {
    const std::string what = floor_op_what(kHostRows, op);
    for (size_t i = 0; i < b.what.size(); ++i)
      if (b.section[i] == "latency" && b.what[i] == what && b.unit[i] == "us" && b.rate[i] > 0) return b.rate[i];
    throw InputError(path + ": bench_kernels holds no row '" + what +
                     "' (the floor-op rows of bench_kernels --sections latency, code f5ae572 on)");
  };
  std::map<std::string, double> c;
  c["host_gemm_us"] = (host_us(kFloorOpQkProjection) + host_us(kFloorOpOutProjection)) / 2;
  c["host_attention_us"] = host_us(kFloorOpAttention);
  c["host_launch_us"] = (host_us(kFloorOpNormRope) + host_us(kFloorOpConversion)) / 2;
  c["host_copy_us"] = host_us(kFloorOpCopy);
  // An API call: half the host's enqueue of a record and a wait, from the event-hop row's note.
  for (size_t i = 0; i < b.what.size(); ++i) {
    if (b.section[i] != "latency" || b.what[i] != kEventHopRowWhat || i >= b.note.size()) continue;
    const std::string key = "host enqueue ";
    const size_t at = b.note[i].find(key);
    double per_hop = 0;
    if (at != std::string::npos && std::sscanf(b.note[i].c_str() + at + key.size(), "%lf us per hop", &per_hop) == 1 &&
        per_hop > 0)
      c["host_api_us"] = per_hop / 2;
  }
  // A measurement outside what the parameter can be (its sanity bounds) is a damaged file.
  for (const model::ParamSpec& spec : model::parameter_specs()) {
    const auto v = c.find(spec.name);
    if (v != c.end() && !(v->second >= spec.min && v->second <= spec.max)) {
      char range[96];
      std::snprintf(range, sizeof(range), "%g us, outside [%g, %g]", v->second, spec.min, spec.max);
      throw InputError(path + ": the host cost " + spec.name + " it gives is " + range);
    }
  }
  return c;
}

namespace {

// The latency section's rows `way: what` of a bench file, in us, each checked for range.
struct LatencyRows {
  std::string path;
  BenchRows b;
  // The row `way: what` in us; 0 for an optional one the file does not hold.
  double us(const char* way, const std::string& what, bool required) const {
    const std::string full = std::string(way) + ": " + what;
    for (size_t i = 0; i < b.what.size(); ++i) {
      if (b.section[i] != "latency" || b.what[i] != full || b.unit[i] != "us") continue;
      if (!(b.rate[i] >= 0.01 && b.rate[i] <= 1000))
        throw InputError(path + ": the row '" + full + "' gives " + std::to_string(b.rate[i]) +
                         " us, outside [0.01, 1000] us");
      return b.rate[i];
    }
    if (required)
      throw InputError(path + ": bench_kernels holds no row '" + full +
                       "' (the graph-node and floor-op rows of bench_kernels --sections latency, code f5ae572 on)");
    return 0.0;
  }
  model::IssueCost both(const std::string& what, bool required = true) const {
    return model::IssueCost{us(kStreamRows, what, required), us(kGraphRows, what, required)};
  }
  // A graph-node row's time beyond the empty kernel's.
  model::IssueCost beyond_kernel(const char* what) const {
    const model::IssueCost empty = both(kEmptyKernels), c = both(what);
    return model::IssueCost{std::max(0.0, c.op_by_op - empty.op_by_op), std::max(0.0, c.graph - empty.graph)};
  }
};

// The GPU's own device costs in a bench file's latency rows (read_device_costs).
model::DeviceCosts device_costs_of(const LatencyRows& r) {
  auto op = [&](const char* name, bool required = true) { return r.both(kFloorOpPrefix + std::string(name), required); };
  model::DeviceCosts d;
  d.empty_kernel = r.both(kEmptyKernels);
  d.record_after_work = r.beyond_kernel(kEmptyKernelsRecorded);
  const model::IssueCost qk = op(kFloorOpQkProjection), out = op(kFloorOpOutProjection);
  d.gemm = {std::min(qk.op_by_op, out.op_by_op), std::min(qk.graph, out.graph)};
  d.norm_rope = op(kFloorOpNormRope);
  d.attention = op(kFloorOpAttention);
  d.convert = op(kFloorOpConversion);
  d.copy = op(kFloorOpCopy);
  const model::IssueCost pair = op(kFloorOpMemop, false);  // a write and a wait: each end half
  d.memop = {pair.op_by_op / 2, pair.graph / 2};
  d.nccl_one_rank = op(kFloorOpNcclOneRank, false);
  d.nccl_one_rank_bytes = static_cast<double>(kFloorOpNcclOneRankBytes);
  d.source = "bench_kernels' graph-node and floor-op rows (" + r.path + ", code " + r.b.revision + ")";
  return d;
}

}  // namespace

model::DeviceCosts read_device_costs(const std::string& path) { return device_costs_of({path, read_bench_rows(path)}); }

namespace {

// v.kernels empty kernels (or copies) on stream 0, each (or each v.every-th: has_steps) with the
// variant's steps before and after it, as one rank's trace.
model::RankTrace node_trace(const NodeVariant& v) {
  model::RankTrace t;
  t.streams.resize(kNodeStreams);
  t.streams[static_cast<int>(NodeStream::kCopy)].high_priority = true;
  t.prior_writes.push_back({0, 0, 1});  // the word, holding 1 before the first wait
  for (int i = 0; i < v.kernels; ++i) {
    int last_record[kNodeEvents];
    std::fill(std::begin(last_record), std::end(last_record), model::kNoOp);
    auto add = [&](const std::vector<NodeStep>& steps) {
      for (const NodeStep& st : steps) {
        model::Op o;
        o.stream = static_cast<int>(st.stream);
        switch (st.kind) {
          case NodeStep::kRecordTimed:
          case NodeStep::kRecordOrdering:
            o.kind = model::OpKind::kEventRecord;
            o.dims[0] = st.kind == NodeStep::kRecordOrdering ? 1 : 0;
            last_record[st.event] = static_cast<int>(t.ops.size());
            break;
          case NodeStep::kWaitEvent:
            o.kind = model::OpKind::kStreamWaitEvent;
            o.waits_for = last_record[st.event];
            break;
          case NodeStep::kWriteWord:
          case NodeStep::kWaitWord:
            o.kind = st.kind == NodeStep::kWriteWord ? model::OpKind::kWriteValue : model::OpKind::kWaitValue;
            o.value = 1;
            break;
        }
        t.ops.push_back(o);
      }
    };
    const bool steps = has_steps(v, i);
    if (steps) add(v.before);
    model::Op k;
    k.kind = model::OpKind::kKernel;
    k.stream = static_cast<int>(NodeStream::kCompute);
    if (v.work == NodeWork::kCopy) {  // a same-device copy: both ends this rank's own memory
      k.kind = model::OpKind::kCopy;
      k.bytes = static_cast<double>(kNodeCopyBytes);
      k.dims[0] = kNodeCopyRow;
      k.dims[1] = kNodeCopyBytes / kNodeCopyRow;
    }
    t.ops.push_back(k);
    if (steps) add(v.after);
  }
  return t;
}

}  // namespace

std::vector<NodeRowReplay> replay_node_rows(const model::Machine& machine, const std::string& path) {
  const LatencyRows r{path, read_bench_rows(path)};  // one read of the file: the costs and the rows to compare
  model::Machine m = machine;
  m.device = device_costs_of(r);
  for (auto& [name, p] : m.params)  // the bench's chains run behind a gate: the host is never in the way
    if (name.rfind("host_", 0) == 0 || name == "start_skew_us") p.value = 0;
  std::vector<NodeRowReplay> out;
  for (const NodeVariant& v : node_variants()) {
    const model::IssueCost measured = r.both(v.what, false);
    if (measured.op_by_op <= 0 || measured.graph <= 0) continue;
    const std::vector<model::RankTrace> traces = {node_trace(v)};
    model::IssueCost modelled;
    for (const model::Issue issue : {model::Issue::kOpByOp, model::Issue::kGraphReplay}) {
      const model::Timeline tl = model::simulate(traces, m, issue);
      double end = 0;
      for (const model::OpTime& o : tl.ranks[0]) end = std::max(end, o.end_ms);
      (issue == model::Issue::kOpByOp ? modelled.op_by_op : modelled.graph) = end * 1e3 / v.kernels;
    }
    out.push_back({v.what, measured, modelled});
  }
  return out;
}

std::vector<model::NormRopePoint> read_norm_rope_profile(const std::string& path) {
  std::vector<model::NormRopePoint> out = norm_rope_points(read_bench_rows(path), path);
  if (out.empty()) throw InputError(path + ": bench_kernels holds no norm+RoPE row of the fused view");
  return out;
}

BenchRates read_bench_rates(const std::vector<std::string>& paths) {
  BenchRates r;
  std::string norm_from, gemm_from, attention_from;
  for (const std::string& path : paths) {
    const BenchRows b = read_bench_rows(path);
    std::vector<model::NormRopePoint> norm = norm_rope_points(b, path);
    std::vector<model::GemmPoint> gemm = gemm_points(b, path);
    std::vector<model::AttentionPoint> attention = attention_points(b, path);
    if (norm.empty() && gemm.empty() && attention.empty())
      throw InputError(path + ": bench_kernels holds no norm+RoPE rows of the fused view, GEMM-by-shape rows or "
                              "attention-by-shape rows (bench_kernels --sections norm,gemm_shapes,attention_shapes)");
    auto take = [&](auto& into, auto& from, std::string& first, const char* what) {
      if (from.empty()) return;
      if (!first.empty())
        throw InputError("--rates: both " + first + " and " + path + " hold the " + what + " profile: give one");
      first = path;
      into = std::move(from);
    };
    take(r.norm_rope, norm, norm_from, "norm+RoPE");
    take(r.gemm, gemm, gemm_from, "GEMM");
    take(r.attention, attention, attention_from, "attention");
  }
  return r;
}

}  // namespace uipc
