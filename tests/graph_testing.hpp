// One check of Device graphs (comm/device/device.hpp), run on the host device
// (tests/test_graphs.cpp) and on a GPU (tests/test_cuda_device.cpp): a "layer" of two
// streams with the epoch handshake's operations (a write on the origin stream, a wait
// for it on a second stream that joins through an event, a copy, a write back) is
// captured once and launched again and again with new values. Each launch must take its
// own values (never the captured ones), move fresh data, and time itself through events;
// a launch whose wait is never satisfied must end in a PeerTimeout naming the wait. The
// fork and join events are timed ones or ordering ones (EventUse: edges of a CUDA graph,
// no nodes); ordering ones are then refused to every read.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/device/device.hpp"

namespace uipc::testing {

inline void check_graph_launches_take_their_own_values(Device& dev, uint64_t seed,
                                                       EventUse joins = EventUse::kTimed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (joins == EventUse::kOrdering ? ", ordering joins" : ", timed joins"));
  std::mt19937_64 rng(seed);
  ASSERT_EQ(dev.graph_ineligible_reason(), "");
  auto origin = dev.create_stream(StreamPriority::kNormal);
  auto side = dev.create_stream(StreamPriority::kHigh);
  auto unblock = dev.create_stream(StreamPriority::kNormal);
  constexpr size_t kRows = 48, kWidth = 96, kPitch = 160;
  DeviceBuffer src = dev.alloc(kRows * kPitch), dst = dev.alloc(kRows * kWidth), words = dev.alloc(64);
  dev.memset(*origin, words.get(), 0, 64);
  dev.memset(*origin, dst.get(), 0, dst.bytes());
  origin->synchronize();
  auto fork = dev.create_event(joins), join = dev.create_event(joins);
  auto start = dev.create_event(), end = dev.create_event();
  uint64_t* w = words.as<uint64_t>();

  auto layer = [&](uint64_t epoch) {
    start->record(*origin);
    dev.write_value64(*origin, &w[0], epoch);
    fork->record(*origin);
    dev.stream_wait_event(*side, *fork);
    dev.wait_value64_geq(*side, &w[0], epoch, WaitLabel{5, "ready epoch " + std::to_string(epoch)});
    dev.copy_2d(*side, dst.get(), kWidth, src.get(), kPitch, kWidth, kRows);
    dev.write_value64(*side, &w[1], epoch);
    join->record(*side);
    dev.stream_wait_event(*origin, *join);
    end->record(*origin);
  };
  auto fresh_source = [&] {
    std::vector<unsigned char> h(kRows * kPitch);
    for (auto& c : h) c = static_cast<unsigned char>(rng());
    dev.copy_to_device(src.get(), h.data(), h.size());
    std::vector<unsigned char> want(kRows * kWidth);
    for (size_t r = 0; r < kRows; ++r)
      for (size_t c = 0; c < kWidth; ++c) want[r * kWidth + c] = h[r * kPitch + c];
    return want;
  };
  auto check = [&](uint64_t epoch, const std::vector<unsigned char>& want) {
    origin->synchronize();
    uint64_t got[2] = {0, 0};
    dev.copy_to_host(got, w, sizeof(got));
    EXPECT_EQ(got[0], epoch);
    EXPECT_EQ(got[1], epoch);
    std::vector<unsigned char> out(kRows * kWidth);
    dev.copy_to_host(out.data(), dst.get(), out.size());
    EXPECT_EQ(out, want) << "epoch " << epoch;
    EXPECT_GE(dev.elapsed_ms(*start, *end), 0.0);
  };

  // Captured: nothing runs until the launch.
  std::vector<unsigned char> want = fresh_source();
  dev.begin_capture(*origin);
  layer(7);
  std::unique_ptr<Graph> g = dev.end_capture(*origin);
  origin->synchronize();
  uint64_t untouched[2] = {1, 1};
  dev.copy_to_host(untouched, w, sizeof(untouched));
  EXPECT_EQ(untouched[0], 0u) << "a captured write ran at capture";
  ASSERT_EQ(g->value_ops().size(), 3u);
  EXPECT_FALSE(g->value_ops()[0].wait);
  EXPECT_TRUE(g->value_ops()[1].wait);
  EXPECT_EQ(g->value_ops()[1].value, 7u);
  EXPECT_EQ(g->value_ops()[1].label.peer, 5);
  g->launch(*origin, g->value_ops());
  check(7, want);

  // Launches with new epochs (increasing, as the handshake's) and fresh data each.
  std::vector<GraphValueOp> v = g->value_ops();
  for (uint64_t epoch : {8ull, 9ull, 20ull, 21ull, 1000ull}) {
    want = fresh_source();
    for (auto& op : v) op.value = epoch;
    v[1].label.what = "ready epoch " + std::to_string(epoch);
    g->launch(*origin, v);
    check(epoch, want);
  }

  // An ordering event is never read.
  if (joins == EventUse::kOrdering) {
    EXPECT_THROW((void)fork->query(), RuntimeError);
    EXPECT_THROW(join->synchronize(), RuntimeError);
    EXPECT_THROW((void)dev.elapsed_ms(*start, *join), RuntimeError);
  }

  // Values for another word are refused.
  std::vector<GraphValueOp> wrong = v;
  wrong[2].addr = &w[3];
  EXPECT_THROW(g->launch(*origin, wrong), RuntimeError);

  // A wait that is never satisfied is bounded by the watchdog and named.
  dev.set_watchdog_seconds(1.0);
  for (auto& op : v) op.value = 2000;
  v[1].value = 2001;
  v[1].label.what = "ready epoch 2001 (never written)";
  g->launch(*origin, v);
  std::string msg;
  try {
    origin->synchronize();
    ADD_FAILURE() << "synchronize returned although the wait was never satisfied";
  } catch (const PeerTimeout& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("ready epoch 2001 (never written)"), std::string::npos) << msg;
  // Release it, so that the streams drain and the test ends cleanly.
  dev.write_value64(*unblock, &w[0], 2001);
  unblock->synchronize();
  try {
    side->synchronize();
    origin->synchronize();
  } catch (const Error&) {
    // The host device's streams stay failed after a timeout; the CUDA ones drain.
  }
}

}  // namespace uipc::testing
