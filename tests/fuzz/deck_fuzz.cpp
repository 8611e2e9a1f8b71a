// libFuzzer target for the deck reader (lib/deck/deck.cpp over lib/hdf5/hdf5_file.cpp): the only
// allowed outcomes of read_deck on any file are a Deck whose every case passes
// validate_case, or a uipc::InputError; any other exception, a crash, a sanitizer
// report, a leaked HDF5 handle or a hang (libFuzzer's -timeout) is a finding.
//
// Two modes, chosen at build time (scripts/fuzz.sh builds both):
//  - structured (default, the CI run): the fuzz bytes are a recipe that builds a deck
//    through the HDF5 C API: root attributes, case groups, attribute names drawn from
//    the real field names plus junk, every integer width and sign, floats with NaN and
//    inf, fixed and variable strings with non-UTF-8 bytes, arrays of rank 0..3, null
//    dataspaces, enums, compounds, opaque types, soft/external/hard links, nested
//    groups, datasets with filters. libhdf5 writes a well-formed file, so a finding is
//    in our code, not in libhdf5's parser (which in 1.10 has known crashes on crafted
//    files). All-zero bytes decode to a valid deck, so mutations start from one.
//  - raw (-DULYSSES_FUZZ_RAW=1, the long on-demand run): the fuzz bytes are the file.
//    This also fuzzes libhdf5 itself: a crash whose stack is all inside libhdf5 is a
//    libhdf5 bug to report upstream (and a reason to keep decks from strangers out of
//    shared clusters), not one in lib/.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <typeinfo>
#include <vector>

#include "base/error.hpp"
#include "lib/deck/deck.hpp"

namespace {

// The scratch file each input is written to: $FUZZ_TMPDIR (scripts/fuzz.sh gives a
// private directory on tmpfs), else $TMPDIR or /tmp; one per process (-fork/-jobs).
std::string scratch_path(const char* suffix) {
  const char* dir = std::getenv("FUZZ_TMPDIR");
  if (!dir || !*dir) dir = std::getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  return std::string(dir) + "/deckfuzz-" + std::to_string(::getpid()) + suffix;
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "\n*** deck_fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();  // libFuzzer saves the input as crash-*
}

// The oracle, shared by both modes.
// DECK_FUZZ_PRINT=1 prints each outcome (replaying a corpus shows what it reaches).
const bool kPrint = std::getenv("DECK_FUZZ_PRINT") != nullptr;

void check_read(const std::string& path) {
  try {
    uipc::Deck d = uipc::read_deck(path);
    if (kPrint) std::printf("deck_fuzz: accepted, %zu case(s)\n", d.cases.size());
    if (d.cases.empty()) finding("read_deck returned a deck without cases");
    if (d.schema_version != uipc::kDeckSchemaVersion) finding("read_deck returned schema_version != 1");
    for (const uipc::Case& c : d.cases) {
      try {
        uipc::validate_case(c);
      } catch (const uipc::InputError& e) {
        finding(std::string("read_deck accepted a case that validate_case refuses: ") + e.what());
      }
    }
    (void)uipc::format_deck(d);
  } catch (const uipc::InputError& e) {
    const std::string m = e.what();
    if (kPrint) std::printf("deck_fuzz: refused: %s\n", m.substr(std::min(m.size(), path.size())).c_str());
    // Naming the file first, as every deck error does. (That the printed line is safe for a
    // terminal, whatever bytes the deck quotes, is app/main.cpp's part: tested end to end
    // by tests/decks/control_chars_in_name.h5 and non_utf8_field_name.h5.)
    if (m.compare(0, path.size(), path) != 0) finding("error message does not start with the file: " + m);
  } catch (const std::exception& e) {
    finding(std::string("read_deck threw something other than InputError: ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding("read_deck threw a non-std exception");
  }
  // Every id the reader opened must be closed again, or a long run leaks files.
  ssize_t still_open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (still_open != 0) finding("read_deck left " + std::to_string(still_open) + " HDF5 object(s) open");
}

#if !ULYSSES_FUZZ_RAW

const std::vector<std::string> kFields = {
    "name",      "description", "batch",      "seq_len",    "heads",      "head_dim",   "dtype",      "qk_norm",
    "norm_eps",  "rope",        "rope_theta", "fused_qkv",  "ulysses",    "tp",         "transports", "schedules",
    "warmup",    "iterations",  "repeats",    "seed",       "tol_max_abs", "tol_rel_l2", "watchdog_s"};
const std::vector<std::string> kRequired = {"batch", "seq_len", "heads", "head_dim", "dtype"};

// Sensible values per field: index 0 (what zero bytes pick) makes a valid default case.
std::vector<int64_t> int_choices(const std::string& f) {
  if (f == "batch") return {1, 2, 4, 1024, 0, -1, 1025};
  if (f == "seq_len") return {256, 64, 4096, 130, 4194304, 4194305, 0, -256};
  if (f == "heads") return {8, 4, 24, 6, 1024, 1025, 0};
  if (f == "head_dim") return {64, 32, 128, 3, 512, 513, 0};
  if (f == "fused_qkv") return {1, 0, 2, -1};
  if (f == "ulysses") return {0, 1, 2, 4, 3, 64, 65, -1};
  if (f == "tp") return {1, 2, 4, 8, 3, 16, 0};
  if (f == "warmup") return {1, 0, 10000, 10001, -1};
  if (f == "iterations") return {3, 1, 100000, 100001, 0};
  if (f == "repeats") return {1, 2, 1000, 1001, 0};
  if (f == "seed") return {1234, 0, std::numeric_limits<int64_t>::max(), -1};
  if (f == "schema_version") return {1, 0, 2, 99, -1};
  return {1, 0, -1};
}
std::vector<double> float_choices(const std::string& f) {
  if (f == "norm_eps") return {1e-6, 0.5, 0, 1, -1e-6};
  if (f == "rope_theta") return {10000, 1e12, 1.1e12, 0, -1};
  if (f == "watchdog_s") return {60, 86400, 86401, 0.001, 0};
  return {0.02, 1e300, 0, -0.01};
}
std::vector<std::string> string_choices(const std::string& f) {
  if (f == "dtype") return {"bf16", "fp16", "fp32", "fp8", "BF16", ""};
  if (f == "qk_norm") return {"rms", "none", "rms_across_heads", "layer", "batch"};
  if (f == "rope") return {"1d", "none", "2d"};
  if (f == "transports") return {"nccl", "ipc", "vmm", "nccl,ipc", "ipc, ipc", "carrier-pigeon", ""};
  if (f == "schedules") return {"baseline", "v-first", "v-first-split", "z-first"};
  if (f == "name") return {"c0", "other", ""};
  return {"text", "", "caf\xc3\xa9"};
}
bool is_int_field(const std::string& f) {
  return f == "batch" || f == "seq_len" || f == "heads" || f == "head_dim" || f == "fused_qkv" ||
         f == "ulysses" || f == "tp" || f == "warmup" || f == "iterations" || f == "repeats" || f == "seed" ||
         f == "schema_version";
}
bool is_float_field(const std::string& f) {
  return f == "norm_eps" || f == "rope_theta" || f == "tol_max_abs" || f == "tol_rel_l2" || f == "watchdog_s";
}
bool is_list_field(const std::string& f) { return f == "transports" || f == "schedules" || f == "cases"; }

class Builder {
 public:
  explicit Builder(FuzzedDataProvider& p) : p_(p) {}

  // Builds the whole file; false when libhdf5 could not create it (nothing to read).
  bool build(const std::string& path) {
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (p_.ConsumeBool()) H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    if (p_.ConsumeBool()) H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED);
    // The newest format stores many/large attributes densely (B-trees, fractal heaps).
    if (p_.ConsumeBool()) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (f < 0) return false;

    const int ncases = p_.ConsumeIntegralInRange<int>(0, 3) + (p_.ConsumeIntegralInRange<int>(0, 15) == 15 ? -1 : 1);
    std::vector<std::string> names;
    for (int i = 0; i < ncases; ++i) names.push_back(case_name(i));

    // Root attributes: schema_version, cases, description, and junk.
    if (!p_.ConsumeBool() || p_.ConsumeBool()) put_field(f, "schema_version");
    const int cases_attr = p_.ConsumeIntegralInRange<int>(0, 7);
    if (cases_attr == 0) {
      put_string_list(f, "cases", names, p_.ConsumeBool());
    } else if (cases_attr == 1) {
      std::vector<std::string> other = names;
      if (!other.empty() && p_.ConsumeBool()) other.pop_back(); else other.push_back(junk_name());
      put_string_list(f, "cases", other, p_.ConsumeBool());
    } else if (cases_attr == 2) {
      std::vector<std::string> dup = names;
      if (!dup.empty()) dup.push_back(dup.front());
      put_string_list(f, "cases", dup, false);
    } else if (cases_attr == 3) {
      put_any(f, "cases", "cases");
    } else if (cases_attr == 4) {
      std::string joined;
      for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
      put_string(f, "cases", joined, p_.ConsumeBool(), p_.ConsumeBool());
    } else if (cases_attr == 5) {
      // absent
    } else {
      put_string_list(f, "cases", names, p_.ConsumeBool());
    }
    if (p_.ConsumeBool()) put_field(f, "description");
    for (int j = p_.ConsumeIntegralInRange<int>(0, 2); j > 0; --j) put_any(f, junk_or_field(), "junk");

    // /cases: a group (mostly), a dataset, a soft link, missing.
    const int how = p_.ConsumeIntegralInRange<int>(0, 9);
    hid_t cases = -1;
    if (how <= 6) {
      cases = make_group(f, "cases");
    } else if (how == 7) {
      hid_t g = make_group(f, "real_cases");
      H5Lcreate_soft("/real_cases", f, "cases", H5P_DEFAULT, H5P_DEFAULT);
      cases = g;
    } else if (how == 8) {
      make_dataset(f, "cases");
    }
    if (cases >= 0) {
      for (int i = 0; i < ncases; ++i) put_case(f, cases, names[i]);
      for (int j = p_.ConsumeIntegralInRange<int>(0, 8) == 8 ? 1 : 0; j > 0; --j) {
        hid_t g = make_group(cases, junk_name());
        if (g >= 0) H5Gclose(g);
      }
      H5Gclose(cases);
    }
    return H5Fclose(f) >= 0;
  }

 private:
  std::string case_name(int i) {
    switch (p_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: case 1: case 2: case 3: case 4: return "c" + std::to_string(i);
      case 5: return junk_name();
      case 6: return std::string(129, 'a' + i);  // over the 128-character bound
      default: return i == 0 ? "." : "-lead" + std::to_string(i);
    }
  }

  // Names with any bytes but NUL and '/' (HDF5 link separators), non-UTF-8 included.
  std::string junk_name() {
    std::string s = p_.ConsumeRandomLengthString(40);
    for (char& ch : s)
      if (ch == '\0' || ch == '/') ch = '_';
    if (s.empty() || s == "." ) s = "j";
    return s;
  }
  std::string junk_or_field() {
    if (p_.ConsumeBool()) return kFields[p_.ConsumeIntegralInRange<size_t>(0, kFields.size() - 1)];
    return junk_name();
  }

  hid_t make_group(hid_t loc, const std::string& name) {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (p_.ConsumeBool()) H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    if (p_.ConsumeBool()) H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t g = H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
  }

  // A small dataset, chunked and filtered when asked (a case stored as a dataset, or a
  // stray member): the reader must refuse it without reading it or loading a plugin.
  void make_dataset(hid_t loc, const std::string& name) {
    hsize_t n = p_.ConsumeIntegralInRange<hsize_t>(1, 64), chunk = std::max<hsize_t>(1, n / 2);
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const int filter = p_.ConsumeIntegralInRange<int>(0, 3);
    if (filter) {
      H5Pset_chunk(dcpl, 1, &chunk);
      if (filter == 1) H5Pset_deflate(dcpl, 6);
      if (filter == 2) H5Pset_shuffle(dcpl);
      // A filter id that no library has: what a plugin would be loaded for.
      if (filter == 3) H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, nullptr);
    }
    hid_t d = H5Dcreate2(loc, name.c_str(), H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d >= 0) {
      std::vector<int32_t> v(n, 7);
      H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      for (int j = p_.ConsumeIntegralInRange<int>(0, 3); j > 0; --j) put_field(d, junk_or_field());
      H5Dclose(d);
    }
    H5Pclose(dcpl);
    H5Sclose(space);
  }

  void put_case(hid_t file, hid_t cases, const std::string& name) {
    const int how = p_.ConsumeIntegralInRange<int>(0, 15);
    hid_t g = -1;
    if (how <= 10) {
      g = make_group(cases, name);
    } else if (how == 11) {  // soft link to a real group elsewhere, or dangling
      std::string target = "/elsewhere_" + std::to_string(counter_++);
      if (p_.ConsumeBool()) g = make_group(file, target);
      H5Lcreate_soft(target.c_str(), cases, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    } else if (how == 12) {  // external link: must never be followed
      H5Lcreate_external(p_.ConsumeBool() ? "/etc/passwd" : "other.h5", "/cases/c0", cases, name.c_str(),
                         H5P_DEFAULT, H5P_DEFAULT);
    } else if (how == 13) {  // a dataset where a group belongs
      make_dataset(cases, name);
    } else if (how == 14) {  // a hard link to the root or to /cases itself: a cycle
      H5Lcreate_hard(file, p_.ConsumeBool() ? "/" : "/cases", cases, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    } else {  // nested groups: the case one level deeper than expected
      hid_t outer = make_group(cases, name);
      if (outer >= 0) {
        g = make_group(outer, "inner");
        H5Gclose(outer);
      }
    }
    if (g < 0) return;
    for (const std::string& fld : kFields) {
      bool required = false;
      for (const auto& r : kRequired) required = required || r == fld;
      // Required fields are there unless the input says otherwise; optional ones not.
      const bool present = required ? !p_.ConsumeBool() || p_.ConsumeBool() : p_.ConsumeBool();
      if (!present) continue;
      if (fld == "name" && p_.ConsumeIntegralInRange<int>(0, 3) != 0) {
        put_string(g, "name", name, p_.ConsumeBool(), false);
        continue;
      }
      put_field(g, fld);
    }
    for (int j = p_.ConsumeIntegralInRange<int>(0, 6) == 6 ? p_.ConsumeIntegralInRange<int>(1, 3) : 0; j > 0; --j)
      put_any(g, junk_or_field(), "junk");
    H5Gclose(g);
  }

  // A field: mostly a sensible value of the right type, sometimes anything at all.
  void put_field(hid_t loc, const std::string& f) {
    const int variant = p_.ConsumeIntegralInRange<int>(0, 11);
    if (variant <= 7) {
      if (is_int_field(f)) {
        auto ch = int_choices(f);
        put_int(loc, f, ch[p_.ConsumeIntegralInRange<size_t>(0, ch.size() - 1)]);
      } else if (is_float_field(f)) {
        auto ch = float_choices(f);
        put_float(loc, f, ch[p_.ConsumeIntegralInRange<size_t>(0, ch.size() - 1)], p_.ConsumeBool());
      } else if (is_list_field(f)) {
        auto ch = string_choices(f);
        std::vector<std::string> v;
        for (int n = 1 + p_.ConsumeIntegralInRange<int>(0, 2); n > 0; --n)
          v.push_back(ch[p_.ConsumeIntegralInRange<size_t>(0, ch.size() - 1)]);
        if (p_.ConsumeIntegralInRange<int>(0, 3) == 3)
          put_string(loc, f, v.front(), p_.ConsumeBool(), p_.ConsumeBool());  // scalar "a,b" form
        else
          put_string_list(loc, f, v, p_.ConsumeBool());
      } else {
        auto ch = string_choices(f);
        put_string(loc, f, ch[p_.ConsumeIntegralInRange<size_t>(0, ch.size() - 1)], p_.ConsumeBool(),
                   p_.ConsumeBool());
      }
      return;
    }
    put_any(loc, f, f);
  }

  void write_attr(hid_t loc, const std::string& name, hid_t ftype, hid_t space, hid_t mtype, const void* buf) {
    hid_t a = H5Acreate2(loc, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return;  // duplicate name, too large for the layout, ...: not our concern
    if (buf) H5Awrite(a, mtype, buf);
    H5Aclose(a);
  }

  hid_t int_type() {
    static const hid_t* const types[] = {&H5T_STD_I64LE, &H5T_STD_I8LE,  &H5T_STD_I16LE, &H5T_STD_I32LE,
                                         &H5T_STD_U8LE,  &H5T_STD_U16LE, &H5T_STD_U32LE, &H5T_STD_U64LE,
                                         &H5T_STD_I64BE, &H5T_STD_U64BE, &H5T_STD_I32BE};
    return *types[p_.ConsumeIntegralInRange<size_t>(0, std::size(types) - 1)];
  }

  void put_int(hid_t loc, const std::string& name, int64_t v) {
    hid_t space = scalar_or_one();
    write_attr(loc, name, int_type(), space, H5T_NATIVE_INT64, &v);
    H5Sclose(space);
  }

  void put_float(hid_t loc, const std::string& name, double v, bool f32) {
    hid_t space = scalar_or_one();
    write_attr(loc, name, f32 ? H5T_IEEE_F32LE : (p_.ConsumeBool() ? H5T_IEEE_F64LE : H5T_IEEE_F64BE), space,
               H5T_NATIVE_DOUBLE, &v);
    H5Sclose(space);
  }

  // Scalar, or the 1-element 1-D array that the reader also accepts.
  hid_t scalar_or_one() {
    if (p_.ConsumeIntegralInRange<int>(0, 4) != 4) return H5Screate(H5S_SCALAR);
    hsize_t one = 1;
    return H5Screate_simple(1, &one, nullptr);
  }

  hid_t string_type(bool vlen, size_t fixed_size) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, vlen ? H5T_VARIABLE : std::max<size_t>(1, fixed_size));
    H5Tset_cset(t, p_.ConsumeBool() ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
    if (!vlen) {
      const int pad = p_.ConsumeIntegralInRange<int>(0, 2);
      H5Tset_strpad(t, pad == 0 ? H5T_STR_NULLPAD : pad == 1 ? H5T_STR_NULLTERM : H5T_STR_SPACEPAD);
    }
    return t;
  }

  void put_string(hid_t loc, const std::string& name, const std::string& s, bool fixed, bool space_pad_junk) {
    hid_t space = scalar_or_one();
    if (!fixed) {
      hid_t t = string_type(true, 0);
      const char* p = s.c_str();
      write_attr(loc, name, t, space, t, &p);
      H5Tclose(t);
    } else {
      std::string buf = s;
      if (space_pad_junk) buf += std::string(p_.ConsumeIntegralInRange<size_t>(0, 4), p_.ConsumeBool() ? ' ' : '\0');
      hid_t t = string_type(false, buf.size());
      buf.resize(std::max<size_t>(1, buf.size()), '\0');
      write_attr(loc, name, t, space, t, buf.data());
      H5Tclose(t);
    }
    H5Sclose(space);
  }

  void put_string_list(hid_t loc, const std::string& name, const std::vector<std::string>& v, bool fixed) {
    hsize_t n = v.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    if (!fixed) {
      hid_t t = string_type(true, 0);
      std::vector<const char*> ptrs;
      for (const auto& s : v) ptrs.push_back(s.c_str());
      write_attr(loc, name, t, space, t, n ? ptrs.data() : nullptr);
      H5Tclose(t);
    } else {
      size_t w = 1;
      for (const auto& s : v) w = std::max(w, s.size());
      std::vector<char> buf(w * std::max<size_t>(1, v.size()), '\0');
      for (size_t i = 0; i < v.size(); ++i) std::memcpy(buf.data() + i * w, v[i].data(), v[i].size());
      hid_t t = string_type(false, w);
      write_attr(loc, name, t, space, t, n ? buf.data() : nullptr);
      H5Tclose(t);
    }
    H5Sclose(space);
  }

  // Anything at all: every type class, odd shapes, odd values.
  void put_any(hid_t loc, const std::string& name, const std::string& field) {
    const int kind = p_.ConsumeIntegralInRange<int>(0, 13);
    switch (kind) {
      case 0: {  // an extreme integer in any width
        static const int64_t xs[] = {0, -1, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                     int64_t{1} << 31, int64_t{1} << 36, -(int64_t{1} << 40), 255, 65536};
        int64_t v = p_.ConsumeBool() ? xs[p_.ConsumeIntegralInRange<size_t>(0, std::size(xs) - 1)]
                                     : p_.ConsumeIntegral<int64_t>();
        put_int(loc, name, v);
        break;
      }
      case 1: {  // a uint64 beyond int64
        uint64_t v = std::numeric_limits<uint64_t>::max() - p_.ConsumeIntegralInRange<uint64_t>(0, 3);
        hid_t space = H5Screate(H5S_SCALAR);
        write_attr(loc, name, H5T_STD_U64LE, space, H5T_NATIVE_UINT64, &v);
        H5Sclose(space);
        break;
      }
      case 2: {  // floats: NaN, inf, huge, tiny, negative
        static const double xs[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(), 1e300, -1e300, 4e-320, -0.0, 3.5e38};
        double v = p_.ConsumeBool() ? xs[p_.ConsumeIntegralInRange<size_t>(0, std::size(xs) - 1)]
                                    : p_.ConsumeFloatingPoint<double>();
        put_float(loc, name, v, p_.ConsumeBool());
        break;
      }
      case 3: {  // strings with arbitrary bytes (non-UTF-8, NULs inside)
        std::string s = p_.ConsumeRandomLengthString(300);
        put_string(loc, name, s, p_.ConsumeBool(), p_.ConsumeBool());
        break;
      }
      case 4: {  // an empty string, or a huge one
        put_string(loc, name, p_.ConsumeBool() ? std::string() : std::string(70000, 'x'), p_.ConsumeBool(), false);
        break;
      }
      case 5: {  // string lists of odd lengths, including 0 and beyond any bound
        std::vector<std::string> v;
        const size_t n = p_.ConsumeBool() ? p_.ConsumeIntegralInRange<size_t>(0, 5) : 65 + p_.ConsumeIntegralInRange<size_t>(0, 2000);
        auto ch = string_choices(field);
        for (size_t i = 0; i < n; ++i) v.push_back(ch[i % ch.size()]);
        put_string_list(loc, name, v, p_.ConsumeBool());
        break;
      }
      case 6: {  // numeric arrays of rank 1..3 and sizes 0..5 (a list where a scalar belongs)
        const int rank = p_.ConsumeIntegralInRange<int>(1, 3);
        hsize_t dims[3];
        size_t n = 1;
        for (int i = 0; i < rank; ++i) {
          dims[i] = p_.ConsumeIntegralInRange<hsize_t>(0, 5);
          n *= dims[i];
        }
        hid_t space = H5Screate_simple(rank, dims, nullptr);
        std::vector<int64_t> v(std::max<size_t>(1, n), p_.ConsumeIntegralInRange<int64_t>(-3, 300));
        write_attr(loc, name, p_.ConsumeBool() ? int_type() : H5T_IEEE_F64LE, space, H5T_NATIVE_INT64,
                   n ? v.data() : nullptr);
        H5Sclose(space);
        break;
      }
      case 7: {  // a string array of rank 2
        hsize_t dims[2] = {2, p_.ConsumeIntegralInRange<hsize_t>(1, 2)};
        hid_t space = H5Screate_simple(2, dims, nullptr);
        hid_t t = string_type(true, 0);
        const char* ptrs[4] = {"nccl", "ipc", "baseline", "v-first"};
        write_attr(loc, name, t, space, t, ptrs);
        H5Tclose(t);
        H5Sclose(space);
        break;
      }
      case 8: {  // a null dataspace (h5py's Empty) of any type
        hid_t space = H5Screate(H5S_NULL);
        write_attr(loc, name, p_.ConsumeBool() ? H5T_STD_I64LE : H5T_C_S1, space, H5T_NATIVE_INT64, nullptr);
        H5Sclose(space);
        break;
      }
      case 9: {  // enums: h5py's bool {FALSE=0, TRUE=1}, a near-bool, and others
        const bool i8 = p_.ConsumeBool();
        hid_t t = H5Tenum_create(i8 ? H5T_NATIVE_SCHAR : H5T_NATIVE_UINT);
        const int style = p_.ConsumeIntegralInRange<int>(0, 3);  // 0 bool, 1 other name, 2 TRUE=2, 3 one member
        signed char sa = 0, sb = style == 2 ? 2 : 1;
        unsigned ua = 0, ub = style == 2 ? 2 : 1;
        // Member values are given in the enum's base type.
        H5Tenum_insert(t, style == 1 ? "NO" : "FALSE", i8 ? static_cast<const void*>(&sa) : &ua);
        if (style != 3) H5Tenum_insert(t, "TRUE", i8 ? static_cast<const void*>(&sb) : &ub);
        hid_t space = scalar_or_one();
        signed char sv = static_cast<signed char>(p_.ConsumeIntegralInRange<int>(0, 2));
        unsigned uv = static_cast<unsigned>(sv);
        write_attr(loc, name, t, space, t, i8 ? static_cast<const void*>(&sv) : &uv);
        H5Sclose(space);
        H5Tclose(t);
        break;
      }
      case 10: {  // compound {int64, double}
        hid_t t = H5Tcreate(H5T_COMPOUND, 16);
        H5Tinsert(t, "a", 0, H5T_STD_I64LE);
        H5Tinsert(t, "b", 8, H5T_IEEE_F64LE);
        hid_t space = H5Screate(H5S_SCALAR);
        unsigned char raw[16] = {1};
        write_attr(loc, name, t, space, t, raw);
        H5Sclose(space);
        H5Tclose(t);
        break;
      }
      case 11: {  // opaque or bitfield bytes
        const bool opaque = p_.ConsumeBool();
        hid_t t = opaque ? H5Tcreate(H5T_OPAQUE, 8) : H5Tcopy(H5T_STD_B64LE);
        if (opaque) H5Tset_tag(t, "deck-fuzz");
        hid_t space = H5Screate(H5S_SCALAR);
        uint64_t raw = 1;
        write_attr(loc, name, t, space, t, &raw);
        H5Sclose(space);
        H5Tclose(t);
        break;
      }
      case 12: {  // an HDF5 array type (int64[2]) or a vlen sequence of int32
        hid_t t;
        if (p_.ConsumeBool()) {
          hsize_t two = 2;
          t = H5Tarray_create2(H5T_STD_I64LE, 1, &two);
          int64_t raw[2] = {1, 2};
          hid_t space = H5Screate(H5S_SCALAR);
          write_attr(loc, name, t, space, t, raw);
          H5Sclose(space);
        } else {
          t = H5Tvlen_create(H5T_NATIVE_INT32);
          int32_t items[3] = {1, 2, 3};
          hvl_t v{3, items};
          hid_t space = H5Screate(H5S_SCALAR);
          write_attr(loc, name, t, space, t, &v);
          H5Sclose(space);
        }
        H5Tclose(t);
        break;
      }
      default: {  // the right kind for the field (a sensible value under a junk name)
        put_field(loc, is_int_field(field) || is_float_field(field) || is_list_field(field) ? field : "description");
        break;
      }
    }
  }

  FuzzedDataProvider& p_;
  int counter_ = 0;
};

#endif  // !ULYSSES_FUZZ_RAW

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5open();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the builder's own failures are expected
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path(".h5");
#if ULYSSES_FUZZ_RAW
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) finding("cannot write the scratch file " + path);
  if (size && std::fwrite(data, 1, size, f) != size) finding("cannot write the scratch file " + path);
  std::fclose(f);
#else
  FuzzedDataProvider p(data, size);
  Builder b(p);
  bool built = b.build(path);
  H5Eclear2(H5E_DEFAULT);
  // Nothing the builder opened may stay open (else the reader's check below blames it).
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) finding("the builder left HDF5 objects open");
  if (!built) {
    std::remove(path.c_str());
    return 0;
  }
#endif
  check_read(path);
  std::remove(path.c_str());
  return 0;
}
