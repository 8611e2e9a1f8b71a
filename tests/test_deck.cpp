// The deck: write/read round trip, h5py-style decks, every class of bad input giving an
// InputError that names the field, and `ulysses-ipc deck new|show|presets`.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "tests/deck_testing.hpp"
#include "base/error.hpp"
#include "lib/deck/deck.hpp"
#include "app/deck_cli.hpp"

namespace fs = std::filesystem;
using uipc::Case;
using uipc::Deck;
using uipc::InputError;

namespace {

using uipc::testing::TempDir;
using uipc::testing::expect_same_case;

// A fresh directory per test, removed afterwards.

// ---------------------------------------------------------------- raw deck writer
// Decks written straight with the HDF5 C API, the way h5py writes them (int64 scalars,
// float64 scalars, variable-length UTF-8 strings, lists as 1-D string arrays), so that
// the reader is tested independently of write_deck and with malformed files.

struct FixedStr {
  std::string s;
};
struct IntList {
  std::vector<int64_t> v;
};
struct BoolEnum {
  bool b;
};
using Value = std::variant<int64_t, double, std::string, std::vector<std::string>, FixedStr, IntList, BoolEnum>;
using Attrs = std::map<std::string, Value>;

void put_attr(hid_t loc, const std::string& name, const Value& v) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t type = -1;
  hid_t attr = -1;
  if (std::holds_alternative<int64_t>(v)) {
    attr = H5Acreate2(loc, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &std::get<int64_t>(v));
  } else if (std::holds_alternative<double>(v)) {
    attr = H5Acreate2(loc, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_DOUBLE, &std::get<double>(v));
  } else if (std::holds_alternative<std::string>(v)) {
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    attr = H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* p = std::get<std::string>(v).c_str();
    H5Awrite(attr, type, &p);
  } else if (std::holds_alternative<FixedStr>(v)) {
    const std::string& s = std::get<FixedStr>(v).s;
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, s.size() + 3);  // room to spare: NUL padding must be stripped
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    attr = H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    std::string buf = s + std::string(3, '\0');
    H5Awrite(attr, type, buf.data());
  } else if (std::holds_alternative<std::vector<std::string>>(v)) {
    const auto& list = std::get<std::vector<std::string>>(v);
    H5Sclose(space);
    hsize_t n = list.size();
    space = H5Screate_simple(1, &n, nullptr);
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    attr = H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> ptrs;
    for (const auto& s : list) ptrs.push_back(s.c_str());
    H5Awrite(attr, type, ptrs.data());
  } else if (std::holds_alternative<IntList>(v)) {
    const auto& list = std::get<IntList>(v).v;
    H5Sclose(space);
    hsize_t n = list.size();
    space = H5Screate_simple(1, &n, nullptr);
    attr = H5Acreate2(loc, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, list.data());
  } else {
    // numpy bool as h5py stores it: enum {FALSE = 0, TRUE = 1} over int8.
    type = H5Tenum_create(H5T_STD_I8LE);
    signed char f = 0, t = 1;
    H5Tenum_insert(type, "FALSE", &f);
    H5Tenum_insert(type, "TRUE", &t);
    attr = H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    signed char val = std::get<BoolEnum>(v).b ? 1 : 0;
    H5Awrite(attr, type, &val);
  }
  ASSERT_GE(attr, 0) << name;
  H5Aclose(attr);
  if (type >= 0) H5Tclose(type);
  H5Sclose(space);
}

// A valid case as h5py would write it (every field present).
Attrs good_case() {
  return {{"batch", int64_t{1}},
          {"seq_len", int64_t{256}},
          {"heads", int64_t{8}},
          {"head_dim", int64_t{64}},
          {"dtype", std::string("bf16")},
          {"qk_norm", std::string("rms")},
          {"rope", std::string("1d")},
          {"fused_qkv", int64_t{1}},
          {"ulysses", int64_t{0}},
          {"tp", int64_t{1}},
          {"transports", std::vector<std::string>{"nccl", "ipc"}},
          {"schedules", std::vector<std::string>{"baseline", "v-first"}},
          {"warmup", int64_t{1}},
          {"iterations", int64_t{3}}};
}

enum class CaseLink { kHard, kSoft, kExternal };

struct RawDeck {
  Attrs root{{"schema_version", int64_t{1}}};
  std::vector<std::pair<std::string, Attrs>> cases;
  CaseLink link = CaseLink::kHard;  // how /cases/<first case> is linked
  bool list_cases = true;           // write the root attribute `cases`

  void write(const std::string& path) const {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    std::vector<std::string> names;
    for (const auto& c : cases) names.push_back(c.first);
    Attrs r = root;
    if (list_cases && !r.count("cases")) r["cases"] = names;
    for (const auto& [k, v] : r) put_attr(f, k, v);
    hid_t cg = H5Gcreate2(f, "cases", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& [name, attrs] = cases[i];
      if (i == 0 && link != CaseLink::kHard) {
        // The real group lives elsewhere; /cases/<name> only points at it.
        hid_t real = H5Gcreate2(f, "elsewhere", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        for (const auto& [k, v] : attrs) put_attr(real, k, v);
        H5Gclose(real);
        if (link == CaseLink::kSoft)
          H5Lcreate_soft("/elsewhere", cg, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
        else
          H5Lcreate_external("other.h5", "/elsewhere", cg, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
        continue;
      }
      hid_t g = H5Gcreate2(cg, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      for (const auto& [k, v] : attrs) put_attr(g, k, v);
      H5Gclose(g);
    }
    H5Gclose(cg);
    H5Fclose(f);
  }
};

RawDeck one_case(Attrs a, const std::string& name = "c1") {
  RawDeck d;
  d.cases.push_back({name, std::move(a)});
  return d;
}

// read_deck must throw InputError whose message contains every one of `parts`.
void expect_read_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    uipc::read_deck(path);
    ADD_FAILURE() << "read_deck(" << path << ") did not throw; expected: " << parts.front();
  } catch (const InputError& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    EXPECT_EQ(e.exit_code(), uipc::kExitBadInput);
  }
}

void expect_bad_case(Attrs a, const std::vector<std::string>& parts) {
  TempDir dir;
  std::string path = dir.file("bad.h5");
  one_case(std::move(a)).write(path);
  std::vector<std::string> all = {path, "case 'c1'"};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_read_error(path, all);
}

Case all_non_default(const std::string& name, int variant) {
  Case c;
  c.name = name;
  c.description = "non-default case " + std::to_string(variant) + " (utf-8: \xce\xbc)";
  c.batch = 3 + variant;
  c.seq_len = 384;
  c.heads = 16;
  c.head_dim = 48;
  c.dtype = variant == 0 ? uipc::DType::kFP32 : uipc::DType::kFP16;
  c.qk_norm = variant == 0 ? uipc::NormKind::kLayerPerHead : uipc::NormKind::kRmsAcrossHeads;
  c.norm_eps = 1e-5f;
  c.rope = variant == 0 ? uipc::RopeKind::kNone : uipc::RopeKind::k1D;
  c.rope_theta = 500000.0f;
  c.fused_qkv = false;
  c.ulysses = variant == 0 ? 4 : 2;
  c.tp = variant == 0 ? 2 : 1;
  c.transports = {"ipc", "nccl-ce"};
  c.schedules = {"v-first-split", "baseline"};
  c.ablations = {"normal-priority", "no-grouped-handshake"};
  c.warmup = 7;
  c.iterations = 11;
  c.repeats = 5;
  c.seed = 0xfedcba9876543210ull;
  c.tol_max_abs = 3.5e-3;
  c.tol_rel_l2 = 7.25e-4;
  c.watchdog_s = 12.5;
  c.rank_order = variant == 0 ? uipc::RankOrder::kTpInner : uipc::RankOrder::kTpOuter;
  c.steps = 4 + variant;
  c.step_similarity = 0.96;
  c.full_steps = 2;
  c.vmajor_threshold = 0.0625;
  c.vmajor_tol_rel_l2 = 0.125;
  return c;
}


// Runs `ulysses-ipc deck ARGS...` in-process; returns what it printed.
std::string run_deck_cli(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out;
  EXPECT_EQ(uipc::deck_command(static_cast<int>(argv.size()), argv.data(), out), 0);
  return out.str();
}

void expect_cli_error(std::vector<std::string> args, const std::string& part) {
  try {
    run_deck_cli(std::move(args));
    ADD_FAILURE() << "deck_command did not throw; expected: " << part;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

}  // namespace

// ---------------------------------------------------------------- round trip

TEST(Deck, RoundTripEveryFieldNonDefault) {
  TempDir dir;
  Deck d;
  d.description = "three cases, nothing at its default";
  d.cases = {all_non_default("first", 0), all_non_default("second.case", 1), all_non_default("Third-3+", 0)};
  d.cases[2].qk_norm = uipc::NormKind::kNone;
  d.cases[2].dtype = uipc::DType::kBF16;
  std::string path = dir.file("deck.h5");
  uipc::write_deck(d, path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"deck.h5"});  // no temporary left

  Deck r = uipc::read_deck(path);
  EXPECT_EQ(r.schema_version, uipc::kDeckSchemaVersion);
  EXPECT_EQ(r.description, d.description);
  ASSERT_EQ(r.cases.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_same_case(d.cases[i], r.cases[i]);  // order kept too
  EXPECT_EQ(uipc::format_deck(r), uipc::format_deck(d));
}

TEST(Deck, FormatIsReadable) {
  Deck d = uipc::deck_preset("default");
  std::string s = uipc::format_deck(d);
  for (const char* part : {"case small-bf16", "case small-fp16-layernorm", "seq_len 256 tokens", "dtype fp16",
                           "qk_norm      layer", "nccl, ipc", "baseline, v-first, v-first-split", "watchdog     60 s",
                           "fused QKV", "separate Q, K, V"})
    EXPECT_NE(s.find(part), std::string::npos) << part << " not in:\n" << s;
}

TEST(Deck, H5pyStyleDeckWithDefaults) {
  TempDir dir;
  std::string path = dir.file("h5py.h5");
  Attrs a = {{"batch", int64_t{2}},
             {"seq_len", int64_t{64}},
             {"heads", int64_t{4}},
             {"head_dim", int64_t{16}},
             {"dtype", FixedStr{"fp16"}},  // fixed-length, NUL padded
             {"fused_qkv", BoolEnum{false}},
             {"transports", std::string("ipc, nccl")},  // scalar comma-separated list
             {"tol_max_abs", int64_t{1}}};             // integer where a float is expected: fine
  RawDeck d = one_case(a, "only");
  d.root["description"] = FixedStr{"made by hand"};
  d.write(path);
  Deck r = uipc::read_deck(path);
  ASSERT_EQ(r.cases.size(), 1u);
  const Case& c = r.cases[0];
  Case def;
  EXPECT_EQ(r.description, "made by hand");
  EXPECT_EQ(c.name, "only");
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.dtype, uipc::DType::kFP16);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_EQ(c.transports, (std::vector<std::string>{"ipc", "nccl"}));
  EXPECT_EQ(c.tol_max_abs, 1.0);
  // every optional field absent -> the defaults of lib/deck/deck.hpp
  EXPECT_EQ(c.qk_norm, def.qk_norm);
  EXPECT_EQ(c.rope, def.rope);
  EXPECT_EQ(c.schedules, def.schedules);
  EXPECT_EQ(c.warmup, def.warmup);
  EXPECT_EQ(c.iterations, def.iterations);
  EXPECT_EQ(c.repeats, def.repeats);
  EXPECT_EQ(c.seed, def.seed);
  EXPECT_EQ(c.tol_rel_l2, def.tol_rel_l2);
  EXPECT_EQ(c.watchdog_s, def.watchdog_s);
  EXPECT_EQ(c.ulysses, def.ulysses);
  EXPECT_EQ(c.tp, def.tp);
}

// ---------------------------------------------------------------- bad files

TEST(DeckErrors, MissingFile) {
  TempDir dir;
  std::string path = dir.file("nope.h5");
  expect_read_error(path, {path, "No such file"});
}

TEST(DeckErrors, NotHdf5) {
  TempDir dir;
  std::string path = dir.file("text.h5");
  std::ofstream(path) << "this is not HDF5\n";
  expect_read_error(path, {path, "not an HDF5 file"});
  expect_read_error(dir.file(""), {"directory"});
}

TEST(DeckErrors, SchemaVersion) {
  TempDir dir;
  std::string path = dir.file("v.h5");
  RawDeck d = one_case(good_case());
  d.root["schema_version"] = int64_t{99};
  d.write(path);
  expect_read_error(path, {path, "schema_version", "99"});

  d.root["schema_version"] = std::string("1");
  d.write(path);
  expect_read_error(path, {"schema_version", "expected an integer, found a string"});

  d.root.erase("schema_version");
  d.write(path);
  expect_read_error(path, {"schema_version", "missing"});
}

TEST(DeckErrors, RootStructure) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  RawDeck d = one_case(good_case());
  d.list_cases = false;
  d.write(path);
  expect_read_error(path, {"cases", "missing"});

  d = one_case(good_case());
  d.root["cases"] = std::vector<std::string>{"c1", "c2"};  // c2 has no group
  d.write(path);
  expect_read_error(path, {"c2", "missing"});

  d = one_case(good_case());
  d.cases.push_back({"stray", good_case()});
  d.root["cases"] = std::vector<std::string>{"c1"};  // stray group not listed
  d.write(path);
  expect_read_error(path, {"stray", "not listed"});

  d = one_case(good_case());
  d.root["cases"] = std::vector<std::string>{};
  d.write(path);
  expect_read_error(path, {"cases", "no cases"});

  d = one_case(good_case());
  d.root["extra"] = int64_t{1};
  d.write(path);
  expect_read_error(path, {"extra", "unknown root attribute"});
}

TEST(DeckErrors, MissingRequiredField) {
  for (const char* f : {"batch", "seq_len", "heads", "head_dim", "dtype"}) {
    Attrs a = good_case();
    a.erase(f);
    expect_bad_case(a, {std::string(f) + ": missing"});
  }
}

TEST(DeckErrors, WrongTypes) {
  Attrs a = good_case();
  a["batch"] = std::string("1");
  expect_bad_case(a, {"batch", "expected an integer, found a string"});
  a = good_case();
  a["heads"] = 8.0;
  expect_bad_case(a, {"heads", "expected an integer, found a float"});
  a = good_case();
  a["dtype"] = int64_t{0};
  expect_bad_case(a, {"dtype", "expected a string, found an integer"});
  a = good_case();
  a["transports"] = int64_t{1};
  expect_bad_case(a, {"transports", "expected a list of strings"});
  a = good_case();
  a["tol_rel_l2"] = std::string("0.01");
  expect_bad_case(a, {"tol_rel_l2", "expected a number, found a string"});
  a = good_case();
  a["seq_len"] = IntList{{256, 256}};  // right class, wrong shape
  expect_bad_case(a, {"seq_len", "expected a single value, found shape (2,)"});
  a = good_case();
  a["fused_qkv"] = int64_t{2};
  expect_bad_case(a, {"fused_qkv", "must be 0 or 1"});
  a = good_case();
  a["seq-len"] = int64_t{512};  // a typo must not silently become the default
  expect_bad_case(a, {"seq-len", "unknown field"});
  a = good_case();
  a["seed"] = int64_t{-1};
  expect_bad_case(a, {"seed", "negative"});
}

TEST(DeckErrors, UnknownEnumValues) {
  Attrs a = good_case();
  a["dtype"] = std::string("fp8");
  expect_bad_case(a, {"dtype", "'fp8'", "allowed: bf16, fp16, fp32"});
  a = good_case();
  a["qk_norm"] = std::string("rmsnorm");
  expect_bad_case(a, {"qk_norm", "allowed: none, rms, rms_across_heads, layer"});
  a = good_case();
  a["rope"] = std::string("2d");
  expect_bad_case(a, {"rope", "allowed: none, 1d"});
  a = good_case();
  a["transports"] = std::vector<std::string>{"nccl", "rdma"};
  expect_bad_case(a, {"transports", "'rdma'", "allowed: nccl, nccl-ce, ipc, vmm"});
  a = good_case();
  a["schedules"] = std::vector<std::string>{"v-last"};
  expect_bad_case(a, {"schedules", "'v-last'", "allowed: baseline, v-first, v-project-first, v-first-split"});
  a = good_case();
  a["schedules"] = std::vector<std::string>{"baseline", "baseline"};
  expect_bad_case(a, {"schedules", "duplicate"});
  a = good_case();
  a["transports"] = std::vector<std::string>{};
  expect_bad_case(a, {"transports", "empty"});
}

TEST(DeckErrors, NonPositiveAndAbsurdSizes) {
  const std::vector<std::pair<std::string, int64_t>> bad = {
      {"batch", 0},        {"batch", 100000},    {"seq_len", -1},    {"seq_len", int64_t{1} << 30},
      {"heads", 0},        {"heads", 100000},    {"head_dim", 0},    {"head_dim", 4096},
      {"heads", int64_t{1} << 40},               {"iterations", 0},  {"warmup", -1},
      {"repeats", 0},      {"repeats", 5000},    {"tp", 3},          {"ulysses", -2},
      {"ulysses", 1000}};
  for (const auto& [field, value] : bad) {
    Attrs a = good_case();
    a[field] = value;
    expect_bad_case(a, {field + ":"});
  }
  Attrs a = good_case();
  a["head_dim"] = int64_t{33};  // odd with RoPE on
  expect_bad_case(a, {"head_dim", "even"});
  a = good_case();
  a["watchdog_s"] = 0.0;
  expect_bad_case(a, {"watchdog_s"});
  a = good_case();
  a["tol_max_abs"] = -1.0;
  expect_bad_case(a, {"tol_max_abs"});
  a = good_case();
  a["batch"] = int64_t{1024};
  a["seq_len"] = int64_t{4194304};  // each in bounds, the product is absurd
  expect_bad_case(a, {"elements per tensor"});
  // The multi-step and V-major fields.
  for (const auto& [field, value] : std::vector<std::pair<std::string, double>>{
           {"steps", 0}, {"steps", 1001}, {"step_similarity", 0.25}, {"step_similarity", 1.5},
           {"vmajor_threshold", -0.1}, {"vmajor_threshold", 11}, {"vmajor_tol_rel_l2", 0}}) {
    a = good_case();
    if (field == "steps")
      a[field] = static_cast<int64_t>(value);
    else
      a[field] = value;
    expect_bad_case(a, {field + ":"});
  }
  a = good_case();
  a["steps"] = int64_t{3};
  a["full_steps"] = int64_t{4};  // more full steps than steps
  expect_bad_case(a, {"full_steps:"});
  a = good_case();
  a["rank_order"] = std::string("diagonal");
  expect_bad_case(a, {"rank_order", "unknown value 'diagonal'"});
  a = good_case();
  a["transports"] = std::vector<std::string>{"hier-vmajor", "nccl"};  // approximate before any exact one
  expect_bad_case(a, {"transports", "approximate"});
}

// Heads must divide by tp; Ulysses splits may be uneven (balanced), but every rank needs a
// head and a token.
TEST(DeckErrors, Divisibility) {
  Attrs a = good_case();
  a["heads"] = int64_t{6};
  a["tp"] = int64_t{4};
  expect_bad_case(a, {"heads", "not divisible by tp = 4"});
  a = good_case();
  a["heads"] = int64_t{4};
  a["tp"] = int64_t{2};
  a["ulysses"] = int64_t{3};
  a["seq_len"] = int64_t{300};
  expect_bad_case(a, {"heads", "heads/tp = 2 is fewer than ulysses = 3"});
  a = good_case();
  a["ulysses"] = int64_t{4};
  a["seq_len"] = int64_t{3};
  expect_bad_case(a, {"seq_len", "3 tokens are fewer than ulysses = 4"});
  a = good_case();
  a["qk_norm"] = std::string("rms_across_heads");
  a["tp"] = int64_t{2};
  expect_bad_case(a, {"qk_norm", "tp = 1"});
}

TEST(DeckErrors, LinksRefused) {
  TempDir dir;
  std::string path = dir.file("link.h5");
  RawDeck d = one_case(good_case());
  d.link = CaseLink::kSoft;
  d.write(path);
  expect_read_error(path, {path, "c1", "soft link"});
  d.link = CaseLink::kExternal;
  d.write(path);
  expect_read_error(path, {path, "c1", "external link"});
}

TEST(DeckErrors, WorldSize) {
  Case c;
  c.name = "w";
  c.heads = 8;
  c.seq_len = 256;
  c.tp = 2;
  c.ulysses = 2;
  EXPECT_NO_THROW(uipc::validate_case_for_world(c, 4));
  try {
    uipc::validate_case_for_world(c, 2);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "case 'w' needs tp*ulysses = 4 ranks, this run has 2");
  }
  c.ulysses = 0;  // all ranks: 2 * (world / 2)
  EXPECT_NO_THROW(uipc::validate_case_for_world(c, 2));
  EXPECT_NO_THROW(uipc::validate_case_for_world(c, 8));
  try {
    uipc::validate_case_for_world(c, 3);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tp = 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("this run has 3"), std::string::npos) << e.what();
  }
  c.tp = 1;
  c.heads = 2;  // 2 heads on 3 ranks: valid alone, not for this world (a rank without a head)
  try {
    uipc::validate_case_for_world(c, 3);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("heads"), std::string::npos) << e.what();
  }
  c.heads = 7;
  EXPECT_NO_THROW(uipc::validate_case_for_world(c, 3));  // uneven splits: 7 heads, 256 tokens on 3 ranks
  c.seq_len = 2;  // heads fine on 3 ranks, 2 tokens are not
  try {
    uipc::validate_case_for_world(c, 3);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len"), std::string::npos) << e.what();
  }
}

TEST(DeckErrors, WriteRefusesBadDeckAndUnwritablePath) {
  TempDir dir;
  Deck d;
  EXPECT_THROW(uipc::write_deck(d, dir.file("empty.h5")), InputError);
  d.cases = {all_non_default("a", 1), all_non_default("a", 1)};
  EXPECT_THROW(uipc::write_deck(d, dir.file("dup.h5")), InputError);
  d.cases = {all_non_default("a", 1)};
  d.cases[0].heads = 0;
  EXPECT_THROW(uipc::write_deck(d, dir.file("bad.h5")), InputError);
  EXPECT_TRUE(dir.entries().empty());
  d.cases[0].heads = 16;
  EXPECT_THROW(uipc::write_deck(d, dir.file("no/such/dir/deck.h5")), uipc::RuntimeError);
  EXPECT_TRUE(dir.entries().empty());
}

// ---------------------------------------------------------------- deck CLI

TEST(DeckCli, NewFromPresetAndShow) {
  TempDir dir;
  std::string path = dir.file("default.h5");
  std::string out = run_deck_cli({"new", "--preset", "default", "-o", path});
  EXPECT_NE(out.find("wrote"), std::string::npos);
  Deck r = uipc::read_deck(path);
  Deck p = uipc::deck_preset("default");
  ASSERT_EQ(r.cases.size(), 2u);
  for (size_t i = 0; i < 2; ++i) expect_same_case(p.cases[i], r.cases[i]);
  EXPECT_EQ(r.cases[0].name, "small-bf16");
  EXPECT_EQ(r.cases[1].name, "small-fp16-layernorm");
  EXPECT_EQ(r.cases[0].ulysses, 0);
  // The default deck must run at 1, 2 and 4 ranks.
  for (const Case& c : r.cases)
    for (int world : {1, 2, 4}) EXPECT_NO_THROW(uipc::validate_case_for_world(c, world)) << c.name << " " << world;
  EXPECT_EQ(run_deck_cli({"show", path}), uipc::format_deck(p));
}

TEST(DeckCli, OptionsOverrideEveryCase) {
  TempDir dir;
  std::string path = dir.file("o.h5");
  run_deck_cli({"new", "--preset", "default", "--iterations=9", "--seq-len", "512", "--transports", "ipc", "--tp", "2",
                "--seed", "77", "--tol-rel-l2", "0.5", "--watchdog", "5", "--output", path});
  Deck r = uipc::read_deck(path);
  ASSERT_EQ(r.cases.size(), 2u);
  for (const Case& c : r.cases) {
    EXPECT_EQ(c.iterations, 9);
    EXPECT_EQ(c.seq_len, 512);
    EXPECT_EQ(c.transports, std::vector<std::string>{"ipc"});
    EXPECT_EQ(c.tp, 2);
    EXPECT_EQ(c.seed, 77u);
    EXPECT_EQ(c.tol_rel_l2, 0.5);
    EXPECT_EQ(c.watchdog_s, 5.0);
  }
  EXPECT_EQ(r.cases[0].dtype, uipc::DType::kBF16);  // untouched fields stay the preset's
  EXPECT_EQ(r.cases[1].dtype, uipc::DType::kFP16);
}

TEST(DeckCli, NameMakesOneCase) {
  TempDir dir;
  std::string path = dir.file("n.h5");
  run_deck_cli({"new", "--preset", "default", "--name", "small-fp16-layernorm", "-o", path});
  Deck r = uipc::read_deck(path);
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_EQ(r.cases[0].name, "small-fp16-layernorm");

  run_deck_cli({"new", "--name", "mine", "--batch", "2", "--seq-len", "64", "--heads", "4", "--head-dim", "32",
                "--dtype", "fp32", "--qk-norm", "none", "--rope", "none", "--fused-qkv", "0", "--ulysses", "2",
                "--schedules", "baseline,v-first-split", "--warmup", "0", "--repeats", "2", "--tol-max-abs", "1e-4",
                "--norm-eps", "1e-5", "--rope-theta", "1000", "--description", "hand made", "-o", path});
  r = uipc::read_deck(path);
  ASSERT_EQ(r.cases.size(), 1u);
  const Case& c = r.cases[0];
  EXPECT_EQ(c.name, "mine");
  EXPECT_EQ(c.description, "hand made");
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.seq_len, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.dtype, uipc::DType::kFP32);
  EXPECT_EQ(c.qk_norm, uipc::NormKind::kNone);
  EXPECT_EQ(c.rope, uipc::RopeKind::kNone);
  EXPECT_FALSE(c.fused_qkv);
  EXPECT_EQ(c.ulysses, 2);
  EXPECT_EQ(c.schedules, (std::vector<std::string>{"baseline", "v-first-split"}));
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.repeats, 2);
  EXPECT_EQ(c.tol_max_abs, 1e-4);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 1000.0f);
}

TEST(DeckCli, Presets) {
  std::string out = run_deck_cli({"presets"});
  EXPECT_NE(out.find("default (2 cases: small-bf16, small-fp16-layernorm)"), std::string::npos) << out;
  std::string names = run_deck_cli({"presets", "--names"});
  EXPECT_EQ(names.rfind("default\n", 0), 0u) << names;
  for (const std::string& n : uipc::deck_preset_names()) {
    EXPECT_NE(names.find(n + "\n"), std::string::npos);
    Deck d = uipc::deck_preset(n);  // every preset is a valid deck
    for (const Case& c : d.cases) EXPECT_NO_THROW(uipc::validate_case(c)) << n << "/" << c.name;
  }
  EXPECT_NE(run_deck_cli({"help"}).find("--seq-len"), std::string::npos);
}

// Every command's help comes from CLI11, from the declarations that parse the options.
TEST(DeckCli, HelpOfEverySubcommand) {
  const std::string top = run_deck_cli({"--help"});
  for (const char* sub : {"new", "from-config", "show", "presets", "help"}) EXPECT_NE(top.find(sub), std::string::npos) << top;
  EXPECT_NE(run_deck_cli({"new", "--help"}).find("Usage: ulysses-ipc deck new"), std::string::npos);
  EXPECT_NE(run_deck_cli({"new", "-h"}).find("--tol-rel-l2 X"), std::string::npos);
  EXPECT_NE(run_deck_cli({"show", "--help"}).find("FILE"), std::string::npos);
  EXPECT_NE(run_deck_cli({"presets", "--help"}).find("--names"), std::string::npos);
  // help lists every subcommand's options at once
  const std::string all = run_deck_cli({"help"});
  for (const char* opt : {"--preset", "--names", "FILE", "--watchdog"}) EXPECT_NE(all.find(opt), std::string::npos) << opt;
}

TEST(DeckCli, UsageErrorsNameTheOption) {
  TempDir dir;
  std::string path = dir.file("e.h5");
  expect_cli_error({}, "subcommand");
  expect_cli_error({"frobnicate"}, "'frobnicate'");
  // CLI11's own wording where it says it as clearly (app/cli.hpp adds where to look).
  expect_cli_error({"new", "--preset", "default"}, "new: --output is required (see 'ulysses-ipc deck new --help')");
  expect_cli_error({"new", "--bogus", "1", "-o", path}, "--bogus");
  expect_cli_error({"new", "--batch", "x", "-o", path}, "--batch: 'x' is not an integer");
  expect_cli_error({"new", "-o", path, "--heads"}, "--heads: 1 required H missing");
  expect_cli_error({"new", "--heads", "4", "--heads", "8", "-o", path}, "--heads");  // once per field
  expect_cli_error({"new", "--dtype", "fp8", "-o", path}, "--dtype: unknown value 'fp8'");
  expect_cli_error({"new", "--fused-qkv", "yes", "-o", path}, "--fused-qkv");
  expect_cli_error({"new", "--preset", "nope", "-o", path}, "unknown preset 'nope'");
  expect_cli_error({"new", "--preset", "default", "--name", "zzz", "-o", path}, "no case 'zzz'");
  expect_cli_error({"new", "--transports", "nccl,,ipc", "-o", path}, "--transports");
  // values that parse but are invalid: the deck validation names the field
  expect_cli_error({"new", "--heads", "0", "-o", path}, "heads:");
  expect_cli_error({"new", "--transports", "rdma", "-o", path}, "transports: unknown name 'rdma'");
  expect_cli_error({"show"}, "show");
  expect_cli_error({"show", dir.file("missing.h5")}, "missing.h5");
  EXPECT_TRUE(dir.entries().empty());
}
