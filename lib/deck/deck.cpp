// The input deck: reading (every field's type and shape checked before use), validation
// of each case on its own and against a world size, writing, and the readable form.
#include "lib/deck/deck.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/transport/transports.hpp"
#include "lib/deck/schedules.hpp"
#include "lib/hdf5/hdf5_file.hpp"

namespace uipc {

namespace {

// Case attributes in the order the writer stores them (docs/deck.md, same order).
const std::vector<std::string>& case_fields() {
  static const std::vector<std::string> f = {
      "name",      "description", "batch",      "seq_len",    "heads",      "head_dim",   "dtype",      "qk_norm",
      "norm_eps",  "rope",        "rope_theta", "fused_qkv",  "ulysses",    "tp",         "transports", "schedules",
      "warmup",    "iterations",  "repeats",    "seed",       "tol_max_abs", "tol_rel_l2", "watchdog_s", "ablations",
      "rank_order", "steps",      "step_similarity", "full_steps", "vmajor_threshold", "vmajor_tol_rel_l2"};
  return f;
}
const std::vector<std::string> kRequiredFields = {"batch", "seq_len", "heads", "head_dim", "dtype"};
const std::vector<std::string> kRootAttrs = {"schema_version", "cases", "description"};

// Absurdity bounds: far beyond any real DiT layer, small enough that a typo (an extra
// zero or three) is caught before we allocate.
constexpr int64_t kMaxBatch = 1024;
constexpr int64_t kMaxSeqLen = 4194304;
constexpr int kMaxHeads = 1024;
constexpr int kMaxHeadDim = 512;
constexpr int64_t kMaxTensorElems = int64_t{1} << 36;  // B*S*H*D of one Q/K/V/O tensor
constexpr int kMaxUlysses = 64;
constexpr int kMaxSteps = 1000;
constexpr int kMaxWarmup = 10000;
constexpr int kMaxIterations = 100000;
constexpr int kMaxRepeats = 1000;
constexpr int64_t kMaxTimedLayers = 100000;  // repeats * iterations: the report keeps them all
constexpr double kMaxWatchdogS = 86400.0;
constexpr size_t kMaxCases = 1024;
constexpr size_t kMaxNameLen = 128;
constexpr size_t kMaxListItems = 64;

// Shortest decimal that reads back to the same value.
std::string fmt_double(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}
std::string fmt_float(float v) {
  char buf[64];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

[[noreturn]] void bad(const Case& c, const std::string& field, const std::string& what) {
  throw InputError("case '" + c.name + "': " + field + ": " + what);
}

template <class T>
void check_range(const Case& c, const std::string& field, T v, T lo, T hi) {
  if (v < lo || v > hi)
    bad(c, field, std::to_string(v) + " is out of range (allowed: " + std::to_string(lo) + " .. " +
                      std::to_string(hi) + ")");
}

void check_positive_finite(const Case& c, const std::string& field, double v, double hi) {
  if (!std::isfinite(v) || v <= 0 || v > hi)
    bad(c, field, fmt_double(v) + " is out of range (allowed: > 0 and <= " + fmt_double(hi) + ")");
}

void check_names(const Case& c, const std::string& field, const std::vector<std::string>& v,
                 const std::vector<std::string>& known) {
  if (v.empty()) bad(c, field, "empty list (allowed: " + join(known) + ")");
  std::set<std::string> seen;
  for (const std::string& s : v) {
    if (std::find(known.begin(), known.end(), s) == known.end())
      bad(c, field, "unknown name '" + s + "' (allowed: " + join(known) + ")");
    if (!seen.insert(s).second) bad(c, field, "duplicate name '" + s + "'");
  }
}

bool valid_case_name(const std::string& n) {
  if (n.empty() || n.size() > kMaxNameLen) return false;
  if (!std::isalnum(static_cast<unsigned char>(n[0]))) return false;
  for (char ch : n) {
    unsigned char u = static_cast<unsigned char>(ch);
    if (!std::isalnum(u) && ch != '_' && ch != '-' && ch != '.' && ch != '+') return false;
  }
  return true;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> v = {"bf16", "fp16", "fp32"};
  return v;
}
const std::vector<std::string>& norm_names() {
  static const std::vector<std::string> v = {"none", "rms", "rms_across_heads", "layer"};
  return v;
}
const std::vector<std::string>& rope_names() {
  static const std::vector<std::string> v = {"none", "1d"};
  return v;
}
const std::vector<std::string>& rank_order_names() {
  static const std::vector<std::string> v = {"tp_outer", "tp_inner"};
  return v;
}

// Index of s in names, or fail naming the field and the allowed values.
int parse_enum(const h5::Object& g, const std::string& field, const std::string& s,
               const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == s) return static_cast<int>(i);
  g.fail(field, "unknown value '" + s + "' (allowed: " + join(names) + ")");
}

int read_int32(const h5::Object& g, const std::string& field) {
  int64_t v = g.read_int(field);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    g.fail(field, std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

float read_float32(const h5::Object& g, const std::string& field) {
  double v = g.read_double(field);
  if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max())
    g.fail(field, fmt_double(v) + " does not fit a 32-bit float");
  return static_cast<float>(v);
}

// A case's fields from group g. In a deck, unknown attributes are refused (a misspelt
// optional field would otherwise be silently replaced by its default); a report's case
// group holds the deck's fields beside its own (`runs`), which are left alone.
Case read_case(const h5::Group& g, const std::string& name, bool deck_group = true) {
  if (deck_group)
    for (const std::string& a : g.attr_names())
      if (std::find(case_fields().begin(), case_fields().end(), a) == case_fields().end())
        g.fail(a, "unknown field (known: " + join(case_fields()) + ")");
  for (const std::string& f : kRequiredFields)
    if (!g.has_attr(f)) g.fail(f, "missing (required field)");

  Case c;
  c.name = name;
  if (g.has_attr("name")) {
    std::string n = g.read_string("name");
    if (n != name) g.fail("name", "'" + n + "' differs from the case's group name '" + name + "'");
  }
  if (g.has_attr("description")) c.description = g.read_string("description");
  c.batch = g.read_int("batch");
  c.seq_len = g.read_int("seq_len");
  c.heads = read_int32(g, "heads");
  c.head_dim = read_int32(g, "head_dim");
  c.dtype = static_cast<DType>(parse_enum(g, "dtype", g.read_string("dtype"), dtype_names()));
  if (g.has_attr("qk_norm")) c.qk_norm = static_cast<NormKind>(parse_enum(g, "qk_norm", g.read_string("qk_norm"), norm_names()));
  if (g.has_attr("norm_eps")) c.norm_eps = read_float32(g, "norm_eps");
  if (g.has_attr("rope")) c.rope = static_cast<RopeKind>(parse_enum(g, "rope", g.read_string("rope"), rope_names()));
  if (g.has_attr("rope_theta")) c.rope_theta = read_float32(g, "rope_theta");
  if (g.has_attr("fused_qkv")) c.fused_qkv = g.read_bool("fused_qkv");
  if (g.has_attr("ulysses")) c.ulysses = read_int32(g, "ulysses");
  if (g.has_attr("tp")) c.tp = read_int32(g, "tp");
  if (g.has_attr("rank_order"))
    c.rank_order = static_cast<RankOrder>(parse_enum(g, "rank_order", g.read_string("rank_order"), rank_order_names()));
  if (g.has_attr("transports")) c.transports = g.read_string_list("transports", kMaxListItems);
  if (g.has_attr("schedules")) c.schedules = g.read_string_list("schedules", kMaxListItems);
  if (g.has_attr("ablations")) c.ablations = g.read_string_list("ablations", kMaxListItems);
  if (g.has_attr("warmup")) c.warmup = read_int32(g, "warmup");
  if (g.has_attr("iterations")) c.iterations = read_int32(g, "iterations");
  if (g.has_attr("repeats")) c.repeats = read_int32(g, "repeats");
  if (g.has_attr("seed")) c.seed = g.read_uint64("seed");
  if (g.has_attr("tol_max_abs")) c.tol_max_abs = g.read_double("tol_max_abs");
  if (g.has_attr("tol_rel_l2")) c.tol_rel_l2 = g.read_double("tol_rel_l2");
  if (g.has_attr("watchdog_s")) c.watchdog_s = g.read_double("watchdog_s");
  if (g.has_attr("steps")) c.steps = read_int32(g, "steps");
  if (g.has_attr("step_similarity")) c.step_similarity = g.read_double("step_similarity");
  if (g.has_attr("full_steps")) c.full_steps = read_int32(g, "full_steps");
  if (g.has_attr("vmajor_threshold")) c.vmajor_threshold = g.read_double("vmajor_threshold");
  if (g.has_attr("vmajor_tol_rel_l2")) c.vmajor_tol_rel_l2 = g.read_double("vmajor_tol_rel_l2");
  return c;
}

void check_deck_cases(const Deck& deck, const std::string& path) {
  if (deck.cases.empty()) throw InputError(path + ": cases: the deck has no cases");
  if (deck.cases.size() > kMaxCases)
    throw InputError(path + ": cases: " + std::to_string(deck.cases.size()) + " cases (at most " +
                     std::to_string(kMaxCases) + ")");
  std::set<std::string> seen;
  for (const Case& c : deck.cases) {
    try {
      validate_case(c);
    } catch (const InputError& e) {
      throw InputError(path + ": " + e.what());
    }
    if (!seen.insert(c.name).second) throw InputError(path + ": cases: duplicate case name '" + c.name + "'");
  }
}

// The names of a table's rows, in table order.
template <typename Row>
std::vector<std::string> names_of(const std::vector<Row>& table) {
  std::vector<std::string> names;
  for (const Row& r : table) names.push_back(r.name);
  return names;
}

}  // namespace

const std::vector<std::string>& known_transports() {
  static const std::vector<std::string> v = names_of(transport_table());
  return v;
}

const std::vector<AblationKind>& ablation_table() {
  static const std::vector<AblationKind> table = {
      {"own-slice-copy", "the transport copies a rank's own slice instead of its producer writing it into the target",
       false, false},
      {"no-pitched-copies", "strided views packed contiguous before the scatter", false, true},
      {"no-grouped-handshake", "one handshake per tensor instead of one per Q/K/V group", false, false},
      {"normal-priority", "the copy stream at normal priority", true, false},
      {"no-target-cache", "targets allocated and exchanged every layer", true, false},
      {"no-graphs", "every layer issued op by op from the host instead of replayed as a captured graph", false, false},
  };
  return table;
}

const std::vector<std::string>& known_ablations() {
  static const std::vector<std::string> v = names_of(ablation_table());
  return v;
}

const AblationKind* find_ablation(const std::string& name) {
  for (const auto& a : ablation_table())
    if (name == a.name) return &a;
  return nullptr;
}

bool transport_is_exact(const std::string& name) {
  const TransportKind* t = find_transport_kind(name);
  return !t || t->exact;
}

const std::vector<std::string>& known_schedules() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names;
    for (const auto& s : schedule_table()) names.push_back(s.name);
    return names;
  }();
  return v;
}

const char* norm_kind_name(NormKind k) {
  switch (k) {
    case NormKind::kNone: return "none";
    case NormKind::kRmsPerHead: return "rms";
    case NormKind::kRmsAcrossHeads: return "rms_across_heads";
    case NormKind::kLayerPerHead: return "layer";
  }
  return "?";
}

const char* rank_order_name(RankOrder o) {
  switch (o) {
    case RankOrder::kTpOuter: return "tp_outer";
    case RankOrder::kTpInner: return "tp_inner";
  }
  return "?";
}

const char* rope_kind_name(RopeKind k) {
  switch (k) {
    case RopeKind::kNone: return "none";
    case RopeKind::k1D: return "1d";
  }
  return "?";
}

void validate_case(const Case& c) {
  if (!valid_case_name(c.name))
    bad(c, "name",
        "must be 1.." + std::to_string(kMaxNameLen) +
            " characters of letters, digits, '_', '-', '.', '+', starting with a letter or digit");
  if (c.description.size() > 4096) bad(c, "description", "longer than 4096 characters");
  check_range<int64_t>(c, "batch", c.batch, 1, kMaxBatch);
  check_range<int64_t>(c, "seq_len", c.seq_len, 1, kMaxSeqLen);
  check_range<int>(c, "heads", c.heads, 1, kMaxHeads);
  check_range<int>(c, "head_dim", c.head_dim, 1, kMaxHeadDim);
  int64_t elems = c.batch * c.seq_len * c.width();
  if (elems > kMaxTensorElems)
    bad(c, "seq_len",
        "batch*seq_len*heads*head_dim = " + std::to_string(elems) + " elements per tensor is absurd (at most " +
            std::to_string(kMaxTensorElems) + ")");
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16 && c.dtype != DType::kFP32)
    bad(c, "dtype", "unknown value (allowed: " + join(dtype_names()) + ")");
  if (static_cast<int>(c.qk_norm) < 0 || static_cast<int>(c.qk_norm) > 3)
    bad(c, "qk_norm", "unknown value (allowed: " + join(norm_names()) + ")");
  if (c.rope != RopeKind::kNone && c.rope != RopeKind::k1D)
    bad(c, "rope", "unknown value (allowed: " + join(rope_names()) + ")");
  if (c.rope == RopeKind::k1D && c.head_dim % 2 != 0)
    bad(c, "head_dim", std::to_string(c.head_dim) + " is odd; RoPE rotates pairs, so it must be even");
  if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0 || c.norm_eps >= 1)
    bad(c, "norm_eps", fmt_float(c.norm_eps) + " is out of range (allowed: > 0 and < 1)");
  check_positive_finite(c, "rope_theta", c.rope_theta, 1e12);

  if (c.tp != 1 && c.tp != 2 && c.tp != 4 && c.tp != 8)
    bad(c, "tp", std::to_string(c.tp) + " is not allowed (allowed: 1, 2, 4, 8)");
  check_range<int>(c, "ulysses", c.ulysses, 0, kMaxUlysses);
  if (c.heads % c.tp != 0)
    bad(c, "heads", std::to_string(c.heads) + " is not divisible by tp = " + std::to_string(c.tp));
  if (c.ulysses > 0) {
    // Uneven splits are fine (balanced, docs/math.md); every rank needs a head and a token.
    int ht = c.heads / c.tp;
    if (ht < c.ulysses)
      bad(c, "heads",
          "heads/tp = " + std::to_string(ht) + " is fewer than ulysses = " + std::to_string(c.ulysses) +
              " (every rank needs a head after the scatter)");
    if (c.seq_len < c.ulysses)
      bad(c, "seq_len", std::to_string(c.seq_len) + " tokens are fewer than ulysses = " + std::to_string(c.ulysses));
  }
  if (c.qk_norm == NormKind::kRmsAcrossHeads && c.tp != 1)
    bad(c, "qk_norm",
        "rms_across_heads needs all heads of a token on one rank, so only tp = 1 (this case has tp = " +
            std::to_string(c.tp) + ")");

  if (c.rank_order != RankOrder::kTpOuter && c.rank_order != RankOrder::kTpInner)
    bad(c, "rank_order", "unknown value (allowed: " + join(rank_order_names()) + ")");
  check_names(c, "transports", c.transports, known_transports());
  for (size_t i = 0; i < c.transports.size(); ++i) {
    if (transport_is_exact(c.transports[i])) continue;
    bool exact_before = false;
    for (size_t j = 0; j < i; ++j) exact_before = exact_before || transport_is_exact(c.transports[j]);
    if (!exact_before)
      bad(c, "transports",
          "'" + c.transports[i] + "' is approximate: list an exact transport before it (its error is measured "
          "against that run's result of the same step)");
  }
  check_names(c, "schedules", c.schedules, known_schedules());
  if (!c.ablations.empty()) check_names(c, "ablations", c.ablations, known_ablations());
  check_range<int>(c, "warmup", c.warmup, 0, kMaxWarmup);
  check_range<int>(c, "iterations", c.iterations, 1, kMaxIterations);
  check_range<int>(c, "repeats", c.repeats, 1, kMaxRepeats);
  int64_t timed = static_cast<int64_t>(c.repeats) * c.iterations;
  if (timed > kMaxTimedLayers)
    bad(c, "iterations",
        "repeats*iterations = " + std::to_string(timed) + " (at most " + std::to_string(kMaxTimedLayers) +
            ": the report keeps every timed layer of every rank)");
  check_positive_finite(c, "tol_max_abs", c.tol_max_abs, std::numeric_limits<double>::max());
  check_positive_finite(c, "tol_rel_l2", c.tol_rel_l2, std::numeric_limits<double>::max());
  check_positive_finite(c, "watchdog_s", c.watchdog_s, kMaxWatchdogS);
  check_range<int>(c, "steps", c.steps, 1, kMaxSteps);
  if (timed * c.steps > kMaxTimedLayers)
    bad(c, "steps",
        "repeats*iterations*steps = " + std::to_string(timed * c.steps) + " (at most " +
            std::to_string(kMaxTimedLayers) + ": the report keeps every timed layer of every rank)");
  if (!std::isfinite(c.step_similarity) || c.step_similarity < 0.5 || c.step_similarity > 1)
    bad(c, "step_similarity", fmt_double(c.step_similarity) + " is out of range (allowed: 0.5 .. 1)");
  check_range<int>(c, "full_steps", c.full_steps, 0, c.steps);
  if (!std::isfinite(c.vmajor_threshold) || c.vmajor_threshold < 0 || c.vmajor_threshold > 10)
    bad(c, "vmajor_threshold", fmt_double(c.vmajor_threshold) + " is out of range (allowed: 0 .. 10)");
  check_positive_finite(c, "vmajor_tol_rel_l2", c.vmajor_tol_rel_l2, std::numeric_limits<double>::max());
}

void validate_case_for_world(const Case& c, int world) {
  if (world < 1) throw InputError("case '" + c.name + "': world size " + std::to_string(world) + " is not positive");
  if (c.tp < 1) bad(c, "tp", std::to_string(c.tp) + " is not allowed (allowed: 1, 2, 4, 8)");
  if (c.ulysses < 0) bad(c, "ulysses", std::to_string(c.ulysses) + " is negative");
  if (c.ulysses == 0 && world % c.tp != 0)
    throw InputError("case '" + c.name + "' needs a multiple of tp = " + std::to_string(c.tp) +
                     " ranks (ulysses = 0: all ranks), this run has " + std::to_string(world));
  int u = c.ulysses_for(world);
  if (u < 1 || static_cast<int64_t>(c.tp) * u != world)
    throw InputError("case '" + c.name + "' needs tp*ulysses = " + std::to_string(static_cast<int64_t>(c.tp) * u) +
                     " ranks, this run has " + std::to_string(world));
  if (u > kMaxUlysses)
    bad(c, "ulysses", "ulysses = " + std::to_string(u) + " on " + std::to_string(world) + " ranks (at most " +
                          std::to_string(kMaxUlysses) + ")");
  if (c.heads % c.tp != 0)
    bad(c, "heads", std::to_string(c.heads) + " is not divisible by tp = " + std::to_string(c.tp));
  int ht = c.heads / c.tp;
  if (ht < u)
    bad(c, "heads",
        "heads/tp = " + std::to_string(c.heads) + "/" + std::to_string(c.tp) + " is fewer than ulysses = " +
            std::to_string(u) + " (this run has " + std::to_string(world) + " ranks; every rank needs a head)");
  if (c.seq_len < u)
    bad(c, "seq_len",
        std::to_string(c.seq_len) + " tokens are fewer than ulysses = " + std::to_string(u) + " (this run has " +
            std::to_string(world) + " ranks)");
}

// The cases a file lists in its root attribute `cases`, one group /cases/<name> each, in
// that order: a deck's (`kind` "deck") or a report's (its case groups also hold the run's
// own attributes and groups, which are left alone; `defaulted` gets "case: field" for each
// deck field the group lacks).
std::vector<Case> read_listed_cases(const h5::Group& root, const std::string& path, const char* kind,
                                    std::vector<std::string>* defaulted = nullptr) {
  const bool deck_file = defaulted == nullptr;
  if (!root.has_attr("cases")) root.fail("cases", "missing (required root attribute: the list of case names)");
  std::vector<std::string> names = root.read_string_list("cases", kMaxCases);
  if (names.empty()) root.fail("cases", std::string("the ") + kind + " has no cases");
  std::set<std::string> seen;
  for (const std::string& n : names) {
    if (!valid_case_name(n))
      root.fail("cases", "'" + n + "' is not a valid case name (letters, digits, '_', '-', '.', '+')");
    if (!seen.insert(n).second) root.fail("cases", "duplicate case name '" + n + "'");
  }
  h5::Group cases = root.open_group("cases");
  for (const std::string& member : cases.link_names())
    if (!seen.count(member))
      cases.fail(member, "group is not listed in the root attribute 'cases' (listed: " + join(names) + ")");
  std::vector<Case> out;
  for (const std::string& n : names) {
    if (!cases.has_link(n))
      cases.fail(n, "missing: the root attribute 'cases' lists it but there is no group /cases/" + n);
    h5::Group g = cases.open_group(n);
    g.set_context(path + ": case '" + n + "'");
    out.push_back(read_case(g, n, deck_file));
    if (defaulted)
      for (const std::string& field : case_fields())
        if (field != "name" && !g.has_attr(field)) defaulted->push_back(n + ": " + field);
  }
  return out;
}

Deck read_deck(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  Deck deck;
  {
    h5::Group root = f.root();
    root.set_context(path);
    for (const std::string& a : root.attr_names())
      if (std::find(kRootAttrs.begin(), kRootAttrs.end(), a) == kRootAttrs.end())
        root.fail(a, "unknown root attribute (known: " + join(kRootAttrs) + ")");
    if (!root.has_attr("schema_version")) root.fail("schema_version", "missing (required root attribute)");
    int64_t version = root.read_int("schema_version");
    if (version != kDeckSchemaVersion)
      root.fail("schema_version", "unknown schema version " + std::to_string(version) + " (this program reads " +
                                      std::to_string(kDeckSchemaVersion) + ")");
    deck.schema_version = static_cast<int>(version);
    if (root.has_attr("description")) deck.description = root.read_string("description");
    deck.cases = read_listed_cases(root, path, "deck");
  }
  f.close();
  check_deck_cases(deck, path);
  return deck;
}

ReportCases read_report_cases(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  ReportCases out;
  {
    h5::Group root = f.root();
    root.set_context(path);
    if (!root.has_attr("software") || root.read_string("software") != "ulysses-ipc")
      root.fail("software", "missing or not 'ulysses-ipc': not a report of this program (a deck? 'deck show' reads those)");
    out.deck.cases = read_listed_cases(root, path, "report", &out.defaulted);
    if (root.has_attr("deck")) out.deck.description = "the cases of report " + path + " (its deck: " + root.read_string("deck") + ")";
  }
  f.close();
  check_deck_cases(out.deck, path);
  return out;
}

void write_case_attributes(const h5::Group& g, const Case& c) {
  g.write_attr("name", c.name);
  g.write_attr("description", c.description);
  g.write_attr("batch", c.batch);
  g.write_attr("seq_len", c.seq_len);
  g.write_attr("heads", c.heads);
  g.write_attr("head_dim", c.head_dim);
  g.write_attr("dtype", dtype_name(c.dtype));
  g.write_attr("qk_norm", norm_kind_name(c.qk_norm));
  g.write_attr("norm_eps", static_cast<double>(c.norm_eps));
  g.write_attr("rope", rope_kind_name(c.rope));
  g.write_attr("rope_theta", static_cast<double>(c.rope_theta));
  g.write_attr("fused_qkv", c.fused_qkv ? 1 : 0);
  g.write_attr("ulysses", c.ulysses);
  g.write_attr("tp", c.tp);
  g.write_attr("transports", c.transports);
  g.write_attr("schedules", c.schedules);
  if (!c.ablations.empty()) g.write_attr("ablations", c.ablations);
  g.write_attr("warmup", c.warmup);
  g.write_attr("iterations", c.iterations);
  g.write_attr("repeats", c.repeats);
  g.write_attr("seed", c.seed);
  g.write_attr("tol_max_abs", c.tol_max_abs);
  g.write_attr("tol_rel_l2", c.tol_rel_l2);
  g.write_attr("watchdog_s", c.watchdog_s);
  g.write_attr("rank_order", rank_order_name(c.rank_order));
  g.write_attr("steps", c.steps);
  g.write_attr("step_similarity", c.step_similarity);
  g.write_attr("full_steps", c.full_steps);
  g.write_attr("vmajor_threshold", c.vmajor_threshold);
  g.write_attr("vmajor_tol_rel_l2", c.vmajor_tol_rel_l2);
}

void write_deck(const Deck& deck, const std::string& path) {
  check_deck_cases(deck, path);
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    h5::File f = h5::File::create(tmp);
    {
      h5::Group root = f.root();
      root.write_attr("schema_version", kDeckSchemaVersion);
      std::vector<std::string> names;
      for (const Case& c : deck.cases) names.push_back(c.name);
      root.write_attr("cases", names);
      root.write_attr("description", deck.description);
      h5::Group cases = root.create_group("cases");
      for (const Case& c : deck.cases) write_case_attributes(cases.create_group(c.name), c);
    }
    f.close();
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw RuntimeError(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

std::string format_deck(const Deck& deck) {
  std::ostringstream o;
  o << "deck (schema_version " << deck.schema_version << "), " << deck.cases.size()
    << (deck.cases.size() == 1 ? " case" : " cases") << "\n";
  if (!deck.description.empty()) o << "  " << deck.description << "\n";
  for (const Case& c : deck.cases) {
    o << "\ncase " << c.name << "\n";
    if (!c.description.empty()) o << "  description  " << c.description << "\n";
    o << "  shape        batch " << c.batch << ", seq_len " << c.seq_len << " tokens, heads " << c.heads
      << ", head_dim " << c.head_dim << " (width " << c.width() << "), dtype " << dtype_name(c.dtype) << "\n";
    o << "  qk_norm      " << norm_kind_name(c.qk_norm);
    if (c.qk_norm != NormKind::kNone) o << " (norm_eps " << fmt_float(c.norm_eps) << ")";
    o << "\n  rope         " << rope_kind_name(c.rope);
    if (c.rope != RopeKind::kNone) o << " (rope_theta " << fmt_float(c.rope_theta) << ")";
    o << "\n  projection   " << (c.fused_qkv ? "fused QKV (fused_qkv 1)" : "separate Q, K, V (fused_qkv 0)") << "\n";
    o << "  layout       ulysses " << c.ulysses << (c.ulysses == 0 ? " (all ranks / tp)" : "") << ", tp " << c.tp
      << ", rank_order " << rank_order_name(c.rank_order) << "\n";
    o << "  transports   " << join(c.transports) << "\n";
    o << "  schedules    " << join(c.schedules) << "\n";
    if (!c.ablations.empty()) o << "  ablations    " << join(c.ablations) << " (each a run beside the full design)\n";
    o << "  run          warmup " << c.warmup << ", iterations " << c.iterations << ", repeats " << c.repeats
      << " (layers, per transport x schedule)\n";
    o << "  seed         " << c.seed << "\n";
    o << "  tolerance    max_abs " << fmt_double(c.tol_max_abs) << ", rel_l2 " << fmt_double(c.tol_rel_l2)
      << " (parity vs dense reference)\n";
    o << "  watchdog     " << fmt_double(c.watchdog_s) << " s\n";
    o << "  steps        " << c.steps << " (step_similarity " << fmt_double(c.step_similarity) << ", full_steps "
      << c.full_steps << "; hier-vmajor: vmajor_threshold " << fmt_double(c.vmajor_threshold)
      << ", vmajor_tol_rel_l2 " << fmt_double(c.vmajor_tol_rel_l2) << ")\n";
  }
  return o.str();
}

}  // namespace uipc
