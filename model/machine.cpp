// Machine descriptions as JSON (nlohmann-json: a well-kept parser rather than our own),
// checked field by field.
#include "model/machine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "base/error.hpp"

namespace uipc::model {

const char* const kNormKindNames[4] = {"none", "rms", "rms_across_heads", "layer"};
const char* const kDTypeNames[3] = {"bf16", "fp16", "fp32"};

const std::vector<ParamSpec>& parameter_specs() {
  static const std::vector<ParamSpec> specs = {
      {"sm_count", "SMs", 1, 1024, "streaming multiprocessors per GPU (wave quantisation of GEMM and attention)"},
      {"gemm_tflops", "TFLOP/s", 1, 1e5, "dense bf16/fp16 GEMM rate at full waves"},
      {"gemm_fp32_out_factor", "1", 0.1, 1, "rate of a GEMM writing fp32 (the output projection), as a fraction"},
      {"attention_scale", "1", 0.1, 10, "factor on the attention profile's rates"},
      {"norm_rope_gbs", "GB/s", 1, 1e5, "Q/K norm + RoPE, bytes read + written per second"},
      {"stream_gbs", "GB/s", 1, 1e5, "contiguous memory-bound kernels (conversion, memset), bytes read + written"},
      {"sm_copy_gbs", "GB/s", 1, 1e5, "same-device 2-D copy (runs on SMs), bytes read + written"},
      {"hbm_gbs", "GB/s", 1, 1e6, "HBM bandwidth (spec; informational: contention is not modelled)"},
      {"kernel_latency_us", "us", 0, 1e4, "device-side fixed cost of a kernel"},
      {"copy_latency_us", "us", 0, 1e4, "device-side fixed cost of a copy"},
      {"event_hop_us", "us", 0, 1e4, "a stream resumes this long after the event it waits for completes"},
      {"work_event_hop_us", "us", 0, 1e4,
       "a stream resumes this long after the event it waits for when that event was recorded behind device work "
       "(a kernel or copy) on another stream; event_hop_us when it was recorded behind a stream wait or write"},
      {"memop_latency_us", "us", 0, 1e4, "a stream write or wait of a 64-bit word (each end of the handshake)"},
      {"event_record_us", "us", 0, 1e4,
       "GPU time of a timed event record right after device work on its stream (its timestamp; in a captured "
       "graph an external event-record node); one behind a wait or a record, and an ordering event (an edge of "
       "a graph), take none"},
      {"host_launch_us", "us", 0, 1e4, "host time to launch a plain kernel (norm + RoPE, conversion)"},
      {"host_gemm_us", "us", 0, 1e4, "host time of a cuBLASLt matmul call (heuristic cache, descriptors, launch)"},
      {"host_attention_us", "us", 0, 1e4, "host time of a cuDNN SDPA call (graph execute, launch)"},
      {"host_nccl_us", "us", 0, 1e4, "host time of a NCCL collective call (group, proxy hand-off, launch)"},
      {"host_copy_us", "us", 0, 1e4, "host time to issue a copy"},
      {"host_api_us", "us", 0, 1e4, "host time of an event record, stream wait, or stream memory operation"},
      {"host_alloc_us", "us", 0, 1e4, "host time of a device allocation (cudaMalloc, or a vmm target's cuMemCreate + map)"},
      {"host_export_us", "us", 0, 1e5,
       "host time of a vmm descriptor's export (cuMemExportToShareableHandle; an IPC handle's export, not "
       "measured, costs host_api_us)"},
      {"host_import_us", "us", 0, 1e5,
       "host time of a vmm descriptor's import + reserve + map + set access (an IPC handle's open, not measured, "
       "costs host_api_us)"},
      {"host_unmap_us", "us", 0, 1e4,
       "host time of a free (after any wait for the device, traced apart) or of a descriptor mapping's close, "
       "at no size"},
      {"host_close_export_us", "us", 0, 1e5,
       "host time of the close of a vmm descriptor its exporter made (export_fd's, after the peers have theirs; "
       "at one rank never imported)"},
      {"host_free_us_per_mib", "us/MiB", 0, 100,
       "host time a free adds per MiB it frees (unmapping its pages), beside host_unmap_us; a close adds none"},
      {"copy_engines", "engines", 1, 64, "copy engines per GPU (peer copies that run on engines queue for one)"},
      {"peer_copy_on_sm", "0/1", 0, 1, "1: peer copies run on SMs like same-device copies; 0: on copy engines"},
      {"copy_engine_gbs", "GB/s", 1, 1e5, "most one copy engine moves"},
      {"sm_copy_share", "1", 0.01, 1, "rate of an SM copy beside a memory-bound kernel, as a fraction of its rate alone"},
      {"kernel_share_beside_copy", "1", 0, 1, "rate of a memory-bound kernel beside an SM copy, as a fraction of its rate alone"},
      {"sm_copy_share_behind_gemm", "1", 0.001, 1,
       "rate of an SM copy beside a GEMM or attention, which hold the SMs (and are not slowed)"},
      {"ipc_mapping_factor", "1", 0.1, 1, "rate of copies into legacy-IPC mappings, as a fraction of the link's"},
      {"peer_copy_share_beside_gemm", "1", 0.01, 1,
       "rate of a peer copy while a GEMM or attention runs on its GPU, as a fraction of its rate alone"},
      {"link_gbs", "GB/s", 1, 1e5, "NVLink per GPU and direction (egress and ingress each)"},
      {"link_latency_us", "us", 0, 1e4, "a write over NVLink becomes visible this long after it is done"},
      {"nic_gbs", "GB/s", 0.1, 1e4, "network per GPU and direction (one NIC per GPU)"},
      {"nic_latency_us", "us", 0, 1e5, "network latency between nodes"},
      {"nccl_latency_us", "us", 0, 1e5, "fixed cost of a NCCL collective"},
      {"nccl_link_fraction", "1", 0.01, 1,
       "most of the link's rate NCCL reaches with many peers in flight (its protocol overhead), as a fraction"},
      {"nccl_peer_gbs", "GB/s", 1, 1e4,
       "NCCL's rate to one peer (its channels per peer x a channel's rate): a rank with k peers sends at "
       "min(k x this, link x nccl_link_fraction)"},
      {"nccl_nic_fraction", "1", 0.01, 1, "NCCL's share of the NIC's rate across nodes"},
      {"start_skew_us", "us", 0, 1e5, "ranks leave the barrier before a layer spread over this time"},
      {"gpu_speed_spread", "1", 0, 0.2, "GPUs differ in speed: the last rank's kernels are this fraction slower"},
  };
  return specs;
}

double Machine::p(const std::string& name) const {
  auto it = params.find(name);
  if (it == params.end()) throw RuntimeError("machine '" + this->name + "': no parameter '" + name + "'");
  return it->second.value;
}

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw InputError(where + ": " + what); }

double number(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_number()) bad(where, field + ": must be a number");
  const double v = j.get<double>();
  if (!std::isfinite(v)) bad(where, field + ": must be finite");
  return v;
}

std::string text(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_string()) bad(where, field + ": must be a string");
  return j.get<std::string>();
}

int64_t whole(const json& j, const std::string& where, const std::string& field, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) bad(where, field + ": must be an integer");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) bad(where, field + ": " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                                       std::to_string(hi) + "]");
  return v;
}

void only_keys(const json& j, const std::string& where, const std::set<std::string>& allowed) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) bad(where, "unknown field '" + it.key() + "'");
}

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

// One parameter of the file: value, unit, source and physical range (and the fit's box
// inside that range, for a free one).
Param parse_parameter(const json& ps, const ParamSpec& s, const std::string& where) {
  const std::string f = std::string("parameters.") + s.name;
  if (!ps.contains(s.name)) bad(where, "missing parameter '" + std::string(s.name) + "' (" + s.meaning + ")");
  const json& pj = ps[s.name];
  if (!pj.is_object()) bad(where, f + ": must be an object {\"value\": ..., \"source\": ...}");
  only_keys(pj, where + ": " + f, {"value", "unit", "source", "range", "range_source", "fit"});
  for (const char* k : {"value", "unit", "source", "range", "range_source"})
    if (!pj.contains(k))
      bad(where, f + ": needs a value, its unit, its source, its physical range [lo, hi] and the range's source (" +
                     k + " missing)");
  Param p;
  p.value = number(pj["value"], where, f + ".value");
  p.source = text(pj["source"], where, f + ".source");
  if (p.source.empty()) bad(where, f + ".source: say where the value comes from");
  if (text(pj["unit"], where, f + ".unit") != s.unit)
    bad(where, f + ".unit: is '" + pj["unit"].get<std::string>() + "', expected '" + s.unit + "'");
  const json& rg = pj["range"];
  if (!rg.is_array() || rg.size() != 2) bad(where, f + ".range: must be [lo, hi]");
  p.range_lo = number(rg[0], where, f + ".range[0]");
  p.range_hi = number(rg[1], where, f + ".range[1]");
  p.range_source = text(pj["range_source"], where, f + ".range_source");
  if (p.range_source.empty()) bad(where, f + ".range_source: say where the physical range comes from");
  if (!(p.range_lo <= p.range_hi) || p.range_lo < s.min || p.range_hi > s.max)
    bad(where, f + ".range: [" + fmt(p.range_lo) + ", " + fmt(p.range_hi) + "] must be ordered and lie in [" +
                   fmt(s.min) + ", " + fmt(s.max) + "] " + s.unit);
  if (p.value < p.range_lo || p.value > p.range_hi)
    bad(where, f + ".value: " + fmt(p.value) + " " + s.unit + " is outside its physical range [" + fmt(p.range_lo) +
                   ", " + fmt(p.range_hi) + "] " + s.unit + " (" + p.range_source + ")");
  if (pj.contains("fit")) {
    const json& r = pj["fit"];
    if (!r.is_array() || r.size() != 2) bad(where, f + ".fit: must be [lo, hi]");
    p.free = true;
    p.lo = number(r[0], where, f + ".fit[0]");
    p.hi = number(r[1], where, f + ".fit[1]");
    if (!(p.lo <= p.value && p.value <= p.hi) || p.lo < p.range_lo || p.hi > p.range_hi)
      bad(where, f + ".fit: [" + fmt(p.lo) + ", " + fmt(p.hi) + "] must hold the value and lie in the physical range [" +
                     fmt(p.range_lo) + ", " + fmt(p.range_hi) + "] " + s.unit);
  }
  return p;
}

// The machine's shape: GPUs per node and nodes.
void parse_topology(const json& j, const std::string& where, Machine& m) {
  const json& topo = j["topology"];
  if (!topo.is_object()) bad(where, "topology: must be an object");
  only_keys(topo, where + ": topology", {"gpus_per_node", "nodes"});
  if (!topo.contains("gpus_per_node") || !topo.contains("nodes")) bad(where, "topology: needs gpus_per_node and nodes");
  m.gpus_per_node = static_cast<int>(whole(topo["gpus_per_node"], where, "topology.gpus_per_node", 1, 1024));
  m.nodes = static_cast<int>(whole(topo["nodes"], where, "topology.nodes", 1, 65536));

}

// Every parameter of parameter_specs(), and no other.
void parse_parameters(const json& j, const std::string& where, Machine& m) {
  const json& ps = j["parameters"];
  if (!ps.is_object()) bad(where, "parameters: must be an object");
  std::set<std::string> known;
  for (const auto& s : parameter_specs()) known.insert(s.name);
  for (auto it = ps.begin(); it != ps.end(); ++it)
    if (!known.count(it.key())) bad(where, "parameters: unknown parameter '" + it.key() + "'");
  for (const ParamSpec& s : parameter_specs()) m.params[s.name] = parse_parameter(ps, s, where);
}

// Each point of the profile `key`: an array of objects, each with exactly `keys` ("source" among
// them, which must say where the point comes from); `point(a, f)` reads the rest (f: its name in
// messages) and returns it with its source still to set. `required`: the array must be there
// and hold a point.
template <class Point, class ReadPoint>
void each_point(const json& j, const char* key, const std::string& where, const std::set<std::string>& keys,
                bool required, std::vector<Point>& into, ReadPoint point) {
  if (!required && !j.contains(key)) return;
  const json& arr = j[key];
  if (!arr.is_array() || (required && arr.empty()))
    bad(where, std::string(key) + (required ? ": must be a non-empty array of measured points"
                                            : ": must be an array of measured points"));
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string f = std::string(key) + "[" + std::to_string(i) + "]";
    const json& a = arr[i];
    if (!a.is_object()) bad(where, f + ": must be an object");
    only_keys(a, where + ": " + f, keys);
    for (const std::string& k : keys)
      if (!a.contains(k)) bad(where, f + ": missing '" + k + "'");
    Point pt = point(a, f);
    pt.source = text(a["source"], where, f + ".source");
    if (pt.source.empty()) bad(where, f + ".source: say where the rate comes from");
    into.push_back(pt);
  }
}

// The measured attention rates the model interpolates between.
void parse_attention_profile(const json& j, const std::string& where, Machine& m) {
  each_point(j, "attention_profile", where, {"head_dim", "batch", "heads", "seq", "tflops", "source"}, true,
             m.attention, [&](const json& a, const std::string& f) {
               AttentionPoint pt;
               pt.head_dim = static_cast<int>(whole(a["head_dim"], where, f + ".head_dim", 1, 1024));
               pt.batch = whole(a["batch"], where, f + ".batch", 1, 1 << 20);
               pt.heads = whole(a["heads"], where, f + ".heads", 1, 1 << 20);
               pt.seq = whole(a["seq"], where, f + ".seq", 1, int64_t{1} << 40);
               pt.tflops = number(a["tflops"], where, f + ".tflops");
               if (!(pt.tflops > 0)) bad(where, f + ".tflops: must be positive");
               return pt;
             });
}

// The measured norm+RoPE rates by kind, dtype and head_dim (optional), each bounded by HBM.
void parse_norm_rope_profile(const json& j, const std::string& where, Machine& m) {
  each_point(j, "norm_rope_profile", where, {"norm", "dtype", "head_dim", "gbs", "source"}, false, m.norm_rope,
             [&](const json& a, const std::string& f) {
               NormRopePoint pt;
               pt.norm = text(a["norm"], where, f + ".norm");
               pt.dtype = text(a["dtype"], where, f + ".dtype");
               if (std::find(std::begin(kNormKindNames), std::end(kNormKindNames), pt.norm) == std::end(kNormKindNames))
                 bad(where, f + ".norm: '" + pt.norm + "' is not none, rms, rms_across_heads or layer");
               if (std::find(std::begin(kDTypeNames), std::end(kDTypeNames), pt.dtype) == std::end(kDTypeNames))
                 bad(where, f + ".dtype: '" + pt.dtype + "' is not bf16, fp16 or fp32");
               pt.head_dim = static_cast<int>(whole(a["head_dim"], where, f + ".head_dim", 1, 1024));
               pt.gbs = number(a["gbs"], where, f + ".gbs");
               const Param& hbm = m.params.at("hbm_gbs");
               if (!(pt.gbs > 0) || pt.gbs > hbm.range_hi)
                 bad(where, f + ".gbs: " + fmt(pt.gbs) + " GB/s is outside its physical range (0, " + fmt(hbm.range_hi) +
                                "] GB/s (hbm_gbs' range: read + write cannot exceed HBM)");
               return pt;
             });
}

// The measured GEMM rates by shape (optional), each below the dense bf16 peak.
void parse_gemm_profile(const json& j, const std::string& where, Machine& m) {
  each_point(j, "gemm_profile", where, {"m", "n", "k", "tflops", "source"}, false, m.gemm,
             [&](const json& a, const std::string& f) {
               GemmPoint pt;
               pt.m = whole(a["m"], where, f + ".m", 1, int64_t{1} << 40);
               pt.n = whole(a["n"], where, f + ".n", 1, int64_t{1} << 40);
               pt.k = whole(a["k"], where, f + ".k", 1, int64_t{1} << 40);
               pt.tflops = number(a["tflops"], where, f + ".tflops");
               const Param& peak = m.params.at("gemm_tflops");
               if (!(pt.tflops > 0) || pt.tflops > peak.range_hi)
                 bad(where, f + ".tflops: " + fmt(pt.tflops) + " TFLOP/s is outside its physical range (0, " +
                                fmt(peak.range_hi) + "] TFLOP/s (gemm_tflops' range: " + peak.range_source + ")");
               return pt;
             });
}

}  // namespace

Machine parse_machine(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    bad(where, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(where, "must be a JSON object");
  only_keys(j, where,
            {"name", "description", "topology", "parameters", "attention_profile", "norm_rope_profile", "gemm_profile"});
  Machine m;
  for (const char* f : {"name", "topology", "parameters", "attention_profile"})
    if (!j.contains(f)) bad(where, std::string("missing field '") + f + "'");
  m.name = text(j["name"], where, "name");
  if (m.name.empty()) bad(where, "name: must not be empty");
  if (j.contains("description")) m.description = text(j["description"], where, "description");

  parse_topology(j, where, m);
  parse_parameters(j, where, m);
  parse_attention_profile(j, where, m);
  parse_norm_rope_profile(j, where, m);
  parse_gemm_profile(j, where, m);
  return m;
}

std::string machine_path(const std::string& name_or_path) {
  const std::string name = name_or_path.empty() ? "h200-nvlink" : name_or_path;
  if (name.find('/') != std::string::npos || name.find(".json") != std::string::npos) return name;
  // Where the shipped machines are: $ULYSSES_MACHINE_DIR if set, else beside an installed
  // program (<prefix>/bin/../share/ulysses-ipc/machines, what `cmake --install` writes),
  // else the source tree the program was built from.
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("ULYSSES_MACHINE_DIR"); env != nullptr && *env != '\0') dirs.emplace_back(env);
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / "share" / "ulysses-ipc" / "machines").string());
  dirs.emplace_back(ULYSSES_MACHINE_DIR);
  for (const std::string& d : dirs) {
    const std::string path = d + "/" + name + ".json";
    if (std::filesystem::exists(path, ec)) return path;
  }
  return dirs.back() + "/" + name + ".json";  // not found: the error names the source tree's place
}

Machine load_machine(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the machine description");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_machine(s.str(), path);
}

std::string machine_to_json(const Machine& m) {
  json j;
  j["name"] = m.name;
  j["description"] = m.description;
  j["topology"] = {{"gpus_per_node", m.gpus_per_node}, {"nodes", m.nodes}};
  json ps = json::object();
  for (const ParamSpec& s : parameter_specs()) {
    const Param& p = m.params.at(s.name);
    json pj = {{"value", p.value},
               {"unit", s.unit},
               {"source", p.source},
               {"range", {p.range_lo, p.range_hi}},
               {"range_source", p.range_source}};
    if (p.free) pj["fit"] = {p.lo, p.hi};
    ps[s.name] = pj;
  }
  j["parameters"] = ps;
  json att = json::array();
  for (const auto& a : m.attention)
    att.push_back({{"head_dim", a.head_dim}, {"batch", a.batch}, {"heads", a.heads}, {"seq", a.seq},
                   {"tflops", a.tflops}, {"source", a.source}});
  j["attention_profile"] = att;
  if (!m.norm_rope.empty()) {
    json nr = json::array();
    for (const auto& a : m.norm_rope)
      nr.push_back({{"norm", a.norm}, {"dtype", a.dtype}, {"head_dim", a.head_dim}, {"gbs", a.gbs}, {"source", a.source}});
    j["norm_rope_profile"] = nr;
  }
  if (!m.gemm.empty()) {
    json gp = json::array();
    for (const auto& a : m.gemm)
      gp.push_back({{"m", a.m}, {"n", a.n}, {"k", a.k}, {"tflops", a.tflops}, {"source", a.source}});
    j["gemm_profile"] = gp;
  }
  return j.dump(2) + "\n";
}

}  // namespace uipc::model
