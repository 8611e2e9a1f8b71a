// The report writer: a report of made-up runs read back with the plain HDF5 C API
// (values, shapes, critical-path statistics computed here independently), the
// temporary-then-rename guarantee, and percentile() against hand-computed values.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/deck_testing.hpp"
#include "base/error.hpp"
#include "lib/hdf5/hdf5_file.hpp"
#include "lib/report/model_bench.hpp"
#include "lib/report/node_sequences.hpp"
#include "lib/report/report.hpp"

namespace fs = std::filesystem;
using uipc::CaseResult;
using uipc::Provenance;
using uipc::RunResult;

namespace {

using uipc::testing::TempDir;
using uipc::testing::expect_same_case;


// ---------------------------------------------------------------- plain C API readers

hid_t open_attr(hid_t obj, const std::string& name) {
  hid_t a = H5Aopen(obj, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(a, 0) << "attribute " << name;
  return a;
}

std::vector<std::string> attr_strings(hid_t obj, const std::string& name) {
  hid_t a = open_attr(obj, name);
  hid_t ft = H5Aget_type(a);
  EXPECT_EQ(H5Tget_class(ft), H5T_STRING) << name;
  EXPECT_GT(H5Tis_variable_str(ft), 0) << name;
  EXPECT_EQ(H5Tget_cset(ft), H5T_CSET_UTF8) << name;
  hid_t sp = H5Aget_space(a);
  hssize_t n = H5Sget_simple_extent_npoints(sp);
  hid_t mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, H5T_VARIABLE);
  H5Tset_cset(mt, H5T_CSET_UTF8);
  std::vector<char*> p(static_cast<size_t>(n), nullptr);
  EXPECT_GE(H5Aread(a, mt, p.data()), 0);
  std::vector<std::string> out;
  for (char* s : p) out.emplace_back(s ? s : "");
  H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, p.data());
  H5Tclose(mt);
  H5Sclose(sp);
  H5Tclose(ft);
  H5Aclose(a);
  return out;
}

std::string attr_string(hid_t obj, const std::string& name) {
  hid_t a = open_attr(obj, name);
  hid_t sp = H5Aget_space(a);
  EXPECT_EQ(H5Sget_simple_extent_type(sp), H5S_SCALAR) << name;
  H5Sclose(sp);
  H5Aclose(a);
  return attr_strings(obj, name).at(0);
}

int64_t attr_int(hid_t obj, const std::string& name) {
  hid_t a = open_attr(obj, name);
  hid_t ft = H5Aget_type(a);
  EXPECT_EQ(H5Tget_class(ft), H5T_INTEGER) << name;
  int64_t v = 0;
  EXPECT_GE(H5Aread(a, H5T_NATIVE_INT64, &v), 0);
  H5Tclose(ft);
  H5Aclose(a);
  return v;
}

// A numeric attribute of class `cls`, all its values as T.
template <class T>
std::vector<T> attr_array(hid_t obj, const std::string& name, H5T_class_t cls, hid_t mem_type) {
  hid_t a = open_attr(obj, name);
  hid_t ft = H5Aget_type(a);
  EXPECT_EQ(H5Tget_class(ft), cls) << name;
  hid_t sp = H5Aget_space(a);
  std::vector<T> v(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  EXPECT_GE(H5Aread(a, mem_type, v.data()), 0);
  H5Sclose(sp);
  H5Tclose(ft);
  H5Aclose(a);
  return v;
}

std::vector<double> attr_doubles(hid_t obj, const std::string& name) {
  return attr_array<double>(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE);
}

double attr_double(hid_t obj, const std::string& name) { return attr_doubles(obj, name).at(0); }

std::vector<int64_t> attr_ints(hid_t obj, const std::string& name) {
  return attr_array<int64_t>(obj, name, H5T_INTEGER, H5T_NATIVE_INT64);
}

template <class T>
std::vector<T> dataset(hid_t loc, const std::string& name, hid_t mem_type, std::vector<hsize_t>* dims) {
  hid_t d = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  hid_t sp = H5Dget_space(d);
  int rank = H5Sget_simple_extent_ndims(sp);
  dims->assign(static_cast<size_t>(rank), 0);
  H5Sget_simple_extent_dims(sp, dims->data(), nullptr);
  std::vector<T> v(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  if (!v.empty()) {
    EXPECT_GE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  }
  H5Sclose(sp);
  H5Dclose(d);
  return v;
}

// ---------------------------------------------------------------- made-up runs

// Distinct, irregular values so that a transposed or shifted index shows up.
double fake_ms(int run, int rep, int it, int rank, int stage) {
  return 0.1 * (stage + 1) + 0.013 * ((rep * 7 + it * 3 + rank * 5 + run * 11 + stage) % 17) + 0.001 * rank;
}

RunResult make_run(int id, const std::string& transport, const std::string& schedule, int reps, int iters, int ranks) {
  RunResult r;
  r.transport_requested = transport;
  r.transport_used = id == 1 ? "nccl" : transport;
  r.fallback_reason = id == 1 ? "no peer access between ranks 0 and 1" : "";
  r.gather_transport = "nccl";
  r.schedule = schedule;
  r.projection = id == 1 ? "separate" : "fused";
  r.parity_pass = id != 2;
  r.parity_max_abs = 1.5e-3 * (id + 1);
  r.parity_rel_l2 = 2.5e-4 * (id + 1);
  r.parity_finite = id != 2;
  r.repeats = reps;
  r.iterations = iters;
  r.ranks = ranks;
  for (int rep = 0; rep < reps; ++rep)
    for (int it = 0; it < iters; ++it)
      for (int rank = 0; rank < ranks; ++rank) {
        for (int s = 0; s < uipc::kNumStages; ++s) r.stage_ms.push_back(fake_ms(id, rep, it, rank, s));
        r.v_overlap_ms.push_back(0.01 * (rep + it + rank));
      }
  r.scatter_bytes_per_rank = 3 * 2 * 256 * 512 + id;
  r.gather_bytes_per_rank = 2 * 256 * 512;
  r.handshakes_per_layer = id == 0 ? 1 : 0;
  r.cache_hits = 10 + id;
  r.cache_misses = 3;
  r.cache_evictions = id;
  r.timed_wall_start_s = 1.8e9 + id;
  r.timed_wall_end_s = r.timed_wall_start_s + 12.5;
  return r;
}

// numpy.percentile(x, p), written out again here (not the library's code).
double np_percentile(std::vector<double> x, double p) {
  std::sort(x.begin(), x.end());
  double pos = p / 100.0 * static_cast<double>(x.size() - 1);
  size_t i = static_cast<size_t>(pos);
  if (i + 1 >= x.size()) return x.back();
  return x[i] * (1 - (pos - i)) + x[i + 1] * (pos - i);
}

Provenance make_prov() {
  Provenance p;
  p.version = "abc123def456";
  p.date = "2025-01-02T03:04:05Z";
  p.command_line = "mpirun -np 4 ulysses-ipc inputs/default.h5 -o r.h5";
  p.mode = "sim";
  p.deck_path = "inputs/default.h5";
  p.world_size = 4;
  p.hosts = {"node0", "node0", "node0", "node0"};
  p.devices = {"sim:0", "sim:1", "sim:2", "sim:3"};
  p.host_cpus = {"CPU A, 16 CPUs usable", "CPU A, 16 CPUs usable", "CPU B, 8 CPUs usable", "unknown"};
  p.node_of_rank = {0, 0, 1, 1};
  p.node_layout = "2 nodes x 2 ranks (declared: --ranks-per-node 2)";
  p.versions = {{"mpi", "Open MPI 4.1"}, {"hdf5", "1.10.8"}, {"kokkos", "3.4.1"}};
  return p;
}

std::vector<CaseResult> make_cases() {
  CaseResult a;
  a.spec.name = "small-bf16";
  a.spec.seq_len = 256;
  a.runs = {make_run(0, "ipc", "v-first", 2, 5, 4), make_run(1, "ipc", "baseline", 1, 3, 4)};
  CaseResult b;
  b.spec.name = "tiny-dump";
  b.spec.heads = 4;
  b.spec.head_dim = 16;
  b.spec.dtype = uipc::DType::kFP16;
  b.runs = {make_run(2, "nccl", "baseline", 3, 4, 2)};
  b.has_dump = true;
  b.dump.tensors = {{"x", {1, 2, 3, 4, 5, 6}}, {"y", {0.5f, -0.25f}}};
  b.dump.shapes = {{"x", {1, 2, 3}}};  // y has no shape: stored 1-D
  return {a, b};
}

}  // namespace

TEST(Percentile, MatchesNumpyLinear) {
  EXPECT_DOUBLE_EQ(uipc::percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(uipc::percentile({4, 1, 3, 2}, 10), 1.3);
  EXPECT_DOUBLE_EQ(uipc::percentile({4, 1, 3, 2}, 90), 3.7);
  EXPECT_DOUBLE_EQ(uipc::percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(uipc::percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(uipc::percentile({15, 20, 35, 40, 50}, 40), 29);  // numpy: 29.0
  EXPECT_DOUBLE_EQ(uipc::percentile({15, 20, 35, 40, 50}, 50), 35);
  EXPECT_DOUBLE_EQ(uipc::percentile({7}, 10), 7);
  EXPECT_TRUE(std::isnan(uipc::percentile({}, 50)));
  EXPECT_TRUE(std::isnan(uipc::percentile({1, std::nan(""), 3}, 50)));
  EXPECT_THROW(uipc::percentile({1, 2}, 101), uipc::RuntimeError);
  EXPECT_STREQ(uipc::stage_name(uipc::kStageNormRope), "norm_rope");
  EXPECT_STREQ(uipc::stage_name(uipc::kStageLayer), "layer");
}

TEST(Report, WrittenAndReadBackWithPlainHdf5) {
  TempDir dir;
  std::string path = dir.file("report.h5");
  Provenance prov = make_prov();
  std::vector<CaseResult> cases = make_cases();
  uipc::write_report(path, prov, cases);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"report.h5"});  // the temporary is gone

  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(attr_string(f, "software"), "ulysses-ipc");
  EXPECT_EQ(attr_string(f, "software_version"), prov.version);
  EXPECT_EQ(attr_string(f, "date"), prov.date);
  EXPECT_EQ(attr_string(f, "command_line"), prov.command_line);
  EXPECT_EQ(attr_string(f, "mode"), "sim");
  EXPECT_EQ(attr_string(f, "deck"), prov.deck_path);
  EXPECT_EQ(attr_int(f, "world_size"), 4);
  EXPECT_EQ(attr_int(f, "schema_version"), 1);
  EXPECT_EQ(attr_strings(f, "cases"), (std::vector<std::string>{"small-bf16", "tiny-dump"}));
  EXPECT_EQ(attr_strings(f, "hosts"), prov.hosts);
  EXPECT_EQ(attr_strings(f, "devices"), prov.devices);
  EXPECT_EQ(attr_strings(f, "host_cpus"), prov.host_cpus);
  EXPECT_EQ(attr_ints(f, "node_of_rank"), prov.node_of_rank);
  EXPECT_EQ(attr_string(f, "node_layout"), prov.node_layout);
  hid_t vg = H5Gopen2(f, "versions", H5P_DEFAULT);
  ASSERT_GE(vg, 0);
  for (const auto& [k, v] : prov.versions) EXPECT_EQ(attr_string(vg, k), v);
  H5Gclose(vg);

  for (const CaseResult& cr : cases) {
    hid_t cg = H5Gopen2(f, ("cases/" + cr.spec.name).c_str(), H5P_DEFAULT);
    ASSERT_GE(cg, 0) << cr.spec.name;
    // the spec, under the deck's field names
    EXPECT_EQ(attr_string(cg, "name"), cr.spec.name);
    EXPECT_EQ(attr_int(cg, "seq_len"), cr.spec.seq_len);
    EXPECT_EQ(attr_int(cg, "heads"), cr.spec.heads);
    EXPECT_EQ(attr_string(cg, "dtype"), uipc::dtype_name(cr.spec.dtype));
    EXPECT_EQ(attr_strings(cg, "transports"), cr.spec.transports);
    EXPECT_DOUBLE_EQ(attr_double(cg, "tol_max_abs"), cr.spec.tol_max_abs);

    for (const RunResult& r : cr.runs) {
      std::string gname = r.transport_requested + "." + r.schedule;
      hid_t g = H5Gopen2(cg, gname.c_str(), H5P_DEFAULT);
      ASSERT_GE(g, 0) << gname;
      EXPECT_EQ(attr_string(g, "transport"), r.transport_requested);
      EXPECT_EQ(attr_string(g, "transport_used"), r.transport_used);
      EXPECT_EQ(attr_string(g, "fallback_reason"), r.fallback_reason);
      EXPECT_EQ(attr_string(g, "gather_transport"), r.gather_transport);
      EXPECT_EQ(attr_string(g, "schedule"), r.schedule);
      EXPECT_EQ(attr_string(g, "projection"), r.projection);
      EXPECT_EQ(attr_int(g, "parity_pass"), r.parity_pass ? 1 : 0);
      EXPECT_EQ(attr_int(g, "parity_finite"), r.parity_finite ? 1 : 0);
      EXPECT_DOUBLE_EQ(attr_double(g, "parity_max_abs"), r.parity_max_abs);
      EXPECT_DOUBLE_EQ(attr_double(g, "parity_rel_l2"), r.parity_rel_l2);
      EXPECT_EQ(attr_int(g, "handshakes_per_layer"), r.handshakes_per_layer);
      EXPECT_EQ(attr_int(g, "cache_hits"), r.cache_hits);
      EXPECT_EQ(attr_int(g, "cache_misses"), r.cache_misses);
      EXPECT_EQ(attr_int(g, "cache_evictions"), r.cache_evictions);
      EXPECT_DOUBLE_EQ(attr_double(g, "timed_wall_start_s"), r.timed_wall_start_s);
      EXPECT_DOUBLE_EQ(attr_double(g, "timed_wall_end_s"), r.timed_wall_end_s);
      EXPECT_EQ(attr_int(g, "scatter_bytes_per_rank"), r.scatter_bytes_per_rank);
      EXPECT_EQ(attr_int(g, "gather_bytes_per_rank"), r.gather_bytes_per_rank);

      std::vector<hsize_t> dims;
      std::vector<double> st = dataset<double>(g, "stage_ms", H5T_NATIVE_DOUBLE, &dims);
      EXPECT_EQ(dims, (std::vector<hsize_t>{hsize_t(r.repeats), hsize_t(r.iterations), hsize_t(r.ranks), 7}));
      EXPECT_EQ(st, r.stage_ms);
      hid_t ds = H5Dopen2(g, "stage_ms", H5P_DEFAULT);
      EXPECT_EQ(attr_string(ds, "units"), "ms");
      EXPECT_EQ(attr_strings(ds, "stages"), (std::vector<std::string>{"projection", "norm_rope", "scatter", "attention",
                                                                        "gather", "out_projection", "layer"}));
      H5Dclose(ds);
      std::vector<double> ov = dataset<double>(g, "v_overlap_ms", H5T_NATIVE_DOUBLE, &dims);
      EXPECT_EQ(dims, (std::vector<hsize_t>{hsize_t(r.repeats), hsize_t(r.iterations), hsize_t(r.ranks)}));
      EXPECT_EQ(ov, r.v_overlap_ms);
      ds = H5Dopen2(g, "v_overlap_ms", H5P_DEFAULT);
      EXPECT_EQ(attr_string(ds, "units"), "ms");
      H5Dclose(ds);

      // statistics over the per-iteration maximum across ranks, computed here again
      std::vector<double> med = attr_doubles(g, "median_ms"), p10 = attr_doubles(g, "p10_ms"),
                          p90 = attr_doubles(g, "p90_ms");
      ASSERT_EQ(med.size(), 7u);
      ASSERT_EQ(p10.size(), 7u);
      ASSERT_EQ(p90.size(), 7u);
      for (int s = 0; s < 7; ++s) {
        std::vector<double> crit;
        for (int rep = 0; rep < r.repeats; ++rep)
          for (int it = 0; it < r.iterations; ++it) {
            double m = 0;
            for (int rank = 0; rank < r.ranks; ++rank)
              m = std::max(m, r.stage_ms[(((rep * r.iterations) + it) * r.ranks + rank) * 7 + s]);
            crit.push_back(m);
          }
        EXPECT_NEAR(med[s], np_percentile(crit, 50), 1e-12) << gname << " stage " << s;
        EXPECT_NEAR(p10[s], np_percentile(crit, 10), 1e-12) << gname << " stage " << s;
        EXPECT_NEAR(p90[s], np_percentile(crit, 90), 1e-12) << gname << " stage " << s;
        if (s == uipc::kStageScatter) {
          double gbs = r.scatter_bytes_per_rank / (np_percentile(crit, 50) * 1e-3) / 1e9;
          EXPECT_NEAR(attr_double(g, "scatter_bandwidth_gbs"), gbs, 1e-9 * gbs);
        }
      }
      H5Gclose(g);
    }

    htri_t has_dump = H5Lexists(cg, "dump", H5P_DEFAULT);
    EXPECT_EQ(has_dump > 0, cr.has_dump) << cr.spec.name;
    if (cr.has_dump) {
      hid_t dg = H5Gopen2(cg, "dump", H5P_DEFAULT);
      std::vector<hsize_t> dims;
      std::vector<float> x = dataset<float>(dg, "x", H5T_NATIVE_FLOAT, &dims);
      EXPECT_EQ(dims, (std::vector<hsize_t>{1, 2, 3}));
      EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
      hid_t xd = H5Dopen2(dg, "x", H5P_DEFAULT);
      hid_t xt = H5Dget_type(xd);
      EXPECT_EQ(H5Tget_class(xt), H5T_FLOAT);
      EXPECT_EQ(H5Tget_size(xt), 4u);  // float32 on disk
      H5Tclose(xt);
      H5Dclose(xd);
      std::vector<float> y = dataset<float>(dg, "y", H5T_NATIVE_FLOAT, &dims);
      EXPECT_EQ(dims, (std::vector<hsize_t>{2}));
      EXPECT_EQ(y, (std::vector<float>{0.5f, -0.25f}));
      H5Gclose(dg);
    }
    H5Gclose(cg);
  }
  H5Fclose(f);
}

// Timings of kCompressMinBytes or more are written compressed (shuffle + deflate, one chunk)
// and read back bit for bit, by our reader and by plain HDF5; smaller datasets and tensor-size
// ones stay contiguous and unfiltered.
TEST(Hdf5, TimingsAreCompressedAndReadBackExactly) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(0.01, 9.0);
  std::vector<double> big(3 * 200 * 7), small(7);
  // As a GPU's timings are: cudaEventElapsedTime's floats, widened.
  for (double& x : big) x = static_cast<float>(u(rng));
  for (double& x : small) x = u(rng);
  const std::vector<float> huge(uipc::h5::kCompressMaxBytes / sizeof(float) + 1, 0.5f);
  const std::string path = dir.file("t.h5");
  {
    auto f = uipc::h5::File::create(path);
    f.root().write_dataset("stage_ms", {3, 200, 7}, big.data());
    f.root().write_dataset("small", {7}, small.data());
    f.root().write_dataset("dump", {static_cast<int64_t>(huge.size())}, huge.data());
    f.close();
  }
  struct Stored {
    int filters;
    H5D_layout_t layout;
    hsize_t bytes;
  };
  auto stored = [&](const char* name) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    const hid_t dcpl = H5Dget_create_plist(d);
    const Stored s{H5Pget_nfilters(dcpl), H5Pget_layout(dcpl), H5Dget_storage_size(d)};
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(file);
    return s;
  };
  const Stored timings = stored("stage_ms"), little = stored("small"), dump = stored("dump");
  EXPECT_EQ(timings.filters, 2);
  EXPECT_EQ(timings.layout, H5D_CHUNKED);
  EXPECT_LT(timings.bytes, big.size() * sizeof(double) * 3 / 4);  // a widened float's last four bytes are zeros
  EXPECT_EQ(little.filters, 0);
  EXPECT_EQ(little.layout, H5D_CONTIGUOUS);
  EXPECT_EQ(dump.filters, 0);
  EXPECT_EQ(dump.layout, H5D_CONTIGUOUS);
  auto f = uipc::h5::File::open_read(path);
  std::vector<int64_t> dims;
  EXPECT_EQ(f.root().read_doubles("stage_ms", &dims), big);
  EXPECT_EQ(dims, (std::vector<int64_t>{3, 200, 7}));
  EXPECT_EQ(f.root().read_doubles("small"), small);
}

TEST(Report, EmptyRunHasNoStatistics) {
  // A run with no timed layers (e.g. one that fell over before timing) still writes.
  TempDir dir;
  std::string path = dir.file("empty.h5");
  CaseResult c;
  c.spec.name = "c";
  RunResult r;
  r.transport_requested = "ipc";
  r.schedule = "baseline";
  r.ranks = 2;
  c.runs = {r};
  uipc::write_report(path, make_prov(), {c});
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t g = H5Gopen2(f, "cases/c/ipc.baseline", H5P_DEFAULT);
  ASSERT_GE(g, 0);
  std::vector<hsize_t> dims;
  EXPECT_TRUE(dataset<double>(g, "stage_ms", H5T_NATIVE_DOUBLE, &dims).empty());
  EXPECT_EQ(dims, (std::vector<hsize_t>{0, 0, 2, 7}));
  EXPECT_TRUE(std::isnan(attr_doubles(g, "median_ms").at(0)));
  EXPECT_EQ(attr_double(g, "scatter_bandwidth_gbs"), 0.0);
  EXPECT_LE(H5Lexists(g, "v_overlap_ms", H5P_DEFAULT), 0);  // not measured: absent
  H5Gclose(g);
  H5Fclose(f);
}

TEST(Report, FailuresLeaveNoFile) {
  TempDir dir;
  // unwritable: the directory does not exist
  EXPECT_THROW(uipc::write_report(dir.file("no/such/dir/r.h5"), make_prov(), make_cases()), uipc::RuntimeError);
  // malformed results: refused before any file exists
  std::vector<CaseResult> cases = make_cases();
  cases[1].runs[0].stage_ms.pop_back();
  EXPECT_THROW(uipc::write_report(dir.file("r.h5"), make_prov(), cases), uipc::RuntimeError);
  cases = make_cases();
  cases[0].runs.push_back(cases[0].runs[0]);  // two groups of the same name
  EXPECT_THROW(uipc::write_report(dir.file("r.h5"), make_prov(), cases), uipc::RuntimeError);
  cases = make_cases();
  cases[1].dump.shapes["x"] = {2, 2};
  EXPECT_THROW(uipc::write_report(dir.file("r.h5"), make_prov(), cases), uipc::RuntimeError);
  EXPECT_TRUE(dir.entries().empty());
  // a failure after the whole file was written (the rename): the temporary goes too
  fs::create_directories(dir.file("taken/child"));
  EXPECT_THROW(uipc::write_report(dir.file("taken"), make_prov(), make_cases()), uipc::RuntimeError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(fs::is_directory(dir.file("taken")));
}

TEST(Report, RemovePartialReportOnlyTouchesATemporary) {
  // Outside a write it is a no-op: a finished report stays.
  TempDir dir;
  std::string path = dir.file("r.h5");
  uipc::remove_partial_report();
  uipc::write_report(path, make_prov(), make_cases());
  uipc::remove_partial_report();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.h5"});
}

TEST(Report, ReplacesAnOldReportAtomically) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  uipc::write_report(path, make_prov(), make_cases());
  Provenance p = make_prov();
  p.mode = "gpu";
  uipc::write_report(path, p, make_cases());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(attr_string(f, "mode"), "gpu");
  H5Fclose(f);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"r.h5"});
}

// The model's norm+RoPE profile is read from the rows of the launch the bench's code ran
// in the layer: Q and K in one launch where the file says so, else (every bench of older
// code) the dispatched kernel's two launches; fresh random rates, so that a reader taking
// the other rows fails.
TEST(ModelBench, NormRopeProfileReadsTheLayersLaunch) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.0, 4.0);
  const double two = u(rng), one = two + u(rng), forced = one + u(rng);
  for (const bool tagged : {false, true}) {
    const std::string path = dir.file(tagged ? "one.h5" : "two.h5");
    {
      auto f = uipc::h5::File::create(path);
      uipc::h5::Group g = f.root().create_group("bench_kernels");
      g.write_attr("revision", "0123456789ab");
      if (tagged) g.write_attr("norm_rope_layer_launch", "qk_one_launch");
      const std::string shape = "M16896 H24 D128 bf16 fused";
      g.write_attr("section", std::vector<std::string>(5, "norm+rope"));
      g.write_attr("what", std::vector<std::string>{"norm+RoPE rms", "norm+RoPE rms (vector, 8 passes)",
                                                    "norm+RoPE rms (the pick, Q+K one launch)",
                                                    "norm+RoPE none (RoPE only)",
                                                    "norm+RoPE none (RoPE only) (the pick, Q+K one launch)"});
      g.write_attr("shape", std::vector<std::string>(5, shape));
      g.write_attr("unit", std::vector<std::string>(5, "TB/s"));
      g.write_attr("rate", std::vector<double>{two, forced, one, two / 2, one / 2});
      f.close();
    }
    const auto prof = uipc::read_norm_rope_profile(path);
    ASSERT_EQ(prof.size(), 2u) << path;
    for (const auto& p : prof) {
      const double want = (tagged ? one : two) * (p.norm == "none" ? 0.5 : 1.0) * 1000.0;
      EXPECT_TRUE(p.norm == "rms" || p.norm == "none") << p.norm;
      EXPECT_DOUBLE_EQ(p.gbs, want) << p.norm << (tagged ? " one launch" : " two launches");
      EXPECT_EQ(p.head_dim, 128);
      EXPECT_EQ(p.dtype, "bf16");
    }
  }
}

// A bench_kernels -o file of the given rows (its group's parallel attribute lists; `note`
// written where given), as the model's readers see the bench's output.
struct BenchFileRows {
  std::vector<std::string> section, what, shape, unit, note;
  std::vector<double> rate;
};
// The message of the InputError that `read` throws, or "(no error)".
template <class Read>
std::string input_error_of(Read read) {
  try {
    read();
  } catch (const uipc::InputError& e) {
    return std::string(e.what());
  }
  return std::string("(no error)");
}

std::string write_bench_file(const std::string& path, const BenchFileRows& r, const std::string& revision = "") {
  auto f = uipc::h5::File::create(path);
  uipc::h5::Group g = f.root().create_group("bench_kernels");
  if (!revision.empty()) g.write_attr("revision", revision);
  g.write_attr("section", r.section);
  g.write_attr("what", r.what);
  g.write_attr("shape", r.shape);
  g.write_attr("unit", r.unit);
  if (!r.note.empty()) g.write_attr("note", r.note);
  g.write_attr("rate", r.rate);
  f.close();
  return path;
}

// A host's call costs come from bench_kernels' floor-op host rows (us per call; the two
// cuBLASLt calls and the two plain launches averaged) and the event-hop row's note (half a
// record + wait); the GPU rows of the same ops are not read, and a file without the host rows
// is refused naming the row it lacks.
TEST(ModelBench, HostCostsComeFromTheFloorOpHostRows) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.0, 20.0);
  const double qk = u(rng), out = u(rng), norm = u(rng), conv = u(rng), att = u(rng), hop = u(rng);
  double copy = u(rng);
  auto bench = [&](const std::string& name, bool with_attention) {
    BenchFileRows b;
    auto row = [&](const std::string& w, double r, const std::string& n) {
      b.section.push_back("latency");
      b.what.push_back(w);
      b.shape.push_back("20 in a row");
      b.unit.push_back("us");
      b.rate.push_back(r);
      b.note.push_back(n);
    };
    char hop_note[96];
    std::snprintf(hop_note, sizeof(hop_note), "GPU time per hop; host enqueue %.5f us per hop", hop);
    row(uipc::kEventHopRowWhat, 1.7, hop_note);
    for (const auto& [op, host] : std::vector<std::pair<const char*, double>>{{uipc::kFloorOpQkProjection, qk},
                                                                               {uipc::kFloorOpOutProjection, out},
                                                                               {uipc::kFloorOpNormRope, norm},
                                                                               {uipc::kFloorOpAttention, att},
                                                                               {uipc::kFloorOpConversion, conv},
                                                                               {uipc::kFloorOpCopy, copy}}) {
      if (!with_attention && std::string(op) == uipc::kFloorOpAttention) continue;
      // The GPU's rows of the same op hold other figures: the reader must take the host's.
      row(uipc::floor_op_what(uipc::kGraphRows, op), host + 100, "GPU time per op as a node of a graph");
      row(uipc::floor_op_what(uipc::kStreamRows, op), host + 200, "GPU time per op issued op by op");
      row(uipc::floor_op_what(uipc::kHostRows, op), host, "host enqueue per op, op by op");
    }
    return write_bench_file(dir.file(name), b);
  };
  const std::map<std::string, double> c = uipc::read_host_costs(bench("host.h5", true));
  ASSERT_EQ(c.size(), 5u);
  EXPECT_DOUBLE_EQ(c.at("host_gemm_us"), (qk + out) / 2);
  EXPECT_DOUBLE_EQ(c.at("host_launch_us"), (norm + conv) / 2);
  EXPECT_DOUBLE_EQ(c.at("host_attention_us"), att);
  EXPECT_DOUBLE_EQ(c.at("host_copy_us"), copy);
  EXPECT_NEAR(c.at("host_api_us"), hop / 2, 1e-5);
  auto error_of = [](const std::string& path) { return input_error_of([&] { uipc::read_host_costs(path); }); };
  const std::string missing = error_of(bench("no-attention.h5", false));
  EXPECT_NE(missing.find("no row 'host: floor op: attention'"), std::string::npos) << missing;
  copy = 2e4;  // us: beyond what any host call can cost (host_copy_us's bounds)
  const std::string error = error_of(bench("absurd.h5", true));
  EXPECT_NE(error.find("host_copy_us it gives is 20000 us, outside"), std::string::npos) << error;
}

// A GPU's own device costs come from bench_kernels' graph-node and floor-op rows, each op by
// op (streams rows) and as a graph node (graph rows): the empty kernel's, a record after work as
// its row less the empty kernel's, the faster projection as the GEMM's least, half the write-and-
// wait row a memory op; the host rows are not read; the NCCL and memory-op rows are optional
// (code before db07774 has none), the others required, and an absurd figure is refused.
TEST(ModelBench, DeviceCostsComeFromTheGraphNodeAndFloorOpRows) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.0, 20.0);
  std::map<std::string, std::pair<double, double>> gpu;  // what -> (streams, graph)
  for (const char* w : {uipc::kEmptyKernels, uipc::kEmptyKernelsRecorded}) gpu[w] = {u(rng), u(rng)};
  gpu[uipc::kEmptyKernelsRecorded].first += 25;  // a record after a kernel costs more than none
  gpu[uipc::kEmptyKernelsRecorded].second += 25;
  for (const char* op : {uipc::kFloorOpQkProjection, uipc::kFloorOpOutProjection, uipc::kFloorOpNormRope,
                         uipc::kFloorOpAttention, uipc::kFloorOpConversion, uipc::kFloorOpCopy, uipc::kFloorOpMemop,
                         uipc::kFloorOpNcclOneRank})
    gpu[uipc::kFloorOpPrefix + std::string(op)] = {u(rng), u(rng)};
  auto bench = [&](const std::string& name, const std::set<std::string>& leave_out) {
    BenchFileRows b;
    auto row = [&](const std::string& w, double r) {
      b.section.push_back("latency");
      b.what.push_back(w);
      b.shape.push_back("20 in a row");
      b.unit.push_back("us");
      b.rate.push_back(r);
    };
    for (const auto& [what, t] : gpu) {
      if (leave_out.count(what)) continue;
      row(std::string(uipc::kStreamRows) + ": " + what, t.first);
      row(std::string(uipc::kGraphRows) + ": " + what, t.second);
      row(std::string(uipc::kHostRows) + ": " + what, 999);  // the host's: not the GPU's
    }
    return write_bench_file(dir.file(name), b, "abc1234");
  };
  auto at = [&](const char* op) { return gpu.at(uipc::kFloorOpPrefix + std::string(op)); };
  auto expect = [](const uipc::model::IssueCost& c, double streams, double graph, const char* what) {
    EXPECT_DOUBLE_EQ(c.op_by_op, streams) << what;
    EXPECT_DOUBLE_EQ(c.graph, graph) << what;
  };
  const uipc::model::DeviceCosts d = uipc::read_device_costs(bench("gpu.h5", {}));
  const auto empty = gpu.at(uipc::kEmptyKernels), recorded = gpu.at(uipc::kEmptyKernelsRecorded);
  expect(d.empty_kernel, empty.first, empty.second, "empty kernel");
  expect(d.record_after_work, recorded.first - empty.first, recorded.second - empty.second, "record");
  const auto qk = at(uipc::kFloorOpQkProjection), out = at(uipc::kFloorOpOutProjection);
  expect(d.gemm, std::min(qk.first, out.first), std::min(qk.second, out.second), "gemm");
  expect(d.norm_rope, at(uipc::kFloorOpNormRope).first, at(uipc::kFloorOpNormRope).second, "norm_rope");
  expect(d.attention, at(uipc::kFloorOpAttention).first, at(uipc::kFloorOpAttention).second, "attention");
  expect(d.convert, at(uipc::kFloorOpConversion).first, at(uipc::kFloorOpConversion).second, "convert");
  expect(d.copy, at(uipc::kFloorOpCopy).first, at(uipc::kFloorOpCopy).second, "copy");
  expect(d.memop, at(uipc::kFloorOpMemop).first / 2, at(uipc::kFloorOpMemop).second / 2, "memop");
  expect(d.nccl_one_rank, at(uipc::kFloorOpNcclOneRank).first, at(uipc::kFloorOpNcclOneRank).second, "nccl");
  EXPECT_DOUBLE_EQ(d.nccl_one_rank_bytes, 786432.0);
  EXPECT_NE(d.source.find("abc1234"), std::string::npos) << d.source;
  // Code before the scatter's rows: those stay 0 (the machine's own), the rest is read.
  const uipc::model::DeviceCosts old = uipc::read_device_costs(
      bench("old.h5", {uipc::kFloorOpPrefix + std::string(uipc::kFloorOpMemop),
                       uipc::kFloorOpPrefix + std::string(uipc::kFloorOpNcclOneRank)}));
  expect(old.memop, 0, 0, "no memory-op row");
  expect(old.nccl_one_rank, 0, 0, "no NCCL row");
  expect(old.norm_rope, d.norm_rope.op_by_op, d.norm_rope.graph, "norm_rope of the older file");
  auto error_of = [](const std::string& path) { return input_error_of([&] { uipc::read_device_costs(path); }); };
  const std::string missing = error_of(bench("no-empty.h5", {uipc::kEmptyKernels}));
  EXPECT_NE(missing.find("no row 'streams: empty kernels'"), std::string::npos) << missing;
  gpu[uipc::kFloorOpPrefix + std::string(uipc::kFloorOpAttention)].second = 5e3;
  const std::string absurd = error_of(bench("absurd.h5", {}));
  EXPECT_NE(absurd.find("'graph: floor op: attention' gives 5000"), std::string::npos) << absurd;
}

// Every graph-node sequence is one the GPU can issue and the model can replay: each wait waits
// on an event its kernel's steps recorded before it, each event is timed or ordering
// throughout its variant, every name is distinct, and a chain's enqueue has a gate.
TEST(ModelBench, NodeSequencesWaitOnlyOnWhatTheyRecorded) {
  std::set<std::string> names;
  for (const uipc::NodeVariant& v : uipc::node_variants()) {
    SCOPED_TRACE(v.what);
    EXPECT_TRUE(names.insert(v.what).second);
    EXPECT_GE(v.chains, 1);
    EXPECT_GE(v.trials, 1);
    EXPECT_GE(v.gate_multiple, 1);
    EXPECT_GE(v.every, 1);
    EXPECT_EQ(v.kernels % v.every, 0) << "a chain ends on a kernel with steps";
    std::map<int, uipc::NodeStep::Kind> use;  // event -> how it is recorded
    for (const auto* steps : {&v.before, &v.after})
      for (const uipc::NodeStep& st : *steps) {
        ASSERT_GE(st.event, 0);
        ASSERT_LT(st.event, uipc::kNodeEvents);
        const bool record = st.kind == uipc::NodeStep::kRecordTimed || st.kind == uipc::NodeStep::kRecordOrdering;
        if (record) {
          const auto [it, fresh] = use.emplace(st.event, st.kind);
          EXPECT_EQ(it->second, st.kind) << "event " << st.event << " both timed and ordering";
        }
        if (st.kind == uipc::NodeStep::kWaitEvent) {
          EXPECT_TRUE(use.count(st.event)) << "a wait on event " << st.event;
        }
      }
  }
}

// The graph-node sequences replayed on a machine with a GPU's own costs: the empty kernels and
// a record after each give back the very rows those costs were read from, an ordering record
// costs nothing, adding steps to a sequence never makes it quicker, and a variant the file has
// no rows of is left out.
TEST(ModelBench, NodeSequencesReplayWithTheGpusOwnCosts) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.0, 3.0);
  std::map<std::string, std::pair<double, double>> gpu;  // what -> (streams, graph)
  for (const uipc::NodeVariant& v : uipc::node_variants()) gpu[v.what] = {2 + u(rng), 2 + u(rng)};
  gpu[uipc::kEmptyKernels] = {u(rng), u(rng)};
  for (const char* op : {uipc::kFloorOpQkProjection, uipc::kFloorOpOutProjection, uipc::kFloorOpNormRope,
                         uipc::kFloorOpAttention, uipc::kFloorOpConversion, uipc::kFloorOpCopy, uipc::kFloorOpMemop,
                         uipc::kFloorOpNcclOneRank})
    gpu[uipc::kFloorOpPrefix + std::string(op)] = {u(rng), u(rng)};
  const std::string left_out = uipc::kEmptyKernelsStagedScatterNoV;
  BenchFileRows b;
  for (const auto& [what, t] : gpu) {
    if (what == left_out) continue;
    for (const auto& [way, r] : {std::pair{uipc::kStreamRows, t.first}, std::pair{uipc::kGraphRows, t.second}}) {
      b.section.push_back("latency");
      b.what.push_back(std::string(way) + ": " + what);
      b.shape.push_back("20 kernels, 20 launches");
      b.unit.push_back("us");
      b.rate.push_back(r);
    }
  }
  const std::string path = write_bench_file(dir.file("gpu.h5"), b, "abc1234");
  const uipc::model::Machine m =
      uipc::model::load_machine(std::string(ULYSSES_SOURCE_DIR) + "/inputs/machines/h100-sxm.json");
  std::map<std::string, uipc::NodeRowReplay> got;
  for (const uipc::NodeRowReplay& r : uipc::replay_node_rows(m, path)) got.emplace(r.what, r);
  EXPECT_EQ(got.size(), uipc::node_variants().size() - 1);
  EXPECT_EQ(got.count(left_out), 0u);
  auto expect_measured_back = [&](const char* what) {
    const uipc::NodeRowReplay& r = got.at(what);
    EXPECT_DOUBLE_EQ(r.measured.op_by_op, gpu.at(what).first) << what;
    EXPECT_DOUBLE_EQ(r.measured.graph, gpu.at(what).second) << what;
    EXPECT_NEAR(r.modelled.op_by_op, r.measured.op_by_op, 1e-9) << what;
    EXPECT_NEAR(r.modelled.graph, r.measured.graph, 1e-9) << what;
  };
  expect_measured_back(uipc::kEmptyKernels);
  expect_measured_back(uipc::kEmptyKernelsRecorded);
  const uipc::NodeRowReplay& ordering = got.at("empty kernels, an ordering event recorded after each");
  EXPECT_NEAR(ordering.modelled.op_by_op, gpu.at(uipc::kEmptyKernels).first, 1e-9);
  EXPECT_NEAR(ordering.modelled.graph, gpu.at(uipc::kEmptyKernels).second, 1e-9);
  const uipc::NodeRowReplay &hs = got.at(uipc::kEmptyKernelsHandshake), &st = got.at(uipc::kEmptyKernelsStagedScatter);
  for (const auto* r : {&hs, &st}) {
    EXPECT_GT(r->modelled.op_by_op, gpu.at(uipc::kEmptyKernels).first) << r->what;
    EXPECT_GT(r->modelled.graph, gpu.at(uipc::kEmptyKernels).second) << r->what;
  }
  EXPECT_GE(st.modelled.op_by_op, hs.modelled.op_by_op);
  EXPECT_GE(st.modelled.graph, hs.modelled.graph);
  const uipc::NodeRowReplay &copies = got.at("1 MB copies"),
                            &copy_hop = got.at("1 MB copies, a hop through ordering events after each");
  EXPECT_GT(copies.modelled.graph, gpu.at(uipc::kEmptyKernels).second);  // the bytes take time too
  EXPECT_GT(copy_hop.modelled.graph, copies.modelled.graph);
  // Steps after one kernel in forty: the scatter's cost spread over forty kernels, not one.
  const uipc::NodeRowReplay& forty = got.at("forty empty kernels a graph");
  const uipc::NodeRowReplay& forty_st =
      got.at("forty empty kernels a graph, a staged layer's one-rank IPC scatter after the last");
  const uipc::model::IssueCost empty{gpu.at(uipc::kEmptyKernels).first, gpu.at(uipc::kEmptyKernels).second};
  for (const bool graph : {false, true}) {
    EXPECT_NEAR(forty.modelled.at(graph), empty.at(graph), 1e-9);
    const double each = st.modelled.at(graph) - empty.at(graph);  // a scatter after every kernel
    EXPECT_NEAR(forty_st.modelled.at(graph) - empty.at(graph), each / 40, 0.05 * each / 40) << graph;
  }
}

// The GEMM profile is read from bench_kernels' GEMM-by-shape rows only (not the projection's
// other GEMM rows); `--rates` files each give the profiles they hold, two files may not
// give the same one, a file with neither is refused, and a malformed shape is named.
TEST(ModelBench, RatesFilesGiveTheirGemmAndNormRopeProfiles) {
  TempDir dir;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(300.0, 900.0);
  const double a = u(rng), b = u(rng), other = u(rng), norm = u(rng) / 100;
  auto bench = [&](const std::string& name, const std::vector<std::string>& section, const std::vector<std::string>& what,
                   const std::vector<std::string>& shape, const std::vector<std::string>& unit,
                   const std::vector<double>& rate) {
    return write_bench_file(dir.file(name), BenchFileRows{section, what, shape, unit, {}, rate}, "0123456789ab");
  };
  const std::string w = uipc::kGemmShapeRowWhat;
  const std::string gemm = bench("gemm.h5", {"gemm", "gemm", "gemm"}, {"QKV projection (cuBLASLt), one GEMM", w, w},
                                 {"M8448 K3072 N9216 bf16", "M4608 K3072 N9216 bf16", "M16896 K3072 N3072 bf16"},
                                 {"TFLOP/s", "TFLOP/s", "TFLOP/s"}, {other, a, b});
  const std::string nr = bench("norm.h5", {"norm+rope"}, {"norm+RoPE rms"}, {"M16896 H24 D128 bf16 fused"}, {"TB/s"}, {norm});
  const uipc::BenchRates r = uipc::read_bench_rates({nr, gemm});
  ASSERT_EQ(r.gemm.size(), 2u);
  EXPECT_EQ(r.gemm[0].m, 4608);
  EXPECT_EQ(r.gemm[0].k, 3072);
  EXPECT_EQ(r.gemm[0].n, 9216);
  EXPECT_DOUBLE_EQ(r.gemm[0].tflops, a);
  EXPECT_EQ(r.gemm[1].m, 16896);
  EXPECT_EQ(r.gemm[1].n, 3072);
  EXPECT_DOUBLE_EQ(r.gemm[1].tflops, b);
  EXPECT_NE(r.gemm[0].source.find("0123456789ab"), std::string::npos) << r.gemm[0].source;
  ASSERT_EQ(r.norm_rope.size(), 1u);
  EXPECT_DOUBLE_EQ(r.norm_rope[0].gbs, norm * 1000);
  EXPECT_TRUE(uipc::read_bench_rates({gemm}).norm_rope.empty());
  auto error_of = [](const std::vector<std::string>& paths) { return input_error_of([&] { uipc::read_bench_rates(paths); }); };
  EXPECT_NE(error_of({gemm, gemm}).find("hold the GEMM profile: give one"), std::string::npos) << error_of({gemm, gemm});
  const std::string neither = bench("neither.h5", {"gemm"}, {"QKV projection (cuBLASLt), one GEMM"},
                                    {"M8448 K3072 N9216 bf16"}, {"TFLOP/s"}, {other});
  EXPECT_NE(error_of({neither}).find("holds no norm+RoPE rows"), std::string::npos) << error_of({neither});
  const std::string bad = bench("bad.h5", {"gemm"}, {w}, {"M4608 N9216 bf16"}, {"TFLOP/s"}, {a});
  EXPECT_NE(error_of({bad}).find("'M4608 N9216 bf16' is not 'M<m> K<k> N<n> bf16'"), std::string::npos) << error_of({bad});

  // The attention profile: the by-shape rows only (not the one-shape row of the attention
  // section, nor the reference kernel's), each shape as written.
  const std::string aw = uipc::kAttentionShapeRowWhat;
  const std::string att = bench("att.h5", {"attention", "attention", "attention", "attention"},
                                {"attention (ULYSSES_ATTENTION=cudnn)", aw, aw, "attention (reference kernel)"},
                                {"B1 H6 S16384 D128 bf16", "B1 H24 S16896 D128 bf16", "B2 H5 S75600 D72 bf16",
                                 "B1 H6 S16384 D128 bf16"},
                                {"TFLOP/s", "TFLOP/s", "TFLOP/s", "TFLOP/s"}, {other, a, b, norm});
  const uipc::BenchRates ra = uipc::read_bench_rates({nr, gemm, att});
  ASSERT_EQ(ra.attention.size(), 2u);
  EXPECT_EQ(ra.attention[0].batch, 1);
  EXPECT_EQ(ra.attention[0].heads, 24);
  EXPECT_EQ(ra.attention[0].seq, 16896);
  EXPECT_EQ(ra.attention[0].head_dim, 128);
  EXPECT_DOUBLE_EQ(ra.attention[0].tflops, a);
  EXPECT_EQ(ra.attention[1].batch, 2);
  EXPECT_EQ(ra.attention[1].heads, 5);
  EXPECT_EQ(ra.attention[1].seq, 75600);
  EXPECT_EQ(ra.attention[1].head_dim, 72);
  EXPECT_DOUBLE_EQ(ra.attention[1].tflops, b);
  EXPECT_NE(ra.attention[1].source.find("0123456789ab"), std::string::npos) << ra.attention[1].source;
  EXPECT_EQ(ra.gemm.size(), 2u);
  EXPECT_TRUE(uipc::read_bench_rates({gemm}).attention.empty());
  EXPECT_NE(error_of({att, att}).find("hold the attention profile: give one"), std::string::npos);
  const std::string bad_att = bench("bad_att.h5", {"attention"}, {aw}, {"B1 H24 S16896 bf16"}, {"TFLOP/s"}, {a});
  EXPECT_NE(error_of({bad_att}).find("'B1 H24 S16896 bf16' is not 'B<b> H<h> S<s> D<d> bf16'"), std::string::npos)
      << error_of({bad_att});
}
