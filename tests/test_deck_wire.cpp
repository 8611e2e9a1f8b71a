// The deck on the wire: the binary encoding round-trips every field and refuses every
// truncated or corrupt buffer; read_deck_on_root gives every rank the same deck (read by
// rank 0 alone) or the same error; the per-rank memory estimate is a sane upper bound.
// Run under mpiexec at 1, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/mpi_testing.hpp"
#include "tests/deck_testing.hpp"
#include "base/error.hpp"
#include "lib/deck/deck.hpp"
#include "lib/deck/deck_wire.hpp"
#include "lib/run/memory_estimate.hpp"

namespace fs = std::filesystem;
using uipc::Case;
using uipc::Deck;

namespace {

using uipc::testing::world_rank;

using uipc::testing::TempDir;
using uipc::testing::expect_same_case;

// A case with every field away from its default (checked below, so that a field the
// encoding forgot cannot hide behind a default that happens to match).
Case all_non_default(const std::string& name, int variant) {
  Case c;
  c.name = name;
  c.description = "d\xc3\xa9scription with UTF-8, a comma, and a NUL-free tail " + std::to_string(variant);
  c.batch = 3;
  c.seq_len = 512 + 64 * variant;
  c.heads = 16;
  c.head_dim = 32;
  c.dtype = variant ? uipc::DType::kFP16 : uipc::DType::kFP32;
  c.qk_norm = variant ? uipc::NormKind::kLayerPerHead : uipc::NormKind::kRmsAcrossHeads;
  c.norm_eps = 3.5e-5f;
  c.rope = uipc::RopeKind::kNone;
  c.rope_theta = 500000.0f;
  c.fused_qkv = false;
  c.ulysses = 4;
  c.tp = variant ? 2 : 1;
  c.transports = {"ipc", "nccl-ce", "hier-vmajor"};
  c.schedules = {"v-first-split", "baseline"};
  c.ablations = {"no-target-cache", "own-slice-copy"};
  c.warmup = 7;
  c.iterations = 11;
  c.repeats = 2;
  c.seed = 0xfedcba9876543210ull;
  c.tol_max_abs = 0.125;
  c.tol_rel_l2 = 1e-7;
  c.watchdog_s = 12.5;
  c.rank_order = uipc::RankOrder::kTpInner;
  c.steps = 9;
  c.step_similarity = 0.9375;
  c.full_steps = 3;
  c.vmajor_threshold = 0.03125;
  c.vmajor_tol_rel_l2 = 0.25;
  return c;
}

void expect_every_field_differs_from_default(const Case& c) {
  const Case d;
  EXPECT_NE(c.description, d.description);
  EXPECT_NE(c.batch, d.batch);
  EXPECT_NE(c.seq_len, d.seq_len);
  EXPECT_NE(c.heads, d.heads);
  EXPECT_NE(c.head_dim, d.head_dim);
  EXPECT_NE(c.dtype, d.dtype);
  EXPECT_NE(c.qk_norm, d.qk_norm);
  EXPECT_NE(c.norm_eps, d.norm_eps);
  EXPECT_NE(c.rope, d.rope);
  EXPECT_NE(c.rope_theta, d.rope_theta);
  EXPECT_NE(c.fused_qkv, d.fused_qkv);
  EXPECT_NE(c.ulysses, d.ulysses);
  EXPECT_NE(c.transports, d.transports);
  EXPECT_NE(c.schedules, d.schedules);
  EXPECT_NE(c.ablations, d.ablations);
  EXPECT_NE(c.warmup, d.warmup);
  EXPECT_NE(c.iterations, d.iterations);
  EXPECT_NE(c.repeats, d.repeats);
  EXPECT_NE(c.seed, d.seed);
  EXPECT_NE(c.tol_max_abs, d.tol_max_abs);
  EXPECT_NE(c.tol_rel_l2, d.tol_rel_l2);
  EXPECT_NE(c.watchdog_s, d.watchdog_s);
  EXPECT_NE(c.rank_order, d.rank_order);
  EXPECT_NE(c.steps, d.steps);
  EXPECT_NE(c.step_similarity, d.step_similarity);
  EXPECT_NE(c.full_steps, d.full_steps);
  EXPECT_NE(c.vmajor_threshold, d.vmajor_threshold);
  EXPECT_NE(c.vmajor_tol_rel_l2, d.vmajor_tol_rel_l2);
}


Deck sample_deck() {
  Deck d;
  d.description = "two cases, nothing at its default";
  d.cases = {all_non_default("first", 0), all_non_default("second.case+2", 1)};
  return d;
}

// The error every rank of the run threw, or "" when none did.
struct Outcome {
  bool threw = false;
  int code = 0;
  std::string what;
};

// Rank 0's string, on every rank.
std::string bcast_string(std::string s) {
  int len = static_cast<int>(s.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(static_cast<size_t>(len));
  MPI_Bcast(&s[0], len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

// A directory every rank sees: rank 0's TempDir, its path broadcast (all ranks run on
// this host).
class SharedTempDir {
 public:
  SharedTempDir() {
    if (world_rank() == 0) owned_ = std::make_unique<TempDir>();
    path_ = bcast_string(owned_ ? owned_->path() : std::string());
    EXPECT_FALSE(path_.empty());
  }
  // Every rank is done with it before rank 0's TempDir removes it.
  ~SharedTempDir() { MPI_Barrier(MPI_COMM_WORLD); }
  std::string file(const std::string& n) const { return (fs::path(path_) / n).string(); }

 private:
  std::unique_ptr<TempDir> owned_;
  std::string path_;
};

// read_deck_on_root's outcome on this rank: the error it threw, if any.
Outcome read_on_root(const std::string& path, double timeout_s = 60.0) {
  Outcome o;
  try {
    uipc::read_deck_on_root(path, MPI_COMM_WORLD, timeout_s);
  } catch (const uipc::CollectiveError& e) {
    o = {true, e.exit_code(), e.what()};
  }
  return o;
}

}  // namespace

// ---------------------------------------------------------------- encoding

TEST(DeckWire, RoundTripEveryFieldNonDefault) {
  Deck d = sample_deck();
  for (const Case& c : d.cases) expect_every_field_differs_from_default(c);
  d.schema_version = 7;  // carried as it is; read_deck is what refuses a wrong version
  std::vector<unsigned char> bytes = uipc::serialize_deck(d);
  Deck r = uipc::deserialize_deck(bytes.data(), bytes.size());
  EXPECT_EQ(r.schema_version, 7);
  EXPECT_EQ(r.description, d.description);
  ASSERT_EQ(r.cases.size(), d.cases.size());
  for (size_t i = 0; i < d.cases.size(); ++i) expect_same_case(d.cases[i], r.cases[i]);
  EXPECT_EQ(uipc::serialize_deck(r), bytes);  // deterministic, nothing lost
}

TEST(DeckWire, OddValuesTravelBitExact) {
  Deck d;
  Case c = all_non_default("x", 0);
  c.norm_eps = -0.0f;
  c.rope_theta = std::numeric_limits<float>::quiet_NaN();
  c.tol_max_abs = std::numeric_limits<double>::infinity();
  c.tol_rel_l2 = std::numeric_limits<double>::denorm_min();
  c.batch = std::numeric_limits<int64_t>::min();
  c.seq_len = std::numeric_limits<int64_t>::max();
  c.heads = -1;
  c.seed = std::numeric_limits<uint64_t>::max();
  c.description = std::string("\0\xff\x80 bytes", 9);
  c.transports = {};
  c.schedules = {"", std::string(70000, 's')};
  d.cases = {c};
  std::vector<unsigned char> bytes = uipc::serialize_deck(d);
  Deck r = uipc::deserialize_deck(bytes.data(), bytes.size());
  ASSERT_EQ(r.cases.size(), 1u);
  const Case& o = r.cases[0];
  EXPECT_TRUE(std::signbit(o.norm_eps) && o.norm_eps == 0.0f);
  EXPECT_TRUE(std::isnan(o.rope_theta));
  EXPECT_EQ(o.tol_max_abs, c.tol_max_abs);
  EXPECT_EQ(o.tol_rel_l2, c.tol_rel_l2);
  EXPECT_EQ(o.batch, c.batch);
  EXPECT_EQ(o.seq_len, c.seq_len);
  EXPECT_EQ(o.heads, -1);
  EXPECT_EQ(o.seed, c.seed);
  EXPECT_EQ(o.description, c.description);
  EXPECT_TRUE(o.transports.empty());
  EXPECT_EQ(o.schedules, c.schedules);
  EXPECT_TRUE(uipc::deserialize_deck(uipc::serialize_deck(Deck{}).data(), uipc::serialize_deck(Deck{}).size())
                  .cases.empty());
}

TEST(DeckWire, EveryTruncationThrowsRuntimeError) {
  std::vector<unsigned char> bytes = uipc::serialize_deck(sample_deck());
  ASSERT_GT(bytes.size(), 100u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A copy of exactly n bytes, so that ASan sees any read past the end.
    std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      uipc::deserialize_deck(cut.data(), cut.size());
      ADD_FAILURE() << "a deck cut to " << n << " of " << bytes.size() << " bytes was accepted";
    } catch (const uipc::RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("deck encoding"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(uipc::deserialize_deck(nullptr, 0), uipc::RuntimeError);
}

TEST(DeckWire, CorruptBuffersThrowRuntimeError) {
  const std::vector<unsigned char> good = uipc::serialize_deck(sample_deck());
  auto expect_refused = [](std::vector<unsigned char> b, const std::string& needle) {
    try {
      uipc::deserialize_deck(b.data(), b.size());
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const uipc::RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::vector<unsigned char> b = good;
  b.push_back(0);
  expect_refused(b, "left over");
  b = good;
  b[0] = 'X';
  expect_refused(b, "magic");
  b = good;
  b[4] = static_cast<unsigned char>(uipc::kDeckWireVersion + 1);  // an encoding version this program does not read
  expect_refused(b, "version");
  // The case count (after magic, version, schema_version, description): absurd.
  const size_t count_at = 4 + 4 + 4 + 4 + sample_deck().description.size();
  b = good;
  b[count_at] = b[count_at + 1] = b[count_at + 2] = b[count_at + 3] = 0xff;
  expect_refused(b, "truncated");
  // The first case's name length: 4 GiB, refused before any allocation.
  b = good;
  for (int i = 0; i < 4; ++i) b[count_at + 4 + i] = 0xff;
  expect_refused(b, "truncated");
  // An enum out of range: dtype sits after name, description, batch, seq_len, heads, head_dim.
  const Case c0 = sample_deck().cases[0];
  const size_t dtype_at = count_at + 4 + 4 + c0.name.size() + 4 + c0.description.size() + 8 + 8 + 4 + 4;
  ASSERT_LT(dtype_at, good.size());
  b = good;
  b[dtype_at] = 9;
  expect_refused(b, "dtype");
  b = good;
  b[dtype_at + 1] = 200;
  expect_refused(b, "qk_norm");
  b = good;
  b[dtype_at + 1 + 1 + 4] = 5;
  expect_refused(b, "rope");
  b = good;
  b[dtype_at + 1 + 1 + 4 + 1 + 4] = 2;
  expect_refused(b, "fused_qkv");
}

TEST(DeckWire, EverySingleByteCorruptionIsHandled) {
  // Not a fuzzer (tests/fuzz is), but a cheap exhaustive sweep: every byte set to a few
  // values must decode or throw RuntimeError; nothing else (ASan builds check reads).
  const std::vector<unsigned char> good = uipc::serialize_deck(sample_deck());
  int decoded = 0, refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char v : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::vector<unsigned char> b = good;
      b[i] = v;
      try {
        uipc::deserialize_deck(b.data(), b.size());
        ++decoded;
      } catch (const uipc::RuntimeError&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(refused, 0);
}

// ---------------------------------------------------------------- read_deck_on_root

TEST(DeckWireMpi, EveryRankGetsRankZerosDeck) {
  SharedTempDir dir;
  const std::string path = dir.file("deck.h5");
  Deck d = sample_deck();
  std::string err;
  if (world_rank() == 0) {
    try {
      uipc::write_deck(d, path);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  ASSERT_EQ(bcast_string(err), "");
  // The other ranks are given a path that does not exist: they must never open the
  // file themselves, only receive what rank 0 read.
  const std::string mine = world_rank() == 0 ? path : dir.file("not-there-on-other-ranks.h5");
  Deck r = uipc::read_deck_on_root(mine, MPI_COMM_WORLD, 60.0);
  ASSERT_EQ(r.cases.size(), d.cases.size());
  EXPECT_EQ(r.description, d.description);
  for (size_t i = 0; i < d.cases.size(); ++i) expect_same_case(d.cases[i], r.cases[i]);
  // And identical bytes on every rank.
  std::vector<unsigned char> bytes = uipc::serialize_deck(r);
  std::string root(bytes.begin(), bytes.end());
  EXPECT_EQ(bcast_string(root), root);
}

TEST(DeckWireMpi, BadPathGivesTheSameErrorOnEveryRank) {
  SharedTempDir dir;
  for (const std::string& path : {std::string("/nonexistent/deck.h5"), dir.file("missing.h5")}) {
    const Outcome o = read_on_root(path);
    EXPECT_TRUE(o.threw) << path;
    EXPECT_EQ(o.code, uipc::kExitBadInput);
    EXPECT_NE(o.what.find("cannot open"), std::string::npos) << o.what;
    EXPECT_NE(o.what.find(path), std::string::npos) << o.what;
    EXPECT_EQ(bcast_string(o.what), o.what);  // rank 0's message, word for word
    int codes[2] = {o.code, -o.code}, agreed[2] = {0, 0};
    MPI_Allreduce(codes, agreed, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(agreed[0], -agreed[1]);  // every rank has the same exit code
  }
}

TEST(DeckWireMpi, InvalidDeckNamesTheFieldOnEveryRank) {
  SharedTempDir dir;
  const std::string path = dir.file("bad.h5");
  if (world_rank() == 0) {
    // A deck that read_deck refuses: written valid, then one field spoilt with HDF5.
    Deck d = sample_deck();
    uipc::write_deck(d, path);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "/cases/first", H5P_DEFAULT);
    hid_t a = H5Aopen(g, "heads", H5P_DEFAULT);
    int64_t bad = 3;  // fewer heads than ulysses = 4
    H5Awrite(a, H5T_NATIVE_INT64, &bad);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
  }
  const Outcome o = read_on_root(path);
  EXPECT_TRUE(o.threw);
  EXPECT_EQ(o.code, uipc::kExitBadInput);
  EXPECT_NE(o.what.find("case 'first': heads"), std::string::npos) << o.what;
  EXPECT_EQ(bcast_string(o.what), o.what);
}

TEST(DeckWireMpi, ErrorsQuotingDeckBytesStayOneCleanLine) {
  // A field name with a newline, a terminal escape sequence and a byte that is not
  // UTF-8: rank 0's message quotes it; what every rank gets must be printable.
  SharedTempDir dir;
  const std::string path = dir.file("evil.h5");
  const std::string evil = "batch\n\x1b[2J\xff";
  if (world_rank() == 0) {
    uipc::write_deck(sample_deck(), path);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "/cases/first", H5P_DEFAULT);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(g, evil.c_str(), H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    int64_t one = 1;
    H5Awrite(a, H5T_NATIVE_INT64, &one);
    H5Aclose(a);
    H5Sclose(s);
    H5Gclose(g);
    H5Fclose(f);
  }
  const Outcome o = read_on_root(path);
  ASSERT_TRUE(o.threw);
  EXPECT_EQ(o.code, uipc::kExitBadInput);
  EXPECT_NE(o.what.find("unknown field"), std::string::npos) << o.what;
  EXPECT_NE(o.what.find("batch\\x0a\\x1b[2J\\xff"), std::string::npos) << o.what;
  for (char ch : o.what) {
    const unsigned char u = static_cast<unsigned char>(ch);
    EXPECT_TRUE(u >= 0x20 && u < 0x7f) << "byte " << static_cast<int>(u) << " in: " << o.what;
  }
  EXPECT_EQ(bcast_string(o.what), o.what);
}

// ---------------------------------------------------------------- isolated parsing

TEST(DeckWire, IsolatedReaderTurnsALibhdf5CrashIntoAnInputError) {
  // A file that makes libhdf5 1.10.8 itself crash (tests/decks/make_bad_decks.py says
  // where it comes from). Read in this process, the test binary would die here.
  const std::string path = std::string(ULYSSES_SOURCE_DIR) + "/tests/decks/libhdf5_segv.h5";
  try {
    uipc::read_deck_isolated(path, 30.0);
    ADD_FAILURE() << "a crafted file was accepted";
  } catch (const uipc::InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(path, 0), 0u) << m;
    if (m.find("crashed") != std::string::npos) {
      EXPECT_NE(m.find("signal"), std::string::npos) << m;
    }
  }
}

TEST(DeckWire, IsolatedReaderBoundsALibhdf5InfiniteLoop) {
  const std::string path = std::string(ULYSSES_SOURCE_DIR) + "/tests/decks/libhdf5_infinite_loop.h5";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(uipc::read_deck_isolated(path, 3.0), uipc::InputError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(DeckWire, IsolatedReaderGivesUpOnAPathThatNeverAnswers) {
  // A FIFO without a writer blocks open() for ever, like a hung network file system.
  SharedTempDir dir;
  const std::string fifo = dir.file("fifo-" + std::to_string(world_rank()) + ".h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    uipc::read_deck_isolated(fifo, 2.0);
    ADD_FAILURE() << "a FIFO was read as a deck";
  } catch (const uipc::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did not finish within 2 s"), std::string::npos) << e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 1.9);
  EXPECT_LT(took, 20.0);
}

TEST(DeckWire, IsolatedReaderReturnsTheDeck) {
  SharedTempDir dir;
  const std::string path = dir.file("ok-" + std::to_string(world_rank()) + ".h5");
  const Deck d = sample_deck();
  uipc::write_deck(d, path);
  const Deck r = uipc::read_deck_isolated(path, 30.0);
  ASSERT_EQ(r.cases.size(), d.cases.size());
  for (size_t i = 0; i < d.cases.size(); ++i) expect_same_case(d.cases[i], r.cases[i]);
}

TEST(DeckWireMpi, HungReadOnRankZeroIsTheSameErrorEverywhere) {
  SharedTempDir dir;
  const std::string fifo = dir.file("fifo.h5");
  if (world_rank() == 0) {
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Outcome o = read_on_root(fifo, 6.0);  // parses for at most 3 s
  EXPECT_TRUE(o.threw);
  EXPECT_EQ(o.code, uipc::kExitBadInput);
  EXPECT_NE(o.what.find("did not finish within 3 s"), std::string::npos) << o.what;
  EXPECT_EQ(bcast_string(o.what), o.what);
}

// ---------------------------------------------------------------- memory estimate

TEST(DeckWire, MemoryEstimateBoundsTheKnownBuffers) {
  Case c;
  c.name = "m";
  c.batch = 2;
  c.seq_len = 4096;
  c.heads = 16;
  c.head_dim = 64;
  c.dtype = uipc::DType::kBF16;
  const int world = 4;
  const uint64_t C = 16 * 64, M = 2 * 4096 / 4, Ct = C, es = 2;
  // What certainly exists on every rank at once during a run (layer_data.cpp,
  // pipeline.cpp, the scatter targets): x, the fused and separate weights, w_o, the
  // qkv buffer, Q/K/V targets, attention out, out_f32, y.
  const uint64_t floor_rank = (M * C + 3 * C * Ct + 3 * C * Ct + Ct * C) * es + 3 * M * Ct * es + 3 * M * Ct * es +
                              M * Ct * es + M * C * 4 + M * C * es;
  const size_t other = uipc::estimate_case_bytes_per_rank(c, world, false);
  const size_t root = uipc::estimate_case_bytes_per_rank(c, world, true);
  EXPECT_GE(other, floor_rank);
  EXPECT_LT(other, 8 * floor_rank) << "an estimate this loose refuses runnable cases";
  // Rank 0 also holds the dense layer: at least x, q/k/v and the fp32 output of all tokens.
  const uint64_t BSC = 2 * 4096 * C;
  EXPECT_GE(root, other + BSC * es * 4 + BSC * 4);
  // Twice the tokens: more memory; without the host device's temporaries: less.
  Case longer = c;
  longer.seq_len *= 2;
  EXPECT_GT(uipc::estimate_case_bytes_per_rank(longer, world, false), other);
  EXPECT_LT(uipc::estimate_case_bytes_per_rank(c, world, false, /*sim_mode=*/false), other);
  // More ranks: each holds a smaller shard.
  EXPECT_LT(uipc::estimate_case_bytes_per_rank(c, 8, false), uipc::estimate_case_bytes_per_rank(c, 2, false));
}

TEST(DeckWire, MemoryEstimateOfAbsurdCasesIsHugeNotWrapped) {
  // At the deck's 2^36-element bound: far beyond any machine on every rank (a quarter
  // of the tokens, about 15 bytes each, on each of 4 ranks; rank 0 the whole layer).
  Case c;
  c.name = "huge";
  c.batch = 1024;
  c.seq_len = 65536;
  c.heads = 16;
  c.head_dim = 64;  // 2^10 * 2^16 * 2^10 = 2^36
  uipc::validate_case(c);
  EXPECT_GT(uipc::estimate_case_bytes_per_rank(c, 4, false), size_t{1} << 39);
  EXPECT_GT(uipc::estimate_case_bytes_per_rank(c, 4, true), size_t{1} << 41);
  // Unvalidated values saturate instead of overflowing into something small.
  Case w = c;
  w.batch = std::numeric_limits<int64_t>::max();
  w.seq_len = std::numeric_limits<int64_t>::max();
  w.heads = std::numeric_limits<int>::max();
  w.head_dim = std::numeric_limits<int>::max();
  EXPECT_EQ(uipc::estimate_case_bytes_per_rank(w, 1, true), std::numeric_limits<size_t>::max());
  // Nonsense layouts do not divide by zero.
  Case z = c;
  z.tp = 0;
  z.ulysses = -3;
  EXPECT_GT(uipc::estimate_case_bytes_per_rank(z, 0, true), 0u);
}
