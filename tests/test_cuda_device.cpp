// The CUDA device layer (comm/cuda_device.*) on a real GPU: pitched copies, timing
// events, the 64-bit stream memory operations within one process, the watchdog turning
// a wait that never completes into a PeerTimeout that names it, and the scatter across
// the MPI ranks of a node (several ranks may share one GPU) on both mapping paths (CUDA
// IPC handles; VMM memory shared as POSIX descriptors over Unix sockets): each rank
// scatters the strided V view of a fused QKV buffer straight into every peer's
// final-layout target, then one grouped epoch handshake (64-bit stream memory operations
// on the peers' mapped words); the result is checked bit for bit, epoch after epoch.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/copy_testing.hpp"
#include "tests/graph_testing.hpp"
#include "base/error.hpp"
#include "comm/device/cuda_device.hpp"
#include "comm/fd_exchange.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/collectives/nccl_collectives.hpp"

namespace uipc {
namespace {

using Clock = std::chrono::steady_clock;

int node_rank_and_size(int* size) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_size(node, size);
  MPI_Comm_free(&node);
  return r;
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    const int n = cuda_usable_device_count(&why);
    if (n == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
    int node_size = 1;
    dev_ = make_cuda_device(node_rank_and_size(&node_size) % n);
  }
  std::unique_ptr<Device> dev_;
};

TEST_F(CudaDeviceTest, NameEligibilityAndPeerAccess) {
  EXPECT_EQ(dev_->kind(), DeviceKind::kCuda);
  EXPECT_NE(dev_->name().find("("), std::string::npos);
  EXPECT_EQ(cuda_ipc_ineligible_reason(*dev_), "") << "64-bit stream memory operations expected on this GPU";
  EXPECT_EQ(dev_->ipc_ineligible_reason(), cuda_ipc_ineligible_reason(*dev_));
  EXPECT_EQ(dev_->vmm_ineligible_reason(), "") << "VMM with POSIX-descriptor handles expected on this GPU";
  EXPECT_TRUE(cuda_can_access_peer(dev_->ordinal(), dev_->ordinal()));
  EXPECT_GT(dev_->free_memory(), size_t(1) << 20);
}

TEST_F(CudaDeviceTest, Copy2dStridedIntoPitchedTarget) {
  auto s = dev_->create_stream(StreamPriority::kHigh);
  const size_t rows = 301, width = 24 * 128 * 2, src_pitch = 3 * width, dst_pitch = width + 64;
  std::vector<unsigned char> src(rows * src_pitch);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  auto dsrc = dev_->alloc(src.size());
  auto ddst = dev_->alloc(rows * dst_pitch);
  dev_->copy_to_device(dsrc.get(), src.data(), src.size());
  dev_->memset(*s, ddst.get(), 0xFF, rows * dst_pitch);
  // The middle third of each source row, as the V view of a fused QKV row.
  dev_->copy_2d(*s, ddst.get(), dst_pitch, dsrc.as<unsigned char>() + width, src_pitch, width, rows);
  s->synchronize();
  std::vector<unsigned char> got(rows * dst_pitch);
  dev_->copy_to_host(got.data(), ddst.get(), got.size());
  for (size_t r = 0; r < rows; ++r) {
    ASSERT_EQ(0, std::memcmp(&got[r * dst_pitch], &src[r * src_pitch + width], width)) << "row " << r;
    for (size_t b = width; b < dst_pitch; ++b) ASSERT_EQ(got[r * dst_pitch + b], 0xFF) << "padding of row " << r;
  }
}

TEST_F(CudaDeviceTest, Copy2dBatchIsEveryCopyExactly) {
  uipc::testing::check_copy_2d_batch_is_every_copy_exactly(*dev_);
}

TEST_F(CudaDeviceTest, EventsMeasureElapsedTime) {
  auto s = dev_->create_stream(StreamPriority::kNormal);
  auto a = dev_->create_event(), b = dev_->create_event();
  auto buf = dev_->alloc(size_t(256) << 20);
  a->record(*s);
  for (int i = 0; i < 8; ++i) dev_->memset(*s, buf.get(), i, buf.bytes());
  b->record(*s);
  b->synchronize();
  EXPECT_TRUE(a->query());
  EXPECT_TRUE(b->query());
  const double ms = dev_->elapsed_ms(*a, *b);
  EXPECT_GT(ms, 0.0);
  EXPECT_LT(ms, 10000.0);
  // The other stream waits for the event.
  auto s2 = dev_->create_stream(StreamPriority::kHigh);
  dev_->stream_wait_event(*s2, *b);
  s2->synchronize();
}

TEST_F(CudaDeviceTest, WriteAndWaitValueWithinOneProcess) {
  auto producer = dev_->create_stream(StreamPriority::kHigh);
  auto consumer = dev_->create_stream(StreamPriority::kNormal);
  auto words = dev_->alloc(2 * sizeof(uint64_t));
  auto flag = dev_->alloc(64);
  dev_->memset(*producer, words.get(), 0, words.bytes());
  dev_->memset(*producer, flag.get(), 0, 64);
  producer->synchronize();
  uint64_t* w = words.as<uint64_t>();
  // The consumer waits for 5, then marks the flag; the producer stores 3 (not enough),
  // then 7 after a delay.
  dev_->wait_value64_geq(*consumer, w, 5, WaitLabel{0, "test word"});
  dev_->memset(*consumer, flag.get(), 0xAB, 64);
  auto ev = dev_->create_event();
  ev->record(*consumer);
  dev_->write_value64(*producer, w, 3);
  producer->synchronize();
  usleep(20000);
  EXPECT_FALSE(ev->query()) << "the wait passed before its value was written";
  dev_->write_value64(*producer, w, 7);
  consumer->synchronize();
  unsigned char f[64];
  dev_->copy_to_host(f, flag.get(), 64);
  EXPECT_EQ(f[0], 0xAB);
  uint64_t host_w = 0;
  dev_->copy_to_host(&host_w, w, 8);
  EXPECT_EQ(host_w, 7u);
}

TEST_F(CudaDeviceTest, WaitThatNeverCompletesIsAPeerTimeout) {
  dev_->set_watchdog_seconds(1.0);
  auto s = dev_->create_stream(StreamPriority::kHigh);
  auto unblock = dev_->create_stream(StreamPriority::kNormal);
  auto words = dev_->alloc(2 * sizeof(uint64_t));
  dev_->memset(*unblock, words.get(), 0, words.bytes());
  unblock->synchronize();
  uint64_t* w = words.as<uint64_t>();
  dev_->write_value64(*unblock, w + 1, 9);  // a satisfied wait must not be named
  unblock->synchronize();
  dev_->wait_value64_geq(*s, w + 1, 9, WaitLabel{3, "already-satisfied epoch"});
  dev_->wait_value64_geq(*s, w, 1, WaitLabel{7, "ready epoch of group 42 (tags V,Q,K)"});
  const auto t0 = Clock::now();
  std::string msg;
  try {
    s->synchronize();
    FAIL() << "synchronize returned although the word was never written";
  } catch (const PeerTimeout& e) {
    msg = e.what();
    EXPECT_EQ(e.exit_code(), kExitPeerTimeout);
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 5.0);
  EXPECT_NE(msg.find("peer 7 did not arrive within 1s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ready epoch of group 42 (tags V,Q,K)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("word holds 0, needs >= 1"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("already-satisfied"), std::string::npos) << msg;
  // An event behind the stuck wait is bounded too.
  auto ev = dev_->create_event();
  ev->record(*s);
  EXPECT_THROW(ev->synchronize(), PeerTimeout);
  // Release the stream so that the process can end cleanly.
  dev_->write_value64(*unblock, w, 1);
  unblock->synchronize();
  s->synchronize();
}

// CUDA graphs with the handshake's stream memory operations: each launch takes its own
// epochs (the nodes are updated), moves fresh data, times itself through event-record
// nodes; a wait never satisfied is a PeerTimeout naming it (tests/graph_testing.hpp).
TEST_F(CudaDeviceTest, GraphLaunchesTakeTheirOwnValuesAndStayBounded) {
  uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  uipc::testing::check_graph_launches_take_their_own_values(*dev_, seed);
}

// Ordering events (EventUse::kOrdering) are edges of the graph, not nodes: the launches
// still order the side stream between the origin's writes; and one last recorded in a
// capture cannot be waited on outside it (its record there was only the edge).
TEST_F(CudaDeviceTest, OrderingEventsAreEdgesOfAGraphAndNotWaitedOnOutsideIt) {
  uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  uipc::testing::check_graph_launches_take_their_own_values(*dev_, seed, EventUse::kOrdering);
  auto origin = dev_->create_stream(StreamPriority::kNormal);
  auto side = dev_->create_stream(StreamPriority::kNormal);
  auto fork = dev_->create_event(EventUse::kOrdering);
  dev_->begin_capture(*origin);
  fork->record(*origin);
  dev_->stream_wait_event(*side, *fork);
  auto join = dev_->create_event(EventUse::kOrdering);
  join->record(*side);
  dev_->stream_wait_event(*origin, *join);
  auto g = dev_->end_capture(*origin);
  g->launch(*origin, g->value_ops());
  origin->synchronize();
  try {
    dev_->stream_wait_event(*side, *fork);
    ADD_FAILURE() << "a wait outside the graph on an ordering event recorded in it was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("outside a graph, on an ordering event"), std::string::npos) << e.what();
  }
  // Recorded again outside a capture, it is an ordinary join once more.
  fork->record(*origin);
  dev_->stream_wait_event(*side, *fork);
  side->synchronize();
}

// The shapes of the cross-rank scatter: 4 heads per rank after it, 96 tokens per rank.
struct ScatterGeometry {
  explicit ScatterGeometry(int ranks) : P(ranks), H(4 * ranks) {}
  int P, H;
  int Hl = 4, D = 64;
  int64_t Sl = 96;
  size_t row() const { return 3 * static_cast<size_t>(H) * D; }  // elements (uint16 "bf16") per fused row
  size_t slice_bytes() const { return static_cast<size_t>(Hl) * D * 2; }
  size_t target_bytes() const { return static_cast<size_t>(Sl) * P * slice_bytes(); }  // (S, Hl, D)
  size_t epoch_bytes() const { return static_cast<size_t>(P) * sizeof(uint64_t); }      // slot q: written by rank q
};

// Fills this rank's target with 0xFF and zeroes its epoch words, before any peer maps them.
void prepare(Device& dev, void* target, void* epochs, const ScatterGeometry& g) {
  auto s = dev.create_stream(StreamPriority::kNormal);
  dev.memset(*s, target, 0xFF, g.target_bytes());
  dev.memset(*s, epochs, 0, g.epoch_bytes());
  s->synchronize();
}

// The scatter of docs/math.md section 4 with the grouped handshake, 24 epochs with
// rank-skewed arrival: targets[u] / peer_epochs[u] are rank u's target and epoch words
// as mapped here (this rank's own for u == rank); every epoch is checked bit for bit.
void scatter_epochs_bit_exact(Device& dev, const ScatterGeometry& g, int rank, const void* own_target,
                              uint64_t* own_epochs, const std::vector<void*>& targets,
                              const std::vector<uint64_t*>& peer_epochs) {
  const int P = g.P, H = g.H, Hl = g.Hl, D = g.D;
  const int64_t Sl = g.Sl;
  const size_t row = g.row(), slice_bytes = g.slice_bytes();
  auto stream = dev.create_stream(StreamPriority::kHigh);
  auto qkv = dev.alloc(Sl * row * 2);
  auto value = [](int q, uint64_t e, size_t i) {
    return static_cast<uint16_t>((q * 7919u + e * 104729u + i * 31u) ^ (i >> 7));
  };
  std::vector<uint16_t> host(Sl * row), got(Sl * P * Hl * D);
  const uint64_t kEpochs = 24;
  for (uint64_t e = 1; e <= kEpochs; ++e) {
    for (size_t i = 0; i < host.size(); ++i) host[i] = value(rank, e, i);
    dev.copy_to_device(qkv.get(), host.data(), host.size() * 2);
    usleep(static_cast<useconds_t>(((rank + e) % 3) * 700));  // rank-skewed arrival
    for (int u = 0; u < P; ++u) {
      const auto* src = qkv.as<uint16_t>() + 2 * static_cast<size_t>(H) * D + static_cast<size_t>(u) * Hl * D;
      auto* dst = static_cast<unsigned char*>(targets[u]) + rank * Sl * slice_bytes;
      dev.copy_2d(*stream, dst, slice_bytes, src, row * 2, slice_bytes, Sl);
    }
    for (int u = 0; u < P; ++u) dev.write_value64(*stream, peer_epochs[u] + rank, e);
    for (int q = 0; q < P; ++q) {
      dev.wait_value64_geq(*stream, own_epochs + q, e, WaitLabel{q, "test epoch " + std::to_string(e)});
    }
    stream->synchronize();
    dev.copy_to_host(got.data(), own_target, got.size() * 2);
    for (int q = 0; q < P; ++q) {
      for (int64_t t = 0; t < Sl; ++t) {
        for (int c = 0; c < Hl * D; ++c) {
          const size_t src_i = t * row + 2 * static_cast<size_t>(H) * D + static_cast<size_t>(rank) * Hl * D + c;
          const size_t dst_i = (q * Sl + t) * static_cast<size_t>(Hl) * D + c;
          ASSERT_EQ(got[dst_i], value(q, e, src_i)) << "epoch " << e << " from rank " << q << " token " << t;
        }
      }
    }
    // Release: nobody writes the next epoch into a target that is still being checked.
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Over CUDA IPC handles exchanged with MPI.
TEST_F(CudaDeviceTest, IpcScatterAcrossRanksBitExact) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  ASSERT_EQ(cuda_ipc_ineligible_reason(*dev_), "");
  dev_->set_watchdog_seconds(30.0);
  const ScatterGeometry g(P);
  auto target = dev_->alloc(g.target_bytes(), true);
  auto epochs = dev_->alloc(g.epoch_bytes(), true);
  prepare(*dev_, target.get(), epochs.get(), g);

  IpcHandle mine[2] = {dev_->export_handle(target), dev_->export_handle(epochs)};
  std::vector<IpcHandle> all(2 * P);
  MPI_Allgather(mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
  std::vector<PeerMapping> targets, peer_epochs;
  std::vector<void*> target_ptrs;
  std::vector<uint64_t*> epoch_ptrs;
  for (int q = 0; q < P; ++q) {  // our own handles too: the same-process path
    targets.push_back(dev_->open_handle(all[2 * q], target.bytes()));
    peer_epochs.push_back(dev_->open_handle(all[2 * q + 1], epochs.bytes()));
    target_ptrs.push_back(targets.back().get());
    epoch_ptrs.push_back(peer_epochs.back().as<uint64_t>());
  }
  EXPECT_EQ(targets[rank].get(), target.get()) << "opening our own handle must give our own pointer";
  MPI_Barrier(MPI_COMM_WORLD);

  scatter_epochs_bit_exact(*dev_, g, rank, target.get(), epochs.as<uint64_t>(), target_ptrs, epoch_ptrs);
  targets.clear();
  peer_epochs.clear();
  MPI_Barrier(MPI_COMM_WORLD);  // every mapping closed before any exporter frees
}

// Over VMM allocations (cuMemCreate, POSIX-descriptor handles) passed between the ranks
// with SCM_RIGHTS and mapped with cuMemImportFromShareableHandle + cuMemMap: the pitched
// copies land in peers' VMM targets and cuStreamWriteValue64 hits peers' VMM-mapped
// epoch words (this rank's own words at 1 rank).
TEST_F(CudaDeviceTest, VmmScatterAcrossRanksBitExact) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  ASSERT_EQ(dev_->vmm_ineligible_reason(), "");
  dev_->set_watchdog_seconds(30.0);
  const ScatterGeometry g(P);
  auto target = dev_->alloc_fd_shareable(g.target_bytes());
  auto epochs = dev_->alloc_fd_shareable(g.epoch_bytes());
  ASSERT_TRUE(target && epochs);
  EXPECT_EQ(target.bytes(), g.target_bytes()) << "the buffer reports the size asked for, not the granule-rounded one";
  prepare(*dev_, target.get(), epochs.get(), g);

  // What is not VMM memory is refused; a descriptor handed in is closed even on failure.
  auto plain = dev_->alloc(64);
  EXPECT_THROW(dev_->export_fd(plain), RuntimeError);
  EXPECT_THROW(dev_->import_fd(-1, 64), RuntimeError);

  FdExchange fdx(MPI_COMM_WORLD, 30.0);
  UniqueFd target_fd(dev_->export_fd(target)), epochs_fd(dev_->export_fd(epochs));
  ASSERT_TRUE(target_fd && epochs_fd);
  std::vector<UniqueFd> target_fds = fdx.allgather(target_fd.get(), 30.0, "the VMM targets");
  std::vector<UniqueFd> epoch_fds = fdx.allgather(epochs_fd.get(), 30.0, "the VMM epoch words");
  std::vector<PeerMapping> maps;
  std::vector<void*> target_ptrs(P, target.get());
  std::vector<uint64_t*> epoch_ptrs(P, epochs.as<uint64_t>());
  for (int q = 0; q < P; ++q) {
    if (q == rank) continue;
    maps.push_back(dev_->import_fd(target_fds[q].release(), g.target_bytes()));
    target_ptrs[q] = maps.back().get();
    maps.push_back(dev_->import_fd(epoch_fds[q].release(), g.epoch_bytes()));
    epoch_ptrs[q] = maps.back().as<uint64_t>();
  }
  MPI_Barrier(MPI_COMM_WORLD);

  scatter_epochs_bit_exact(*dev_, g, rank, target.get(), epochs.as<uint64_t>(), target_ptrs, epoch_ptrs);
  maps.clear();
  MPI_Barrier(MPI_COMM_WORLD);  // every mapping closed before any exporter frees
}

// NCCL needs one GPU per rank; on a shared GPU these tests have nothing to run.
class NcclTest : public CudaDeviceTest {
 protected:
  void SetUp() override {
    CudaDeviceTest::SetUp();
    if (IsSkipped()) return;
    int node_size = 1;
    node_rank_and_size(&node_size);
    if (node_size > cuda_usable_device_count()) GTEST_SKIP() << "NCCL needs one GPU per rank; ranks share a GPU here";
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  }
  void TearDown() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The non-blocking communicator carries data: an all-to-all of rank-and-peer-tagged bytes
// and a float all-reduce, checked exactly, twice (the second reuses the connections).
TEST_F(NcclTest, AllToAllAndAllReduceAreExact) {
  auto coll = make_nccl_collectives(comm_, 60.0);
  ASSERT_EQ(coll->name(), "nccl");
  auto s = dev_->create_stream(StreamPriority::kNormal);
  const size_t chunk = 4099;  // odd: no alignment luck
  const size_t P = static_cast<size_t>(size_);
  for (int round = 0; round < 2; ++round) {
    std::vector<unsigned char> send(chunk * P), got(chunk * P, 0xAB);
    for (size_t p = 0; p < P; ++p)
      for (size_t i = 0; i < chunk; ++i) send[p * chunk + i] = static_cast<unsigned char>(rank_ * 31 + p * 7 + i + round);
    std::vector<float> vals(1000), sum(1000);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>((rank_ + 1) * (i % 13) + round);
    auto dsend = dev_->alloc(send.size()), drecv = dev_->alloc(got.size()), dvals = dev_->alloc(vals.size() * 4);
    dev_->copy_to_device(dsend.get(), send.data(), send.size());
    dev_->copy_to_device(drecv.get(), got.data(), got.size());  // poisoned
    dev_->copy_to_device(dvals.get(), vals.data(), vals.size() * 4);
    coll->all_to_all(*s, dsend.get(), drecv.get(), chunk);
    coll->all_reduce_sum_f32(*s, dvals.as<float>(), vals.size());
    s->synchronize();
    dev_->copy_to_host(got.data(), drecv.get(), got.size());
    dev_->copy_to_host(sum.data(), dvals.get(), sum.size() * 4);
    for (size_t p = 0; p < P; ++p)
      for (size_t i = 0; i < chunk; ++i)
        ASSERT_EQ(got[p * chunk + i], static_cast<unsigned char>(p * 31 + rank_ * 7 + i + round))
            << "round " << round << ", from rank " << p << ", byte " << i;
    const float ranks_sum = static_cast<float>(P * (P + 1) / 2);
    for (size_t i = 0; i < sum.size(); ++i)
      ASSERT_EQ(sum[i], ranks_sum * static_cast<float>(i % 13) + static_cast<float>(P * round)) << "element " << i;
  }
}

// Grouped point-to-point (the hier transport's inter-node phase): every rank sends each
// other rank a message of its own size (rank- and peer-dependent, some empty) and receives
// theirs, all in one NCCL group, twice; every byte exact, the unsent parts untouched.
TEST_F(NcclTest, SendRecvOfUnequalSizesIsExact) {
  auto coll = make_nccl_collectives(comm_, 60.0);
  auto s = dev_->create_stream(StreamPriority::kNormal);
  const int P = size_;
  auto bytes = [](int from, int to) { return static_cast<size_t>(((from * 5 + to * 3) % 4) * 1021); };
  for (int round = 0; round < 2; ++round) {
    std::vector<size_t> out_at(P + 1, 0), in_at(P + 1, 0);
    for (int p = 0; p < P; ++p) {
      out_at[p + 1] = out_at[p] + bytes(rank_, p);
      in_at[p + 1] = in_at[p] + bytes(p, rank_);
    }
    std::vector<unsigned char> send(out_at[P] + 1), got(in_at[P] + 1, 0xAB);
    for (int p = 0; p < P; ++p)
      for (size_t i = 0; i < bytes(rank_, p); ++i)
        send[out_at[p] + i] = static_cast<unsigned char>(rank_ * 31 + p * 7 + i + round);
    auto dsend = dev_->alloc(send.size()), drecv = dev_->alloc(got.size());
    dev_->copy_to_device(dsend.get(), send.data(), send.size());
    dev_->copy_to_device(drecv.get(), got.data(), got.size());  // poisoned
    std::vector<PeerTransfer> xfers;
    for (int p = 0; p < P; ++p)
      xfers.push_back(PeerTransfer{p, dsend.as<unsigned char>() + out_at[p], bytes(rank_, p),
                                   drecv.as<unsigned char>() + in_at[p], bytes(p, rank_)});
    coll->send_recv(*s, xfers);
    s->synchronize();
    dev_->copy_to_host(got.data(), drecv.get(), got.size());
    for (int p = 0; p < P; ++p)
      for (size_t i = 0; i < bytes(p, rank_); ++i)
        ASSERT_EQ(got[in_at[p] + i], static_cast<unsigned char>(p * 31 + rank_ * 7 + i + round))
            << "round " << round << ", from rank " << p << ", byte " << i;
    ASSERT_EQ(got[in_at[P]], 0xAB) << "a byte past the last message was written";
  }
}

// A rank that never joins the communicator: the others give up within the limit with a
// PeerTimeout that says what was being set up, instead of hanging in NCCL.
TEST_F(NcclTest, ARankThatNeverJoinsIsAPeerTimeoutOnTheOthers) {
  if (size_ < 2) GTEST_SKIP() << "needs 2 ranks or more";
  setenv("ULYSSES_TEST_NCCL_ABSENT_RANK", std::to_string(size_ - 1).c_str(), 1);
  const auto t0 = Clock::now();
  try {
    auto coll = make_nccl_collectives(comm_, 3.0);
    ADD_FAILURE() << "a communicator with an absent rank must not be made";
  } catch (const PeerTimeout& e) {
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_NE(rank_, size_ - 1) << e.what();
    EXPECT_GE(took, 2.5);
    EXPECT_LT(took, 20.0);
    EXPECT_NE(std::string(e.what()).find("NCCL communicator of " + std::to_string(size_) + " ranks was not set up"),
              std::string::npos)
        << e.what();
  } catch (const RuntimeError& e) {
    EXPECT_EQ(rank_, size_ - 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("test hook"), std::string::npos) << e.what();
  }
  unsetenv("ULYSSES_TEST_NCCL_ABSENT_RANK");
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace uipc
