// The Ulysses exchange protocol on the host device, at 2 and 4 ranks: bit-exact
// scatter/gather for every transport (nccl, ipc, and vmm: the ipc protocol on memory
// shared as descriptors), strided sources, tags, target cache, 64 skewed groups, release
// (write-after-read), fallback, failure after a group started, the watchdog, descriptor
// passing between ranks, and that the vmm path never names anything in /dev/shm. Each
// test checks a property that would break without the mechanism.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "tests/mpi_testing.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/transport/exchange_geometry.hpp"
#include "comm/fd_exchange.hpp"
#include "comm/device/host_device.hpp"
#include "comm/nodes.hpp"
#include "comm/transport/transport.hpp"
#include "kernels/kernels.hpp"

using namespace uipc;

namespace {

using uipc::testing::world_rank;
using uipc::testing::world_size;

using uipc::testing::shared_seed;

// Element (b, s_global, h, d) of a tensor with identity `tensor`: 16 random bits.
uint16_t element_bits(uint64_t seed, uint64_t tensor, int64_t b, int64_t s, int64_t h, int64_t d) {
  uint64_t idx = ((static_cast<uint64_t>(b) * 1000003u + s) * 4099u + h) * 521u + d;
  return static_cast<uint16_t>(splitmix64(seed ^ (tensor * 0x9e3779b97f4a7c15ull) ^ splitmix64(idx)) >> 48);
}

struct Fixture {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Stream> compute;
  std::unique_ptr<Collectives> coll;
  NodeLayout nodes;  // of the world: the host's one shared-memory node
  NodeLayout hier_nodes;  // the declared nodes of a hier transport made here
  std::unique_ptr<LayerKernels> kernels = make_host_kernels();  // V-major's row_change
  Fixture(double watchdog = 20.0) {
    dev = make_host_device(world_rank());
    dev->set_watchdog_seconds(watchdog);
    compute = dev->create_stream(StreamPriority::kNormal);
    coll = make_mpi_collectives(MPI_COMM_WORLD, *dev);
    nodes = discover_nodes(MPI_COMM_WORLD, 0, watchdog);
  }
  TransportSetup setup(const NodeLayout& layout, int chunks = 4) {
    TransportSetup st{*dev, MPI_COMM_WORLD, layout, *coll,
                      [this](MPI_Comm c) { return make_mpi_collectives(c, *dev); }, {}};
    st.hier_chunks = chunks;
    st.row_change = [this](Stream& s, const void* now, const void* last, DType t, int64_t rows, int64_t row_elems,
                           double* out) { kernels->row_change(s, now, last, t, rows, row_elems, out); };
    return st;
  }
  // "hier": 2 declared nodes (P/2 ranks each; one node at 1 rank, where hier is ipc);
  // "hier1": one rank per declared node.
  std::unique_ptr<Transport> make(const std::string& name, int capacity = 12, int chunks = 4) {
    TransportOptions opts;
    opts.cache_capacity = capacity;
    return make(name, opts, chunks);
  }
  std::unique_ptr<Transport> make(const std::string& name, const TransportOptions& opts, int chunks = 4) {
    if (name == "hier" || name == "hier1") {
      const int P = world_size();
      hier_nodes = discover_nodes(MPI_COMM_WORLD, name == "hier1" ? 1 : (P % 2 == 0 ? std::max(1, P / 2) : P), 20);
      TransportSetup st = setup(hier_nodes, chunks);
      st.options = opts;
      SelectedTransport sel = select_transport("hier", st);
      EXPECT_EQ(sel.used, P > 1 ? "hier" : "ipc") << sel.fallback_reason;
      return std::move(sel.transport);
    }
    if (name == "ipc") return make_ipc_transport(*dev, MPI_COMM_WORLD, opts);
    if (name == "vmm") return make_vmm_transport(*dev, MPI_COMM_WORLD, opts);
    if (name == "nccl-ce") return make_nccl_ce_transport(*dev, *coll);  // on MPI collectives here
    return make_nccl_transport(*dev, *coll);
  }
  void finish(Transport& t) {
    compute->synchronize();
    t.close_peer_mappings();
    MPI_Barrier(MPI_COMM_WORLD);
  }
};

// Fills rank `me`'s source view (B, Sl, H, D) of 2-byte elements with row pitch `pitch`
// (elements), leaving the other columns of each row at `filler`.
std::vector<uint16_t> make_source(uint64_t seed, uint64_t tensor, const ExchangeShape& s, int me, int64_t pitch,
                                  uint16_t filler) {
  std::vector<uint16_t> src(static_cast<size_t>(s.batch * s.seq_local * pitch), filler);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t sl = 0; sl < s.seq_local; ++sl)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d)
          src[static_cast<size_t>((b * s.seq_local + sl) * pitch + h * s.head_dim + d)] =
              element_bits(seed, tensor, b, me * s.seq_local + sl, h, d);
  return src;
}

// What rank `me` must hold after the scatter: (B, S, H/P, D), built independently.
std::vector<uint16_t> expected_scatter(uint64_t seed, uint64_t tensor, const ExchangeShape& s, int me, int peers) {
  const int64_t hl = s.heads / peers, S = s.seq_local * peers;
  std::vector<uint16_t> out(static_cast<size_t>(s.batch * S * hl * s.head_dim));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t sg = 0; sg < S; ++sg)
      for (int64_t h = 0; h < hl; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d)
          out[static_cast<size_t>(((b * S + sg) * hl + h) * s.head_dim + d)] =
              element_bits(seed, tensor, b, sg, me * hl + h, d);
  return out;
}

std::vector<uint16_t> read_back(Device& dev, const void* p, size_t elems) {
  std::vector<uint16_t> v(elems);
  dev.copy_to_host(v.data(), p, elems * 2);
  return v;
}

DeviceBuffer upload(Device& dev, const std::vector<uint16_t>& v) {
  DeviceBuffer b = dev.alloc(v.size() * 2);
  dev.copy_to_device(b.get(), v.data(), v.size() * 2);
  return b;
}

// One good group: it warms the target cache (no host collective in the next group).
void warm_one_group(Fixture& f, Transport& tr, const DeviceBuffer& b, const ExchangeShape& s) {
  auto e = tr.submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
  e->wait(*f.compute);
  f.compute->synchronize();
  tr.release(*f.compute);
  f.compute->synchronize();
  MPI_Barrier(MPI_COMM_WORLD);
}

class TransportTest : public ::testing::TestWithParam<std::string> {};

// Q, K, V as three tags of one group, V from a strided fused view, then the gather
// back: everything bit-exact against the constructed result, for each 2-byte dtype.
TEST_P(TransportTest, ScatterAndGatherAreBitExact) {
  const int P = world_size(), me = world_rank();
  for (DType t : {DType::kBF16, DType::kFP16}) {
    Fixture f;
    auto tr = f.make(GetParam());
    const uint64_t seed = shared_seed();
    ExchangeShape s{2, 3, 2 * P, 8, t};
    const int64_t row = s.heads * s.head_dim;
    // A fused QKV projection buffer: rows of [Q | K | V], pitch 3*H*D.
    std::vector<uint16_t> fused(static_cast<size_t>(s.batch * s.seq_local * 3 * row));
    for (int j = 0; j < 3; ++j) {
      auto part = make_source(seed, j, s, me, row, 0);
      for (int64_t r = 0; r < s.batch * s.seq_local; ++r)
        std::memcpy(&fused[static_cast<size_t>(r * 3 * row + j * row)], &part[static_cast<size_t>(r * row)], row * 2);
    }
    DeviceBuffer src = upload(*f.dev, fused);
    std::unique_ptr<Exchange> ex[3];
    const Tag tags[3] = {Tag::kV, Tag::kQ, Tag::kK};  // V first, K carries the barrier
    for (int i = 0; i < 3; ++i) {
      const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
      Submission sub{tags[i], Direction::kScatter, src.as<uint16_t>() + j * row, 3 * row, s, i == 2};
      ex[i] = tr->submit(sub, *f.compute);
    }
    for (auto& e : ex) e->wait(*f.compute);
    f.compute->synchronize();
    const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
    for (int i = 0; i < 3; ++i) {
      const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
      ASSERT_EQ(read_back(*f.dev, ex[i]->data(), n), expected_scatter(seed, j, s, me, P))
          << GetParam() << " " << dtype_name(t) << " tag " << tag_name(tags[i]);
    }
    tr->release(*f.compute);
    // Gather Q's result back: each rank must get exactly its original Q rows.
    Submission g{Tag::kO, Direction::kGather, ex[1]->data(), 0, s, true};
    auto back = tr->submit(g, *f.compute);
    back->wait(*f.compute);
    f.compute->synchronize();
    ASSERT_EQ(read_back(*f.dev, back->data(), n), make_source(seed, 0, s, me, row, 0)) << GetParam();
    tr->release(*f.compute);
    f.finish(*tr);
  }
}

// A producer that writes its own slice straight into the target (own_slice()): the
// transport moves only the peers' slices. The source's own heads are poisoned, so a
// transport that copied them anyway is caught; every epoch carries fresh values, so a
// stale own slice is caught too.
TEST_P(TransportTest, OwnSliceWrittenByItsProducerIsNeverCopied) {
  const int P = world_size(), me = world_rank();
  Fixture f;
  auto tr = f.make(GetParam());
  const uint64_t seed = shared_seed();
  ExchangeShape s{2, 3, 2 * P, 8, DType::kBF16};
  const int64_t row = s.heads * s.head_dim, hl = s.heads / P;
  const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
  for (int epoch = 0; epoch < 6; ++epoch) {
    const Tag tags[3] = {Tag::kV, Tag::kQ, Tag::kK};
    std::vector<DeviceBuffer> keep;  // sources and staged own slices live until the group is done
    std::unique_ptr<Exchange> ex[3];
    for (int i = 0; i < 3; ++i) {
      const uint64_t tensor = static_cast<uint64_t>(10 * epoch + i);
      const OwnSlice own = tr->own_slice(tags[i], s);
      if (GetParam() == "nccl-ce") {  // its all-to-all carries the own chunk too: it moves it itself
        ASSERT_EQ(own.data, nullptr);
        return;
      }
      ASSERT_NE(own.data, nullptr) << GetParam();
      ASSERT_EQ(own.head_begin, me * hl);
      ASSERT_EQ(own.head_count, hl);
      std::vector<uint16_t> src = make_source(seed, tensor, s, me, row, 0);
      std::vector<uint16_t> mine(static_cast<size_t>(s.batch * s.seq_local * hl * s.head_dim));
      for (int64_t r = 0; r < s.batch * s.seq_local; ++r)
        for (int64_t e = 0; e < hl * s.head_dim; ++e) {
          const size_t at = static_cast<size_t>(r * row + me * hl * s.head_dim + e);
          mine[static_cast<size_t>(r * hl * s.head_dim + e)] = src[at];
          src[at] = 0xFFFF;  // poison: the transport must not read the own heads
        }
      keep.push_back(upload(*f.dev, src));
      keep.push_back(upload(*f.dev, mine));
      // The producer's write, on the producer stream: batch by batch into the target.
      const size_t w = static_cast<size_t>(hl * s.head_dim) * 2;
      for (int64_t b = 0; b < s.batch; ++b)
        f.dev->copy_2d(*f.compute, static_cast<unsigned char*>(own.data) + b * own.batch_pitch * 2, own.row_pitch * 2,
                       keep.back().as<unsigned char>() + b * s.seq_local * w, w, w, static_cast<size_t>(s.seq_local));
      Submission sub{tags[i], Direction::kScatter, keep[keep.size() - 2].get(), row, s, i == 2};
      sub.own_slice_written = true;
      ex[i] = tr->submit(sub, *f.compute);
    }
    for (auto& e : ex) e->wait(*f.compute);
    f.compute->synchronize();
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(read_back(*f.dev, ex[i]->data(), n), expected_scatter(seed, static_cast<uint64_t>(10 * epoch + i), s, me, P))
          << GetParam() << " epoch " << epoch << " tag " << tag_name(tags[i]);
    tr->release(*f.compute);
  }
  f.finish(*tr);
}

// One handshake per tensor (the no-grouped-handshake ablation): three groups pass between
// two releases. A group must wait only for what the peers had released, never for the
// release of a group whose results are still to be consumed (that would deadlock, and
// the watchdog would end the test); every layer stays exact under skewed producers.
TEST_P(TransportTest, OneGroupPerTensorKeepsTheReleaseOrder) {
  const int P = world_size(), me = world_rank();
  Fixture f(5.0);
  auto tr = f.make(GetParam());
  ExchangeShape s{1, 4, P, 8, DType::kBF16};
  std::mt19937 skew(static_cast<unsigned>(shared_seed() + me));
  for (int layer = 0; layer < 12; ++layer) {
    const uint64_t seed = shared_seed();
    std::vector<DeviceBuffer> src;
    std::unique_ptr<Exchange> ex[3];
    for (int j = 0; j < 3; ++j) {
      src.push_back(upload(*f.dev, make_source(seed, static_cast<uint64_t>(j), s, me, s.heads * s.head_dim, 0)));
      const int delay_us = static_cast<int>(skew() % 2000);
      host_stream(*f.compute).enqueue([delay_us] { std::this_thread::sleep_for(std::chrono::microseconds(delay_us)); });
      ex[j] = tr->submit(Submission{static_cast<Tag>(j), Direction::kScatter, src.back().get(), 0, s, true}, *f.compute);
    }
    for (auto& e : ex) e->wait(*f.compute);
    f.compute->synchronize();
    const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
    for (int j = 0; j < 3; ++j)
      ASSERT_EQ(read_back(*f.dev, ex[j]->data(), n), expected_scatter(seed, static_cast<uint64_t>(j), s, me, P))
          << GetParam() << " layer " << layer << " tensor " << j;
    tr->release(*f.compute);
  }
  EXPECT_EQ(tr->stats().handshakes, 36);
  f.finish(*tr);
}

// Uneven shards and head slices (docs/math.md: balanced, the first S%P ranks one token
// more, the first H%P one head more): S = 3P + 1 tokens and H = 2P + 1 heads, batch 2, Q
// K V from the strided fused view, then the gather back; bit-exact against results built
// here from the split rule itself.
TEST_P(TransportTest, UnevenShardsAndHeadsAreBitExact) {
  const int P = world_size(), me = world_rank();
  auto begin = [](int64_t n, int p, int i) { return i * (n / p) + std::min<int64_t>(i, n % p); };
  auto count = [&](int64_t n, int p, int i) { return begin(n, p, i + 1) - begin(n, p, i); };
  for (DType t : {DType::kBF16, DType::kFP16}) {
    Fixture f;
    auto tr = f.make(GetParam());
    const uint64_t seed = shared_seed();
    const int64_t S = 3 * P + 1, H = 2 * P + 1, D = 4, B = 2;
    const int64_t sl = count(S, P, me), s0 = begin(S, P, me), hl = count(H, P, me), h0 = begin(H, P, me);
    ExchangeShape s{B, sl, static_cast<int>(H), static_cast<int>(D), t, S};
    const int64_t row = H * D;
    std::vector<uint16_t> fused(static_cast<size_t>(B * sl * 3 * row), 0xdead);
    for (int j = 0; j < 3; ++j)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t x = 0; x < sl; ++x)
          for (int64_t e = 0; e < row; ++e)
            fused[static_cast<size_t>((b * sl + x) * 3 * row + j * row + e)] =
                element_bits(seed, 20 + j, b, s0 + x, e / D, e % D);
    DeviceBuffer src = upload(*f.dev, fused);
    const Tag tags[3] = {Tag::kV, Tag::kQ, Tag::kK};
    std::unique_ptr<Exchange> ex[3];
    for (int i = 0; i < 3; ++i) {
      const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
      ex[i] = tr->submit(Submission{tags[i], Direction::kScatter, src.as<uint16_t>() + j * row, 3 * row, s, i == 2},
                         *f.compute);
    }
    for (auto& e : ex) e->wait(*f.compute);
    f.compute->synchronize();
    for (int i = 0; i < 3; ++i) {
      const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
      std::vector<uint16_t> want(static_cast<size_t>(B * S * hl * D));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t sg = 0; sg < S; ++sg)
          for (int64_t h = 0; h < hl; ++h)
            for (int64_t d = 0; d < D; ++d)
              want[static_cast<size_t>(((b * S + sg) * hl + h) * D + d)] = element_bits(seed, 20 + j, b, sg, h0 + h, d);
      ASSERT_EQ(read_back(*f.dev, ex[i]->data(), want.size()), want)
          << GetParam() << " " << dtype_name(t) << " tag " << tag_name(tags[i]) << " (rank " << me << ": " << sl
          << " tokens, " << hl << " heads)";
    }
    tr->release(*f.compute);
    auto back = tr->submit(Submission{Tag::kO, Direction::kGather, ex[2]->data(), 0, s, true}, *f.compute);
    back->wait(*f.compute);
    f.compute->synchronize();
    std::vector<uint16_t> mine(static_cast<size_t>(B * sl * row));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t x = 0; x < sl; ++x)
        for (int64_t e = 0; e < row; ++e)
          mine[static_cast<size_t>((b * sl + x) * row + e)] = element_bits(seed, 21, b, s0 + x, e / D, e % D);  // K: ex[2]
    ASSERT_EQ(read_back(*f.dev, back->data(), mine.size()), mine) << GetParam() << " gather";
    tr->release(*f.compute);
    f.finish(*tr);
  }
}

// fp32 (4-byte elements) through the same path.
TEST_P(TransportTest, Fp32ScatterIsBitExact) {
  const int P = world_size(), me = world_rank();
  Fixture f;
  auto tr = f.make(GetParam());
  const uint64_t seed = shared_seed();
  ExchangeShape s{1, 5, P, 4, DType::kFP32};
  const int64_t row = s.heads * s.head_dim;
  std::vector<uint32_t> src(static_cast<size_t>(s.seq_local * row));
  for (int64_t sl = 0; sl < s.seq_local; ++sl)
    for (int64_t e = 0; e < row; ++e)
      src[static_cast<size_t>(sl * row + e)] = static_cast<uint32_t>(splitmix64(seed + (me * s.seq_local + sl) * row + e));
  DeviceBuffer d = f.dev->alloc(src.size() * 4);
  f.dev->copy_to_device(d.get(), src.data(), src.size() * 4);
  auto ex = tr->submit(Submission{Tag::kQ, Direction::kScatter, d.get(), 0, s, true}, *f.compute);
  ex->wait(*f.compute);
  f.compute->synchronize();
  const int64_t S = s.seq_local * P, hl = 1;
  std::vector<uint32_t> got(static_cast<size_t>(S * hl * s.head_dim)), want(got.size());
  f.dev->copy_to_host(got.data(), ex->data(), got.size() * 4);
  for (int64_t sg = 0; sg < S; ++sg)
    for (int64_t dd = 0; dd < s.head_dim; ++dd)
      want[static_cast<size_t>(sg * s.head_dim + dd)] =
          static_cast<uint32_t>(splitmix64(seed + sg * row + me * s.head_dim + dd));
  ASSERT_EQ(got, want);
  tr->release(*f.compute);
  f.finish(*tr);
}

// 64 groups, producers skewed by rank-dependent delays, fresh data every group; the
// cached targets are reused (same pointers, hits counted) and every group is exact.
TEST_P(TransportTest, SixtyFourSkewedGroupsReuseCachedTargets) {
  const int P = world_size(), me = world_rank();
  Fixture f;
  auto tr = f.make(GetParam());
  ExchangeShape s{1, 4, P, 8, DType::kBF16};
  std::mt19937 skew(static_cast<unsigned>(shared_seed() + me));
  void* first_q = nullptr;
  for (int it = 0; it < 64; ++it) {
    const uint64_t seed = shared_seed();
    auto q = make_source(seed, 0, s, me, s.heads * s.head_dim, 0);
    auto k = make_source(seed, 1, s, me, s.heads * s.head_dim, 0);
    DeviceBuffer qb = upload(*f.dev, q), kb = upload(*f.dev, k);
    const int delay_us = static_cast<int>(skew() % 3000);
    host_stream(*f.compute).enqueue([delay_us] { std::this_thread::sleep_for(std::chrono::microseconds(delay_us)); });
    auto eq = tr->submit(Submission{Tag::kQ, Direction::kScatter, qb.get(), 0, s, false}, *f.compute);
    auto ek = tr->submit(Submission{Tag::kK, Direction::kScatter, kb.get(), 0, s, true}, *f.compute);
    eq->wait(*f.compute);
    ek->wait(*f.compute);
    f.compute->synchronize();
    const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
    ASSERT_EQ(read_back(*f.dev, eq->data(), n), expected_scatter(seed, 0, s, me, P)) << "group " << it;
    ASSERT_EQ(read_back(*f.dev, ek->data(), n), expected_scatter(seed, 1, s, me, P)) << "group " << it;
    if (it == 0) first_q = eq->data();
    if (GetParam() != "nccl") {
      ASSERT_EQ(eq->data(), first_q) << "the cached target must be reused";
    }
    tr->release(*f.compute);
  }
  TransportStats st = tr->stats();
  EXPECT_EQ(st.groups, 64);
  EXPECT_EQ(st.handshakes, 64);  // one per group, not per tensor
  EXPECT_EQ(st.cache_misses, 2);
  EXPECT_EQ(st.cache_hits, 2 * 63);
  f.finish(*tr);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::Values("nccl", "nccl-ce", "ipc", "vmm", "hier", "hier1"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == '-' ? '_' : ch;  // test names take no '-'
                           return n;
                         });

// The IPC protocol's own mechanisms, on both mapping paths (ipc: handles over MPI; vmm:
// descriptors over Unix sockets), which share every line of the protocol.
class IpcProtocolTest : public ::testing::TestWithParam<std::string> {};

// A bounded cache: three shapes cycling through two entries evict on every miss, and
// the data stays exact.
TEST_P(IpcProtocolTest, BoundedCacheEvictsAndStaysExact) {
  const int P = world_size(), me = world_rank();
  Fixture f;
  auto tr = f.make(GetParam(), /*capacity=*/2);
  for (int it = 0; it < 9; ++it) {
    ExchangeShape s{1, 2 + it % 3, P, 4, DType::kBF16};
    const uint64_t seed = shared_seed();
    DeviceBuffer b = upload(*f.dev, make_source(seed, 7, s, me, s.heads * s.head_dim, 0));
    auto e = tr->submit(Submission{Tag::kV, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e->wait(*f.compute);
    f.compute->synchronize();
    ASSERT_EQ(read_back(*f.dev, e->data(), static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()))),
              expected_scatter(seed, 7, s, me, P));
    tr->release(*f.compute);
  }
  TransportStats st = tr->stats();
  EXPECT_EQ(st.cache_misses, 9);
  EXPECT_EQ(st.cache_evictions, 7);
  f.finish(*tr);
}

// Write after read: a slow consumer reads its targets long after the group completed
// while the peers race ahead to the next group. Without the release epochs the peers
// would overwrite the targets under the reader.
TEST_P(IpcProtocolTest, SlowConsumerNeverSeesItsTargetOverwritten) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  Fixture f;
  auto tr = f.make(GetParam());
  ExchangeShape s{1, 4, P, 8, DType::kBF16};
  for (int it = 0; it < 4; ++it) {
    const uint64_t seed = shared_seed();
    DeviceBuffer b = upload(*f.dev, make_source(seed, 3, s, me, s.heads * s.head_dim, 0));
    auto e = tr->submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e->wait(*f.compute);
    const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
    auto seen = std::make_shared<std::vector<uint16_t>>(n);
    const void* target = e->data();
    const bool slow = me == 0;
    // The consumer: (rank 0 slowly) reads the target on the compute stream.
    host_stream(*f.compute).enqueue([seen, target, n, slow] {
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      std::memcpy(seen->data(), target, n * 2);
    });
    tr->release(*f.compute);  // only now may peers write into the target again
    // The next group is submitted at once by every rank (the host does not wait).
    f.compute->synchronize();
    ASSERT_EQ(*seen, expected_scatter(seed, 3, s, me, P)) << "group " << it;
  }
  f.finish(*tr);
}

INSTANTIATE_TEST_SUITE_P(MappingPaths, IpcProtocolTest, ::testing::Values("ipc", "vmm", "hier"),
                         [](const auto& info) { return info.param; });

// Fallback happens before any group starts and says why.
TEST(TransportSelection, FallsBackToNcclWhenIpcIsIneligible) {
  Fixture f;
  setenv("ULYSSES_IPC_FORCE_INELIGIBLE", "test", 1);
  SelectedTransport sel = select_transport("ipc", f.setup(f.nodes));
  unsetenv("ULYSSES_IPC_FORCE_INELIGIBLE");
  EXPECT_EQ(sel.used, "nccl");
  EXPECT_NE(sel.fallback_reason.find("test"), std::string::npos) << sel.fallback_reason;
  SelectedTransport ok = select_transport("ipc", f.setup(f.nodes));
  EXPECT_EQ(ok.used, "ipc");
  EXPECT_TRUE(ok.fallback_reason.empty());
  EXPECT_THROW(select_transport("carrier-pigeon", f.setup(f.nodes)), InputError);
  ok.transport->close_peer_mappings();
  MPI_Barrier(MPI_COMM_WORLD);
}

// The node layout: the host's shared-memory node, declared blocks of consecutive ranks,
// and the layout of a sub-group (renumbered nodes, local indices among its own ranks).
TEST(Nodes, SharedMemoryAndDeclaredBlocks) {
  const int P = world_size(), me = world_rank();
  NodeLayout real = discover_nodes(MPI_COMM_WORLD, 0, 20);
  ASSERT_EQ(real.size(), P);
  EXPECT_TRUE(real.one_node()) << real.describe();  // every rank of a test runs on this host
  EXPECT_EQ(real.local_index[static_cast<size_t>(me)], me);
  EXPECT_EQ(real.declared_ranks_per_node, 0);
  NodeLayout ones = discover_nodes(MPI_COMM_WORLD, 1, 20);
  EXPECT_EQ(ones.nodes(), P);
  EXPECT_TRUE(ones.equal_blocks());
  EXPECT_NE(ones.describe().find("--ranks-per-node 1"), std::string::npos) << ones.describe();
  if (P == 4) {
    NodeLayout two = discover_nodes(MPI_COMM_WORLD, 2, 20);
    EXPECT_EQ(two.node_of, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(two.local_index, (std::vector<int>{0, 1, 0, 1}));
    EXPECT_EQ(two.describe(), "2 nodes x 2 ranks (declared: --ranks-per-node 2)");
    // The even ranks {0, 2}: one rank on each declared node.
    MpiComm even = split_comm(MPI_COMM_WORLD, me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}, me);
    NodeLayout sub = two.of(even.get(), MPI_COMM_WORLD);
    EXPECT_EQ(sub.node_of, (std::vector<int>{0, 1}));
    EXPECT_EQ(sub.local_index, (std::vector<int>{0, 0}));
    EXPECT_TRUE(sub.equal_blocks());
    // {0, 1} of the world restricted: one node.
    MpiComm low = split_comm(MPI_COMM_WORLD, me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, me);
    EXPECT_TRUE(two.of(low.get(), MPI_COMM_WORLD).one_node());
    // Declared nodes must divide the world (the same error on every rank).
    try {
      discover_nodes(MPI_COMM_WORLD, 3, 20);
      ADD_FAILURE() << "3 ranks per node of 4 ranks must be refused";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("not a multiple"), std::string::npos) << e.what();
    }
  }
  NodeLayout unequal;
  unequal.node_of = {0, 0, 1};
  unequal.local_index = {0, 1, 0};
  EXPECT_EQ(unequal.ranks_per_node(), 0);
  EXPECT_FALSE(unequal.equal_blocks());
  NodeLayout interleaved;  // round-robin placement: equal counts, not blocks
  interleaved.node_of = {0, 1, 0, 1};
  interleaved.local_index = {0, 0, 1, 1};
  EXPECT_EQ(interleaved.ranks_per_node(), 2);
  EXPECT_FALSE(interleaved.equal_blocks());
  MPI_Barrier(MPI_COMM_WORLD);
}

// A group that spans declared nodes is not eligible for IPC: the run falls back to nccl
// before any group starts, saying so, and the fallback is exact.
TEST(TransportSelection, IpcIsIneligibleAcrossDeclaredNodes) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  Fixture f;
  NodeLayout apart = discover_nodes(MPI_COMM_WORLD, 1, 20);
  for (const char* name : {"ipc", "vmm"}) {
    SelectedTransport sel = select_transport(name, f.setup(apart));
    EXPECT_EQ(sel.used, "nccl") << name;
    EXPECT_NE(sel.fallback_reason.find("spans " + std::to_string(P) + " nodes (declared: --ranks-per-node 1)"),
              std::string::npos)
        << sel.fallback_reason;
    const uint64_t seed = shared_seed();
    ExchangeShape s{1, 3, P, 4, DType::kBF16};
    DeviceBuffer b = upload(*f.dev, make_source(seed, 1, s, me, s.heads * s.head_dim, 0));
    auto e = sel.transport->submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e->wait(*f.compute);
    f.compute->synchronize();
    ASSERT_EQ(read_back(*f.dev, e->data(), static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()))),
              expected_scatter(seed, 1, s, me, P));
    f.finish(*sel.transport);
  }
}

// One rank alone ineligible (its own GPU lacks something): the check is collective on
// every rank whatever each rank finds, so all of them fall back together, naming it.
TEST(TransportSelection, OneIneligibleRankMakesEveryRankFallBack) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  Fixture f(5.0);
  if (me == P - 1) setenv("ULYSSES_IPC_FORCE_INELIGIBLE", "only here", 1);
  SelectedTransport sel = select_transport("ipc", f.setup(f.nodes));
  unsetenv("ULYSSES_IPC_FORCE_INELIGIBLE");
  EXPECT_EQ(sel.used, "nccl");
  EXPECT_NE(sel.fallback_reason.find("rank " + std::to_string(P - 1) + " of the group: forced by"), std::string::npos)
      << sel.fallback_reason;
  MPI_Barrier(MPI_COMM_WORLD);
}

// Once a group has started, a failure is raised (never a silent switch of protocol):
// ranks that submit different shapes inside a group get a clear error.
TEST_P(IpcProtocolTest, FailureAfterGroupStartIsRaised) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  Fixture f(5.0);
  DeviceBuffer b = f.dev->alloc(1 << 16);  // declared first: freed after the transport drains its copies
  auto tr = f.make(GetParam());
  ExchangeShape s{1, 2, P, 4, DType::kBF16};
  tr->submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, false}, *f.compute);
  ExchangeShape odd = s;
  odd.seq_local = me == 0 ? 2 : 3;  // rank 0 disagrees with the others
  try {
    tr->submit(Submission{Tag::kK, Direction::kScatter, b.get(), 0, odd, true}, *f.compute);
    FAIL() << "a diverging submission inside a group must raise";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A peer that never arrives: the GPU-side wait is bounded, the error names the peer.
TEST_P(IpcProtocolTest, WatchdogNamesAPeerThatNeverArrives) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  if (GetParam() == "hier") GTEST_SKIP() << "hier's own test: HierTransport.AnAbsentPeerOnEitherSideOfTheLinkIsNamed";
  Fixture f(1.0);
  DeviceBuffer b = f.dev->alloc(1 << 16);  // declared first: freed after the transport drains its copies
  auto tr = f.make(GetParam());
  ExchangeShape s{1, 2, P, 4, DType::kBF16};
  warm_one_group(f, *tr, b, s);
  if (me == P - 1) {
    // The last rank stays away for longer than the watchdog.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  } else {
    auto t0 = std::chrono::steady_clock::now();
    auto e2 = tr->submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e2->wait(*f.compute);
    try {
      f.compute->synchronize();
      FAIL() << "the wait for an absent peer must fail";
    } catch (const PeerTimeout& err) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(took, 2.4);
      EXPECT_NE(std::string(err.what()).find("peer " + std::to_string(P - 1)), std::string::npos) << err.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// vmm falls back to nccl like ipc, before any group starts: on its own check (here the
// hook standing in for Device::vmm_ineligible_reason) and on every IPC check it shares.
TEST(TransportSelection, VmmFallsBackToNcclWhenIneligible) {
  Fixture f;
  setenv("ULYSSES_VMM_FORCE_INELIGIBLE", "no vmm here", 1);
  SelectedTransport vmm_off = select_transport("vmm", f.setup(f.nodes));
  SelectedTransport ipc_on = select_transport("ipc", f.setup(f.nodes));
  unsetenv("ULYSSES_VMM_FORCE_INELIGIBLE");
  EXPECT_EQ(vmm_off.used, "nccl");
  EXPECT_EQ(vmm_off.transport->name(), "nccl");
  EXPECT_NE(vmm_off.fallback_reason.find("vmm not eligible"), std::string::npos) << vmm_off.fallback_reason;
  EXPECT_NE(vmm_off.fallback_reason.find("no vmm here"), std::string::npos) << vmm_off.fallback_reason;
  EXPECT_EQ(ipc_on.used, "ipc") << "the vmm check must not take ipc down";

  setenv("ULYSSES_IPC_FORCE_INELIGIBLE", "shared check", 1);
  SelectedTransport ipc_checks = select_transport("vmm", f.setup(f.nodes));
  unsetenv("ULYSSES_IPC_FORCE_INELIGIBLE");
  EXPECT_EQ(ipc_checks.used, "nccl");
  EXPECT_NE(ipc_checks.fallback_reason.find("shared check"), std::string::npos) << ipc_checks.fallback_reason;

  EXPECT_EQ(vmm_ineligible_reason(*f.dev, MPI_COMM_WORLD, f.nodes), "");
  SelectedTransport ok = select_transport("vmm", f.setup(f.nodes));
  EXPECT_EQ(ok.used, "vmm");
  EXPECT_EQ(ok.transport->name(), "vmm");
  EXPECT_TRUE(ok.fallback_reason.empty()) << ok.fallback_reason;
  try {
    select_transport("carrier-pigeon", f.setup(f.nodes));
    FAIL() << "an unknown transport must be an input error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nccl, nccl-ce, ipc, vmm, hier"), std::string::npos) << e.what();
  }
  ok.transport->close_peer_mappings();
  ipc_on.transport->close_peer_mappings();
  MPI_Barrier(MPI_COMM_WORLD);
}

// What this process creates in /dev/shm while the watch lives (inotify: a name created
// and removed again between two looks at the directory is still seen).
class ShmCreationWatch {
 public:
  ShmCreationWatch() : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_) ok_ = inotify_add_watch(fd_.get(), "/dev/shm", IN_CREATE | IN_MOVED_TO) >= 0;
  }
  bool ok() const { return ok_; }
  std::vector<std::string> own_creations() {
    const std::string prefix = host_shm_process_prefix(getpid()).substr(1);  // without the '/'
    std::vector<std::string> names;
    alignas(inotify_event) char buf[16384];
    for (;;) {
      const ssize_t n = read(fd_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
        const std::string name = ev->len ? ev->name : "";
        if (name.rfind(prefix, 0) == 0) names.push_back(name);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
    }
    return names;
  }

 private:
  UniqueFd fd_;
  bool ok_ = false;
};

// The vmm path on the host device names nothing in /dev/shm, ever: not its signal words,
// not its targets, not across misses and evictions. The ipc path, which does create
// (and seal) names there, is the control that shows the watch sees them.
TEST(VmmTransport, HostDeviceNeverCreatesADevShmEntry) {
  const int P = world_size(), me = world_rank();
  for (const std::string path : {"vmm", "ipc"}) {
    ShmCreationWatch watch;
    ASSERT_TRUE(watch.ok()) << "inotify on /dev/shm: " << std::strerror(errno);
    {
      Fixture f;
      auto tr = f.make(path, /*capacity=*/2);
      for (int it = 0; it < 4; ++it) {
        ExchangeShape s{1, 2 + it % 3, P, 4, DType::kBF16};
        const uint64_t seed = shared_seed();
        DeviceBuffer b = upload(*f.dev, make_source(seed, 5, s, me, s.heads * s.head_dim, 0));
        auto e = tr->submit(Submission{Tag::kV, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
        e->wait(*f.compute);
        f.compute->synchronize();
        ASSERT_EQ(read_back(*f.dev, e->data(), static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()))),
                  expected_scatter(seed, 5, s, me, P))
            << path;
        tr->release(*f.compute);
      }
      EXPECT_EQ(tr->stats().cache_evictions, 2) << path;
      f.finish(*tr);
    }
    const std::vector<std::string> created = watch.own_creations();
    if (path == "vmm") {
      EXPECT_TRUE(created.empty()) << "the vmm path created /dev/shm/" << created.front();
    } else {
      EXPECT_FALSE(created.empty()) << "control: the ipc path's /dev/shm names were not seen by the watch";
    }
  }
}

// Whether /proc/net/unix lists a socket bound to exactly `path` ("@name": abstract).
bool unix_socket_listed(const std::string& path) {
  std::ifstream in("/proc/net/unix");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() >= path.size() + 1 && line.compare(line.size() - path.size() - 1, std::string::npos, " " + path) == 0)
      return true;
  }
  return false;
}

// A memfd holding two words, as a descriptor to pass around.
UniqueFd memfd_with(uint64_t a, uint64_t b) {
  UniqueFd fd(memfd_create("uipc-test", MFD_CLOEXEC));
  const uint64_t words[2] = {a, b};
  if (!fd || pwrite(fd.get(), words, sizeof(words), 0) != static_cast<ssize_t>(sizeof(words))) return UniqueFd();
  return fd;
}

// Descriptors really travel between every pair of ranks (each receiver reads what the
// sender wrote behind its descriptor), two live exchanges on one communicator never mix
// (distinct nonces, so distinct sockets), and the sockets are abstract (listed as '@...',
// never files) and gone with their owners.
// --- the hierarchical transport's own properties

// Collectives that record every point-to-point call they pass on (the rail's traffic).
class RecordingCollectives : public Collectives {
 public:
  RecordingCollectives(std::unique_ptr<Collectives> inner, std::vector<std::vector<PeerTransfer>>* log)
      : inner_(std::move(inner)), log_(log) {}
  std::string name() const override { return inner_->name(); }
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes) override {
    inner_->all_to_all(s, send, recv, bytes);
  }
  void send_recv(Stream& s, const std::vector<PeerTransfer>& t) override {
    log_->push_back(t);
    inner_->send_recv(s, t);
  }
  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override { inner_->all_reduce_sum_f32(s, buf, n); }
  std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) override { return inner_->alloc_registered(bytes); }
  std::string copy_engine_note() const override { return inner_->copy_engine_note(); }
  std::string graph_ineligible_reason() const override { return inner_->graph_ineligible_reason(); }

 private:
  std::unique_ptr<Collectives> inner_;
  std::vector<std::vector<PeerTransfer>>* log_;
};

struct HierLayout {
  int ranks_per_node;
  int chunks;
};

// Q, K and V (V from the strided view of a fused projection) over 2 nodes and over one
// rank per node, for chunk counts that divide the node block, do not, and exceed it;
// then the gather back. Every element exact, for every chunking.
TEST(HierTransport, ChunkedScatterAndGatherAreBitExact) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more (2 nodes)";
  std::vector<int> layouts = {P / 2};
  if (P / 2 != 1) layouts.push_back(1);
  for (int per : layouts) {
    for (int chunks : {1, 2, 3, 7, 1000}) {
      Fixture f;
      NodeLayout nodes = discover_nodes(MPI_COMM_WORLD, per, 20);
      SelectedTransport sel = select_transport("hier", f.setup(nodes, chunks));
      ASSERT_EQ(sel.used, "hier") << sel.fallback_reason;
      const uint64_t seed = shared_seed();
      ExchangeShape s{2, 5, 2 * P, 4, DType::kBF16};
      const int64_t row = s.heads * s.head_dim;
      std::vector<uint16_t> fused(static_cast<size_t>(s.batch * s.seq_local * 3 * row), 0xbeef);
      for (int j = 0; j < 3; ++j) {
        auto part = make_source(seed, 10 + j, s, me, row, 0);
        for (int64_t r = 0; r < s.batch * s.seq_local; ++r)
          std::memcpy(&fused[static_cast<size_t>(r * 3 * row + j * row)], &part[static_cast<size_t>(r * row)], row * 2);
      }
      DeviceBuffer src = upload(*f.dev, fused);
      const Tag tags[3] = {Tag::kV, Tag::kQ, Tag::kK};
      std::unique_ptr<Exchange> ex[3];
      for (int i = 0; i < 3; ++i) {
        const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
        ex[i] = sel.transport->submit(
            Submission{tags[i], Direction::kScatter, src.as<uint16_t>() + j * row, 3 * row, s, i == 2}, *f.compute);
      }
      for (auto& e : ex) e->wait(*f.compute);
      f.compute->synchronize();
      const size_t n = static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()));
      for (int i = 0; i < 3; ++i) {
        const int j = tags[i] == Tag::kQ ? 0 : tags[i] == Tag::kK ? 1 : 2;
        ASSERT_EQ(read_back(*f.dev, ex[i]->data(), n), expected_scatter(seed, 10 + j, s, me, P))
            << per << " ranks per node, " << chunks << " chunks, tag " << tag_name(tags[i]);
      }
      sel.transport->release(*f.compute);
      auto back = sel.transport->submit(Submission{Tag::kO, Direction::kGather, ex[0]->data(), 0, s, true}, *f.compute);
      back->wait(*f.compute);
      f.compute->synchronize();
      ASSERT_EQ(read_back(*f.dev, back->data(), n), make_source(seed, 12, s, me, row, 0))
          << per << " ranks per node, " << chunks << " chunks, gather";
      sel.transport->release(*f.compute);
      EXPECT_EQ(sel.transport->stats().handshakes, 2);  // one per group: the scatter's and the gather's
      f.finish(*sel.transport);
    }
  }
}

// Rail alignment: every inter-node message goes to the rank of the same local index on
// another node, one per remote node per chunk (never one per remote rank), and carries
// exactly what this rank's node sends to that rank: L shards of its head slice.
TEST(HierTransport, InterNodeMessagesAreOnePerRemoteNodeOnTheRail) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more (2 nodes)";
  for (int per : {std::max(1, P / 2), 1}) {
    Fixture f;
    NodeLayout nodes = discover_nodes(MPI_COMM_WORLD, per, 20);
    const int N = nodes.nodes(), L = per, n = me / L;
    std::vector<std::vector<PeerTransfer>> log;
    TransportSetup st = f.setup(nodes, 3);
    st.make_collectives = [&](MPI_Comm c) {
      return std::make_unique<RecordingCollectives>(make_mpi_collectives(c, *f.dev), &log);
    };
    SelectedTransport sel = select_transport("hier", st);
    ASSERT_EQ(sel.used, "hier");
    ExchangeShape s{2, 4, P, 8, DType::kBF16};
    const uint64_t seed = shared_seed();
    DeviceBuffer b = upload(*f.dev, make_source(seed, 5, s, me, s.heads * s.head_dim, 0));
    auto e = sel.transport->submit(Submission{Tag::kV, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e->wait(*f.compute);
    f.compute->synchronize();
    ASSERT_EQ(read_back(*f.dev, e->data(), static_cast<size_t>(exchange_result_elems(s, Direction::kScatter, world_rank(), world_size()))),
              expected_scatter(seed, 5, s, me, P));
    const int K = std::min<int>(3, L * static_cast<int>(s.seq_local));
    ASSERT_EQ(static_cast<int>(log.size()), static_cast<int>(s.batch) * K) << "one exchange per chunk";
    size_t to_each = 0;
    std::set<int> peers;
    for (const auto& call : log) {
      ASSERT_EQ(static_cast<int>(call.size()), N - 1) << "one message per remote node, not per remote rank";
      for (const PeerTransfer& t : call) {
        EXPECT_NE(t.peer, n) << "no message to my own node";
        EXPECT_EQ(t.send_bytes, t.recv_bytes);
        peers.insert(t.peer);
        if (t.peer == (n + 1) % N) to_each += t.send_bytes;
      }
    }
    EXPECT_EQ(static_cast<int>(peers.size()), N - 1);
    // To one remote node: my node's L shards of that node's same-index rank's heads.
    EXPECT_EQ(to_each, static_cast<size_t>(s.batch * L * s.seq_local * (s.heads / P) * s.head_dim) * 2);
    sel.transport->release(*f.compute);
    f.finish(*sel.transport);
  }
}

// A peer that never arrives, on either side of the link: a node-mate (its relay copies and
// chunk words never come) and a rail peer (its inter-node message never comes). Every
// waiting rank gives up within the watchdog; the ranks next to the absent one name it.
TEST(HierTransport, AnAbsentPeerOnEitherSideOfTheLinkIsNamed) {
  const int P = world_size(), me = world_rank();
  if (P != 4) GTEST_SKIP() << "runs as 2 nodes x 2 ranks";
  Fixture f(1.0);
  DeviceBuffer b = f.dev->alloc(1 << 16);  // declared first: freed after the transport drains its copies
  auto tr = f.make("hier");
  ExchangeShape s{1, 2, P, 4, DType::kBF16};
  warm_one_group(f, *tr, b, s);
  const int absent = 3;  // node 1: rank 2 is its node-mate, rank 1 its rail peer
  if (me == absent) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      auto e2 = tr->submit(Submission{Tag::kQ, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
      e2->wait(*f.compute);
      f.compute->synchronize();
    } catch (const PeerTimeout& err) {
      what = err.what();
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(what.empty()) << "rank " << me << ": the wait for an absent peer must fail";
    EXPECT_LT(took, 2.9) << what;
    if (me == 1 || me == 2) {
      EXPECT_TRUE(what.find("peer 3 did not arrive") != std::string::npos ||
                  what.find("rank(s) 3 did not arrive") != std::string::npos)
          << "rank " << me << ": " << what;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// V-major: after a full step, a step whose even chunks barely changed (relative 1e-4,
// under the threshold 0.1) and whose odd chunks changed completely: the odd blocks
// arrive, the receivers keep the even blocks of the other node as they were, the own
// node's tokens are always exact, and only about half the bytes cross. The same step
// again sends nothing but the masks; a full step is exact again.
TEST(HierTransport, VMajorSkipsBlocksThatBarelyChangedAndReceiversKeepThem) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more (2 nodes)";
  Fixture f;
  const int L = P / 2, K = 2;
  NodeLayout nodes = discover_nodes(MPI_COMM_WORLD, L, 20);
  TransportSetup st = f.setup(nodes, K);
  SelectedTransport sel = select_transport("hier-vmajor", st);
  ASSERT_EQ(sel.used, "hier-vmajor") << sel.fallback_reason;
  Transport& tr = *sel.transport;
  ExchangeShape s{1, 4, 2 * P, 8, DType::kFP32};
  const int64_t LS = L * s.seq_local, hl = s.heads / P, S = s.seq_local * P;
  const uint64_t seed = shared_seed();
  auto base = [&](int64_t sg, int64_t h, int64_t d, uint64_t which) {
    return uniform_pm1(seed, which, static_cast<uint64_t>((sg * s.heads + h) * s.head_dim + d));
  };
  auto even_chunk = [&](int64_t sg) { return ((sg % LS) / (LS / K)) % 2 == 0; };
  // step 0: A; step 1: even chunks A*(1 + 1e-4), odd chunks fresh values
  auto value = [&](int step, int64_t sg, int64_t h, int64_t d) {
    const float a = base(sg, h, d, 1);
    if (step == 0) return a;
    return even_chunk(sg) ? a * (1.0f + 1e-4f) : base(sg, h, d, 2);
  };
  auto source = [&](int step) {
    std::vector<float> v(static_cast<size_t>(s.seq_local * s.heads * s.head_dim));
    for (int64_t t = 0; t < s.seq_local; ++t)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d)
          v[static_cast<size_t>((t * s.heads + h) * s.head_dim + d)] = value(step, me * s.seq_local + t, h, d);
    DeviceBuffer b = f.dev->alloc(v.size() * 4);
    f.dev->copy_to_device(b.get(), v.data(), v.size() * 4);
    return b;
  };
  // What rank `me` holds: its heads of every token; remote even chunks as `kept` says.
  auto expected = [&](int step, bool kept) {
    std::vector<float> v(static_cast<size_t>(S * hl * s.head_dim));
    for (int64_t sg = 0; sg < S; ++sg) {
      const bool remote = sg / LS != me / L;
      const int use = remote && kept && even_chunk(sg) ? 0 : step;
      for (int64_t h = 0; h < hl; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d)
          v[static_cast<size_t>((sg * hl + h) * s.head_dim + d)] = value(use, sg, me * hl + h, d);
    }
    return v;
  };
  auto run = [&](int step, bool selective) {
    tr.set_selective(selective);
    DeviceBuffer b = source(step);
    const TransportStats before = tr.stats();
    auto e = tr.submit(Submission{Tag::kV, Direction::kScatter, b.get(), 0, s, true}, *f.compute);
    e->wait(*f.compute);
    f.compute->synchronize();
    std::vector<float> got(static_cast<size_t>(S * hl * s.head_dim));
    f.dev->copy_to_host(got.data(), e->data(), got.size() * 4);
    tr.release(*f.compute);
    f.compute->synchronize();
    const TransportStats after = tr.stats();
    return std::make_tuple(got, after.inter_bytes_sent - before.inter_bytes_sent,
                           after.inter_bytes_full - before.inter_bytes_full);
  };
  const int64_t full = LS * hl * s.head_dim * 4, masks = K;  // to the one remote node
  auto [g0, sent0, full0] = run(0, false);
  EXPECT_EQ(g0, expected(0, false));
  EXPECT_EQ(full0, full);
  EXPECT_EQ(sent0, full + masks);
  auto [g1, sent1, full1] = run(1, true);
  EXPECT_EQ(g1, expected(1, true)) << "odd blocks new, remote even blocks kept from step 0";
  EXPECT_EQ(sent1, full / 2 + masks);
  EXPECT_EQ(full1, full);
  auto [g2, sent2, full2] = run(1, true);
  EXPECT_EQ(g2, expected(1, true));
  EXPECT_EQ(sent2, masks) << "nothing changed since last sent";
  auto [g3, sent3, full3] = run(1, false);
  EXPECT_EQ(g3, expected(1, false)) << "full communication is exact";
  EXPECT_EQ(sent3, full + masks);
  EXPECT_NE(expected(1, true), expected(1, false)) << "the test must see the kept blocks";
  f.finish(tr);
}

TEST(FdExchange, PassesDescriptorsBetweenEveryPairOfRanks) {
  const int P = world_size(), me = world_rank();
  const uint64_t seed = shared_seed();
  std::string name_a;
  {
    FdExchange a(MPI_COMM_WORLD, 10.0), b(MPI_COMM_WORLD, 10.0);
    name_a = a.socket_name(me);
    EXPECT_NE(name_a, b.socket_name(me));
    EXPECT_TRUE(unix_socket_listed("@" + name_a)) << name_a;
    EXPECT_FALSE(unix_socket_listed(name_a)) << "the socket must not be a file";
    for (uint64_t round = 0; round < 3; ++round) {
      for (FdExchange* x : {&a, &b}) {
        const uint64_t tag = splitmix64(seed + round * 2 + (x == &b));
        UniqueFd mine = memfd_with(tag, static_cast<uint64_t>(me));
        ASSERT_TRUE(mine);
        std::vector<UniqueFd> got = x->allgather(mine.get(), 10.0, "the test exchange");
        ASSERT_EQ(got.size(), static_cast<size_t>(P));
        EXPECT_FALSE(got[me]) << "no descriptor from myself";
        for (int p = 0; p < P; ++p) {
          if (p == me) continue;
          ASSERT_TRUE(got[p]) << "nothing from rank " << p;
          uint64_t words[2] = {0, 0};
          ASSERT_EQ(pread(got[p].get(), words, sizeof(words), 0), static_cast<ssize_t>(sizeof(words)));
          EXPECT_EQ(words[0], tag) << "round " << round << " from rank " << p << ": a descriptor of another exchange";
          EXPECT_EQ(words[1], static_cast<uint64_t>(p));
        }
      }
    }
  }
  EXPECT_FALSE(unix_socket_listed("@" + name_a)) << "the socket outlived its exchange";
  MPI_Barrier(MPI_COMM_WORLD);
}

// The barrier before every timed GPU layer (polling for its first 50 ms) releases the
// ranks together: a rank that waited for a late one leaves within a fraction of a
// millisecond of it, not a nap later (the difference would be charged to the first
// collective of the layer).
TEST(Bootstrap, BoundedBarrierReleasesTheRanksTogether) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  constexpr int kTrials = 15;
  // One trial: the last rank arrives 5 to 12 ms late (the others have long been waiting),
  // then `barrier` runs; the spread of the times the ranks leave it, ms.
  auto release_skew_ms = [&](int trial, const std::function<void()>& barrier) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5 + (trial * 3) % 8));
    barrier();
    // CLOCK_MONOTONIC: one clock for every process of the node.
    const int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch()).count();
    std::vector<int64_t> all(static_cast<size_t>(P));
    MPI_Allgather(&left, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    return static_cast<double>(*std::max_element(all.begin(), all.end()) -
                               *std::min_element(all.begin(), all.end())) * 1e-6;
  };
  // Ours and MPI's own barrier, trial by trial in turn, so both see the same machine: on a
  // loaded one (4 ranks on 2 busy cores) the scheduler alone spreads the release by
  // milliseconds, and MPI's barrier measures how much.
  std::vector<double> ours, mpi;
  for (int trial = 0; trial < kTrials; ++trial) {
    ours.push_back(release_skew_ms(
        trial, [] { barrier_bounded(MPI_COMM_WORLD, 10.0, "the test barrier", /*spin_s=*/0.05); }));
    mpi.push_back(release_skew_ms(trial, [] { MPI_Barrier(MPI_COMM_WORLD); }));
  }
  // A rank descheduled just after its release inflates that trial's skew; a barrier that
  // polls slowly (naps between polls) inflates every trial. So the sixth-best trial is
  // judged: within 0.3 ms plus twice MPI's sixth-best where the machine
  // spreads even MPI's barrier (an idle machine: MPI's is some microseconds, the bound 0.3).
  std::sort(ours.begin(), ours.end());
  std::sort(mpi.begin(), mpi.end());
  const double bound = 0.3 + 2 * mpi[kTrials / 3];
  EXPECT_LT(ours[kTrials / 3], bound) << "sixth-smallest release skew over " << kTrials
                                      << " barriers, ms (median " << ours[kTrials / 2] << ", max " << ours.back()
                                      << "); MPI_Barrier's sixth-smallest " << mpi[kTrials / 3] << ", median "
                                      << mpi[kTrials / 2];
}

// A rank that never takes part: the others get a PeerTimeout naming it, in bounded time.
TEST(FdExchange, APeerThatNeverSendsIsAPeerTimeoutNamingIt) {
  const int P = world_size(), me = world_rank();
  if (P < 2) GTEST_SKIP() << "needs 2 ranks or more";
  FdExchange x(MPI_COMM_WORLD, 10.0);
  UniqueFd mine = memfd_with(1, static_cast<uint64_t>(me));
  ASSERT_TRUE(mine);
  if (me != P - 1) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      x.allgather(mine.get(), 1.0, "the test exchange");
      FAIL() << "an exchange with an absent peer must fail";
    } catch (const PeerTimeout& e) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(took, 0.9);
      EXPECT_LT(took, 3.0);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("rank(s) " + std::to_string(P - 1) + " did not send"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the test exchange"), std::string::npos) << msg;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
