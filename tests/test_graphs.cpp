// Graphs on the host device and through the recording decorator, at 1, 2 and 4 ranks:
//  - a captured op list launched again and again takes each launch's own write and wait
//    values, moves fresh data, and a wait that is never satisfied ends in a PeerTimeout
//    naming it (tests/graph_testing.hpp, the same check as on a GPU);
//  - the ipc and vmm transports' Q, K, V scatter, layer after layer, watched, captured and
//    replayed by the decorator (comm/device/tracing_device.hpp): every replay launches
//    the graph with the layer's own epochs, and its results are bit for bit those of the
//    same layers issued op by op, with fresh data each layer;
//  - a layer that differs from the capture (another shape: a target-cache miss) is not
//    replayed: it runs op by op, with the right results, and says why.
#include <gtest/gtest.h>
#include <mpi.h>

#include <random>

#include "tests/graph_testing.hpp"
#include "tests/mpi_testing.hpp"
#include "base/error.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/device/host_device.hpp"
#include "comm/device/tracing_device.hpp"
#include "comm/transport/transport.hpp"

using namespace uipc;

namespace {

using uipc::testing::world_rank;
using uipc::testing::world_size;

using uipc::testing::shared_seed;

TEST(HostGraphs, LaunchesTakeTheirOwnValuesAndStayBounded) {
  auto dev = make_host_device(world_rank());
  uipc::testing::check_graph_launches_take_their_own_values(*dev, shared_seed());
}

TEST(HostGraphs, OrderingEventsJoinTheStreamsOfEveryLaunch) {
  auto dev = make_host_device(world_rank());
  uipc::testing::check_graph_launches_take_their_own_values(*dev, shared_seed(), EventUse::kOrdering);
}

struct LayerRun {
  std::vector<std::vector<uint16_t>> results;  // [layer]: this rank's Q, K, V results, concatenated
  int steady = 0, captures = 0, replays = 0, divergences = 0;
  std::string why;  // the last divergence
};

enum class Mode { kOpByOp, kGraphs };

// `layers` layers of a Q, K, V scatter with fresh inputs each; from layer `reshape_at`
// on (if >= 0) with another sequence length.
LayerRun run_layers(const std::string& transport, Mode mode, int layers, int reshape_at, uint64_t seed) {
  const int me = world_rank(), P = world_size();
  TracingDevice dev(make_host_device(me), me, P, false);
  dev.set_watchdog_seconds(20);
  auto compute = dev.create_stream(StreamPriority::kNormal);
  std::unique_ptr<Transport> t = transport == "ipc" ? make_ipc_transport(dev, MPI_COMM_WORLD, TransportOptions{})
                                                    : make_vmm_transport(dev, MPI_COMM_WORLD, TransportOptions{});
  std::mt19937_64 rng(seed + static_cast<uint64_t>(me));
  LayerRun out;
  enum class State { kWatch, kCapture, kReplay } state = State::kWatch;
  CapturedLayer captured;
  DeviceBuffer buf, res;  // the inputs; the results, copied out before the release (as attention reads them)
  for (int layer = 0; layer < layers; ++layer) {
    const int64_t seq_local = reshape_at >= 0 && layer >= reshape_at ? 24 : 16;
    ExchangeShape shape{1, seq_local, 4 * P, 8, DType::kBF16};
    const size_t elems = static_cast<size_t>(shape.batch * shape.seq_local * shape.heads * shape.head_dim);
    if (!buf || buf.bytes() != elems * 2) {
      buf = dev.alloc(elems * 2);
      res = dev.alloc(3 * elems * 2);
    }
    std::vector<uint16_t> src(elems);
    for (auto& v : src) v = static_cast<uint16_t>(rng());
    dev.copy_to_device(buf.get(), src.data(), elems * 2);
    std::vector<std::unique_ptr<Exchange>> ex;
    auto issue = [&] {
      ex.clear();
      for (Tag tag : {Tag::kV, Tag::kQ, Tag::kK}) {
        Submission s;
        s.tag = tag;
        s.src = buf.get();
        s.shape = shape;
        s.barrier = tag == Tag::kK;
        ex.push_back(t->submit(s, *compute));
      }
      for (auto& e : ex) e->wait(*compute);
      for (size_t i = 0; i < ex.size(); ++i)
        dev.copy_2d(*compute, res.as<uint16_t>() + i * elems, elems * 2, ex[i]->data(), elems * 2, elems * 2, 1);
      t->release(*compute);
    };
    if (mode == Mode::kOpByOp) {
      issue();
    } else if (state == State::kWatch) {
      dev.begin_watch();
      issue();
      if (dev.end_watch().empty()) ++out.steady, state = State::kCapture;
    } else if (state == State::kCapture) {
      dev.begin_capture_layer(*compute);
      issue();
      captured = dev.end_capture_layer(*compute);
      dev.launch(captured, *compute);
      ++out.captures;
      state = State::kReplay;
    } else {
      dev.begin_replay(captured);
      issue();
      std::string why;
      if (dev.end_replay(*compute, &why)) {
        ++out.replays;
      } else {
        ++out.divergences;
        out.why = why;
        state = State::kWatch;
      }
    }
    compute->synchronize();
    std::vector<uint16_t> all(3 * elems);
    dev.copy_to_host(all.data(), res.get(), all.size() * 2);
    out.results.push_back(std::move(all));
  }
  t->close_peer_mappings();
  MPI_Barrier(MPI_COMM_WORLD);
  return out;
}

class Replay : public ::testing::TestWithParam<std::string> {};

TEST_P(Replay, ReplayedLayersAreTheLayersIssuedOpByOp) {
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const LayerRun ref = run_layers(GetParam(), Mode::kOpByOp, 9, -1, seed);
  const LayerRun g = run_layers(GetParam(), Mode::kGraphs, 9, -1, seed);
  EXPECT_EQ(g.captures, 1);
  EXPECT_EQ(g.replays, 9 - 3) << "layer 0 misses the target cache, layer 1 is watched, layer 2 captured";
  EXPECT_EQ(g.divergences, 0) << g.why;
  ASSERT_EQ(g.results.size(), ref.results.size());
  for (size_t l = 0; l < ref.results.size(); ++l) {
    size_t i = 0;
    while (i < ref.results[l].size() && g.results[l][i] == ref.results[l][i]) ++i;
    EXPECT_EQ(i, ref.results[l].size()) << "layer " << l << " differs first at element " << i << " of "
                                        << ref.results[l].size();
  }
  // Fresh data each layer: a replay that moved nothing would repeat a layer's result.
  for (size_t l = 1; l < g.results.size(); ++l) EXPECT_NE(g.results[l], g.results[l - 1]) << "layer " << l;
}

TEST_P(Replay, ALayerThatDiffersRunsOpByOpAndSaysWhy) {
  const uint64_t seed = shared_seed();
  const LayerRun ref = run_layers(GetParam(), Mode::kOpByOp, 8, 5, seed);
  const LayerRun g = run_layers(GetParam(), Mode::kGraphs, 8, 5, seed);
  EXPECT_EQ(g.divergences, 1);
  EXPECT_NE(g.why.find("an allocation"), std::string::npos) << g.why;  // the new shape's target
  EXPECT_GE(g.captures, 2) << "captured again once the new shape is steady";
  for (size_t l = 0; l < ref.results.size(); ++l) EXPECT_EQ(g.results[l], ref.results[l]) << "layer " << l;
}

INSTANTIATE_TEST_SUITE_P(Transports, Replay, ::testing::Values("ipc", "vmm"));

}  // namespace

namespace {

// The rules of a CUDA capture hold on the host device, so that CI fails where a GPU would.
TEST(HostGraphs, WorkOfAStreamThatNeverJoinedBreaksTheCapture) {
  auto dev = make_host_device(world_rank());
  auto origin = dev->create_stream(StreamPriority::kNormal);
  auto side = dev->create_stream(StreamPriority::kHigh);
  DeviceBuffer words = dev->alloc(64);
  dev->begin_capture(*origin);
  dev->write_value64(*side, words.as<uint64_t>(), 1);  // side never waited on a captured event
  try {
    dev->end_capture(*origin);
    FAIL() << "a capture with work of a stream outside it was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("a 64-bit write on a stream that has not joined the capture"),
              std::string::npos)
        << e.what();
  }
  origin->synchronize();
  side->synchronize();
  uint64_t w = 7;
  dev->copy_to_host(&w, words.get(), sizeof(w));
  EXPECT_EQ(w, 0u) << "work of a failed capture ran";
}

TEST(HostGraphs, WorkThatDoesNotJoinBackBreaksTheCapture) {
  auto dev = make_host_device(world_rank());
  auto origin = dev->create_stream(StreamPriority::kNormal);
  auto side = dev->create_stream(StreamPriority::kHigh);
  auto fork = dev->create_event(), join = dev->create_event();
  DeviceBuffer words = dev->alloc(64);
  dev->begin_capture(*origin);
  fork->record(*origin);
  dev->stream_wait_event(*side, *fork);
  join->record(*side);
  dev->stream_wait_event(*origin, *join);
  dev->write_value64(*side, words.as<uint64_t>(), 1);  // after the join: never waited on
  try {
    dev->end_capture(*origin);
    FAIL() << "a capture with unjoined work was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("does not join back"), std::string::npos) << e.what();
  }
  // Joined through a second stream (side -> third -> origin) is joined.
  auto third = dev->create_stream(StreamPriority::kNormal);
  auto join2 = dev->create_event();
  dev->begin_capture(*origin);
  fork->record(*origin);
  dev->stream_wait_event(*side, *fork);
  dev->write_value64(*side, words.as<uint64_t>(), 2);
  join->record(*side);
  dev->stream_wait_event(*third, *join);
  join2->record(*third);
  dev->stream_wait_event(*origin, *join2);
  auto g = dev->end_capture(*origin);
  g->launch(*origin, g->value_ops());
  origin->synchronize();
  uint64_t w = 0;
  dev->copy_to_host(&w, words.get(), sizeof(w));
  EXPECT_EQ(w, 2u);
}

}  // namespace
