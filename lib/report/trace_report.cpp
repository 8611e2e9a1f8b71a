// The traced layer in a report (lib/report/trace_report.hpp).
#include "lib/report/trace_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "base/error.hpp"

namespace uipc {
namespace {

std::vector<std::string> names_of(int n, const char* (*name)(int)) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(name(i));
  return v;
}
const char* op_name(int i) { return model::op_kind_name(static_cast<model::OpKind>(i)); }
const char* kernel_name(int i) { return model::kernel_kind_name(static_cast<model::KernelKind>(i)); }
const char* collective_name(int i) { return model::collective_kind_name(static_cast<model::CollectiveKind>(i)); }
const char* host_call_name(int i) { return model::host_call_name(static_cast<model::HostCall>(i)); }

// The byte form packed into int64 words (the HDF5 wrapper's integer datasets).
std::vector<int64_t> pack(const std::string& bytes) {
  std::vector<uint64_t> u((bytes.size() + 7) / 8, 0);
  for (size_t i = 0; i < bytes.size(); ++i)
    u[i / 8] |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * (i % 8));
  return std::vector<int64_t>(u.begin(), u.end());
}

std::string unpack(const std::vector<int64_t>& words, int64_t n) {
  std::string s(static_cast<size_t>(n), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(static_cast<uint64_t>(words[i / 8]) >> (8 * (i % 8)));
  return s;
}

}  // namespace

namespace {

// The traced layer's ops as columns, one row per op of every rank (docs/report.md).
struct OpColumns {
  std::vector<int64_t> rank, stream, kind, kernel, coll, call, src, dst, value, waits_for;
  std::vector<double> bytes, flops, m0, m1, host, s0, s1;

  void add(const RunResult& r, const model::RankTrace& t, size_t i, const std::map<uint64_t, int>& owner) {
    // Which rank a copy reads and writes (its memory's exporter; 0: the rank's own), -1 unknown.
    auto rank_of = [&](uint64_t mem) -> int64_t {
      if (mem == 0) return t.rank;
      auto it = owner.find(mem);
      return it == owner.end() ? -1 : it->second;
    };
    const model::Op& op = t.ops[i];
    rank.push_back(t.rank);
    stream.push_back(op.stream);
    kind.push_back(static_cast<int64_t>(op.kind));
    kernel.push_back(static_cast<int64_t>(op.kernel));
    coll.push_back(static_cast<int64_t>(op.collective));
    call.push_back(op.kind == model::OpKind::kHostCall ? op.dims[0] : 0);
    const bool copy = op.kind == model::OpKind::kCopy;
    src.push_back(copy ? rank_of(op.src_mem) : -1);
    dst.push_back(copy ? rank_of(op.dst_mem) : op.kind == model::OpKind::kWriteValue ? rank_of(op.word_mem) : -1);
    value.push_back(static_cast<int64_t>(op.value));
    waits_for.push_back(op.waits_for);
    bytes.push_back(op.bytes);
    flops.push_back(op.flops);
    m0.push_back(op.measured_start_ms);
    m1.push_back(op.measured_end_ms);
    host.push_back(op.measured_host_us);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const bool modeled = !r.modeled_ops.empty() && i < r.modeled_ops[t.rank].size();
    s0.push_back(modeled ? r.modeled_ops[t.rank][i].start_ms : nan);
    s1.push_back(modeled ? r.modeled_ops[t.rank][i].end_ms : nan);
  }

  void write(const h5::Group& g) const {
    if (rank.empty()) return;
    const std::vector<int64_t> n{static_cast<int64_t>(rank.size())};
    g.write_dataset("op_rank", n, rank.data());
    g.write_dataset("op_stream", n, stream.data());
    g.write_dataset("op_kind", n, kind.data()).write_attr("names", names_of(model::kNumOpKinds, op_name));
    g.write_dataset("op_kernel", n, kernel.data()).write_attr("names", names_of(5, kernel_name));
    g.write_dataset("op_collective", n, coll.data()).write_attr("names", names_of(4, collective_name));
    g.write_dataset("op_host_call", n, call.data())
        .write_attr("names", names_of(model::kLastHostCall + 1, host_call_name));
    g.write_dataset("op_src_rank", n, src.data());
    g.write_dataset("op_dst_rank", n, dst.data());
    g.write_dataset("op_value", n, value.data());
    g.write_dataset("op_waits_for", n, waits_for.data());
    g.write_dataset("op_bytes", n, bytes.data());
    g.write_dataset("op_flops", n, flops.data());
    g.write_dataset("op_measured_start_ms", n, m0.data());
    g.write_dataset("op_measured_end_ms", n, m1.data());
    g.write_dataset("op_measured_host_us", n, host.data());
    g.write_dataset("op_modeled_start_ms", n, s0.data());
    g.write_dataset("op_modeled_end_ms", n, s1.data());
  }
};

// The layer's identity: the machine it was modelled on and whether its ops carry GPU times.
void write_traced_attributes(const h5::Group& g, const RunResult& r) {
  g.write_attr("machine", r.machine);
  g.write_attr("model_note", r.model_note);
  g.write_attr("modeled_as", r.modeled_as);
  g.write_attr("waits_before_trace", static_cast<int64_t>(r.modeled_waits_before_trace));
  bool measured = false;
  for (const auto& t : r.traces)
    for (const auto& op : t.ops) measured = measured || std::isfinite(op.measured_start_ms);
  g.write_attr("measured", measured ? 1 : 0);
  g.write_attr("times_units", "ms");
}

// Every op of every rank as columns, then every stream's rank, index and priority.
void write_op_and_stream_columns(const h5::Group& g, const RunResult& r) {
  std::map<uint64_t, int> owner;  // who owns each exported memory id
  for (const auto& t : r.traces)
    for (uint64_t e : t.exported) owner.emplace(e, t.rank);
  OpColumns ops;
  std::vector<int64_t> srank, sidx, sprio;
  for (const auto& t : r.traces) {
    for (size_t i = 0; i < t.streams.size(); ++i) {
      srank.push_back(t.rank);
      sidx.push_back(static_cast<int64_t>(i));
      sprio.push_back(t.streams[i].high_priority ? 1 : 0);
    }
    for (size_t i = 0; i < t.ops.size(); ++i) ops.add(r, t, i, owner);
  }
  ops.write(g);
  const std::vector<int64_t> ns{static_cast<int64_t>(srank.size())};
  if (!srank.empty()) {
    g.write_dataset("stream_rank", ns, srank.data());
    g.write_dataset("stream_index", ns, sidx.data());
    g.write_dataset("stream_high_priority", ns, sprio.data());
  }
}

// Each rank's trace in its byte form (model/trace), packed into 64-bit words.
void write_trace_bytes(const h5::Group& g, const RunResult& r) {
  for (const auto& t : r.traces) {
    const std::string b = model::serialize(t);
    std::vector<int64_t> words = pack(b);
    if (words.empty()) words.push_back(0);
    h5::Dataset d = g.write_dataset("trace_rank" + std::to_string(t.rank), {static_cast<int64_t>(words.size())},
                                    words.data());
    d.write_attr("bytes", static_cast<int64_t>(b.size()));
  }
}

// The replay's stages per rank, V's copy and overlap, and the critical path's stages.
void write_modeled_stages(const h5::Group& g, const RunResult& r) {
  if (r.modeled_stage_ms.empty()) return;
  const int world = static_cast<int>(r.traces.size());
  h5::Dataset d = g.write_dataset("modeled_stage_ms", {world, kNumStages}, r.modeled_stage_ms.data());
  d.write_attr("units", "ms");
  d.write_attr("dims", std::vector<std::string>{"rank", "stage"});
  g.write_dataset("modeled_v_overlap_ms", {world}, r.modeled_v_overlap_ms.data()).write_attr("units", "ms");
  g.write_dataset("modeled_v_copy_ms", {world}, r.modeled_v_copy_ms.data()).write_attr("units", "ms");
  std::vector<double> crit(kNumStages, -std::numeric_limits<double>::infinity());
  for (int rk = 0; rk < world; ++rk)
    for (int s = 0; s < kNumStages; ++s) crit[s] = std::max(crit[s], r.modeled_stage_ms[rk * kNumStages + s]);
  g.write_attr("modeled_critical_ms", crit);
}

// Which ops make up each stage: (rank, stage, op, coef) rows.
void write_stage_terms(const h5::Group& g, const RunResult& r) {
  std::vector<double> terms;
  for (size_t rk = 0; rk < r.stage_terms.size(); ++rk)
    for (const auto& t : r.stage_terms[rk])
      terms.insert(terms.end(), {static_cast<double>(rk), static_cast<double>(t.stage), static_cast<double>(t.op), t.coef});
  if (terms.empty()) return;
  h5::Dataset d = g.write_dataset("stage_terms", {static_cast<int64_t>(terms.size() / 4), 4}, terms.data());
  d.write_attr("columns", std::vector<std::string>{"rank", "stage", "op", "coef"});
}

}  // namespace

void write_traced_layer(const h5::Group& run_group, const RunResult& r) {
  if (r.traces.empty()) return;
  h5::Group g = run_group.create_group("traced_layer");
  write_traced_attributes(g, r);
  write_op_and_stream_columns(g, r);
  write_trace_bytes(g, r);
  write_modeled_stages(g, r);
  write_stage_terms(g, r);
}

std::string StoredRun::shape_key() const {
  return "B" + std::to_string(batch) + " S" + std::to_string(seq_len) + " H" + std::to_string(heads) + " D" +
         std::to_string(head_dim) + " " + dtype + " qk_norm " + qk_norm + (fused_qkv ? " fused" : " separate") +
         ", ulysses " + std::to_string(ulysses) + " tp " + std::to_string(tp) + " on " + std::to_string(world) +
         " ranks";
}

std::vector<StoredRun> read_report_runs(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  h5::Group root = f.root();
  if (!root.has_attr("software") || root.read_string("software") != "ulysses-ipc")
    throw InputError(path + ": not a ulysses-ipc report");
  const std::string mode = root.read_string("mode");
  const int world = static_cast<int>(root.read_int("world_size"));
  std::vector<StoredRun> out;
  h5::Group cases = root.open_group("cases");
  for (const std::string& cname : root.read_string_list("cases")) {
    h5::Group cg = cases.open_group(cname);
    for (const std::string& rname : cg.read_string_list("runs")) {
      h5::Group rg = cg.open_group(rname);
      StoredRun s;
      s.report = path;
      s.case_name = cname;
      s.run_name = rname;
      s.mode = mode;
      s.world = world;
      s.transport_used = rg.read_string("transport_used");
      s.schedule = rg.read_string("schedule");
      s.batch = cg.read_int("batch");
      s.seq_len = cg.read_int("seq_len");
      s.heads = cg.read_int("heads");
      s.head_dim = cg.read_int("head_dim");
      s.ulysses = cg.read_int("ulysses");
      if (s.ulysses == 0) s.ulysses = world / std::max<int64_t>(1, cg.read_int("tp"));
      s.tp = cg.read_int("tp");
      s.fused_qkv = cg.read_bool("fused_qkv") ? 1 : 0;
      s.dtype = cg.read_string("dtype");
      s.qk_norm = cg.read_string("qk_norm");
      s.median_ms = rg.read_double_list("median_ms");
      if (rg.has_attr("stage_timing")) s.stage_timing = rg.read_string("stage_timing");
      // Modelled as a graph replay where most timed layers were replayed (so is their median);
      // reports from before the per-layer flags: where any layer was.
      if (rg.has_link("graph_replayed")) {
        s.graph_replay = mostly_replayed(rg.read_int64s("graph_replayed"));
      } else {
        s.graph_replay = rg.has_attr("graph_replays") && rg.read_int("graph_replays") > 0;
      }
      if (static_cast<int>(s.median_ms.size()) != kNumStages)
        throw InputError(path + ": case '" + cname + "' run '" + rname + "': median_ms has " +
                         std::to_string(s.median_ms.size()) + " values, expected " + std::to_string(kNumStages));
      if (rg.has_link("traced_layer")) {
        h5::Group tg = rg.open_group("traced_layer");
        // --mode model replays nothing, but says how the GPU run would issue its layers.
        if (mode == "model" && tg.has_attr("modeled_as")) s.graph_replay = tg.read_string("modeled_as") == "graph replay";
        for (int rk = 0; rk < world; ++rk) {
          const std::string dname = "trace_rank" + std::to_string(rk);
          h5::Dataset d = tg.open_dataset(dname);
          const int64_t n = d.read_int("bytes");
          std::vector<int64_t> words = tg.read_int64s(dname);
          if (n < 0 || static_cast<size_t>(n) > words.size() * 8)
            throw InputError(path + ": " + cname + "/" + rname + "/traced_layer/" + dname + ": bad byte count");
          try {
            s.traces.push_back(model::deserialize(unpack(words, n)));
            if (s.traces.back().rank != rk || s.traces.back().world != world) throw std::runtime_error("rank or world differs");
          } catch (const std::runtime_error& e) {
            throw InputError(path + ": " + cname + "/" + rname + "/traced_layer/" + dname + ": " + e.what());
          }
        }
        s.stage_terms.resize(world);
        if (tg.has_link("stage_terms")) {
          std::vector<int64_t> dims;
          std::vector<double> v = tg.read_doubles("stage_terms", &dims);
          for (size_t i = 0; i + 3 < v.size(); i += 4) {
            const int rk = static_cast<int>(v[i]);
            if (rk < 0 || rk >= world) throw InputError(path + ": " + cname + "/" + rname + ": stage_terms: bad rank");
            s.stage_terms[rk].push_back({static_cast<int>(v[i + 1]), static_cast<int>(v[i + 2]), v[i + 3]});
          }
        }
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace uipc
