// Tests of the host (simulation-mode) device: stream order and failure, events, pitched
// copies, the bounded epoch-word waits, shared-memory export/open/seal with nothing left
// in /dev/shm, descriptor-shared (memfd) memory, and a cross-process scatter through mapped peer buffers (under mpiexec).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/copy_testing.hpp"
#include "tests/mpi_testing.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "comm/device/host_device.hpp"
#include "comm/device/memory_reach.hpp"

namespace uipc {
namespace {

using uipc::testing::world_rank;
using uipc::testing::world_size;

using Clock = std::chrono::steady_clock;

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// /dev/shm entries whose shm name (with its leading '/') starts with `prefix`.
std::vector<std::string> shm_entries(const std::string& prefix) {
  std::string want = prefix.substr(prefix[0] == '/' ? 1 : 0);
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (!dir) return found;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.compare(0, want.size(), want) == 0) found.push_back(name);
  }
  closedir(dir);
  return found;
}

std::vector<std::string> own_shm_entries() { return shm_entries(host_shm_process_prefix(getpid())); }

// Holds a stream's worker inside a task until released, so tests can control ordering.
// Bounded: a forgotten release ends after 20 s instead of hanging the test.
class Gate {
 public:
  void release() { open_.store(true); }
  std::function<void()> task() {
    return [this] {
      auto t0 = Clock::now();
      while (!open_.load() && seconds_since(t0) < 20.0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
  }

 private:
  std::atomic<bool> open_{false};
};

class HostDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { dev_ = make_host_device(world_rank()); }
  std::unique_ptr<Stream> stream(StreamPriority p = StreamPriority::kNormal) { return dev_->create_stream(p); }
  std::unique_ptr<Device> dev_;
};

// --- identity and memory

TEST_F(HostDeviceTest, DescribesItselfAsHost) {
  EXPECT_EQ(dev_->kind(), DeviceKind::kHost);
  EXPECT_EQ(dev_->name(), "simulated GPU (host)");
  EXPECT_GT(dev_->free_memory(), size_t(0));
  auto s = stream();
  EXPECT_EQ(s->native(), nullptr);
  EXPECT_NO_THROW(host_stream(*s));
  EXPECT_EQ(std::string(host_shm_prefix()).substr(0, 1), "/");
}

TEST_F(HostDeviceTest, AllocationsAreAlignedAndZeroed) {
  std::mt19937_64 rng(fresh_seed());
  for (bool exportable : {false, true}) {
    for (int i = 0; i < 8; ++i) {
      size_t bytes = 1 + rng() % 5000;
      DeviceBuffer buf = dev_->alloc(bytes, exportable);
      ASSERT_TRUE(buf);
      EXPECT_EQ(buf.bytes(), bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.get()) % 64, 0u);
      std::vector<unsigned char> host(bytes, 0xff);
      dev_->copy_to_host(host.data(), buf.get(), bytes);
      EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0; }))
          << "exportable=" << exportable << " bytes=" << bytes;
    }
  }
}

TEST_F(HostDeviceTest, HostStreamRejectsForeignStreams) {
  struct ForeignStream : Stream {
    void synchronize() override {}
    void* native() override { return nullptr; }
  } foreign;
  EXPECT_THROW(host_stream(foreign), RuntimeError);
  DeviceBuffer buf = dev_->alloc(64);
  EXPECT_THROW(dev_->memset(foreign, buf.get(), 0, 64), RuntimeError);
}

// A size that rounding or an off_t would wrap is an error, not a small buffer that
// claims to be huge.
TEST_F(HostDeviceTest, AllocationsOfImpossibleSizesAreErrors) {
  EXPECT_THROW(dev_->alloc(SIZE_MAX), RuntimeError);
  EXPECT_THROW(dev_->alloc(SIZE_MAX - 3), RuntimeError);
  EXPECT_THROW(dev_->alloc(SIZE_MAX, true), RuntimeError);
  EXPECT_THROW(dev_->alloc_fd_shareable(SIZE_MAX), RuntimeError);
  EXPECT_TRUE(own_shm_entries().empty());
}

// --- streams

TEST_F(HostDeviceTest, StreamRunsTasksInOrder) {
  constexpr int kTasks = 20000;
  auto a = stream();
  auto b = stream(StreamPriority::kHigh);
  // Plain vectors: if tasks of one stream ran out of order or on two threads at once,
  // the sequence (or ThreadSanitizer) would show it.
  std::vector<int> seen_a, seen_b;
  for (int i = 0; i < kTasks; ++i) {
    host_stream(*a).enqueue([&seen_a, i] { seen_a.push_back(i); });
    host_stream(*b).enqueue([&seen_b, i] { seen_b.push_back(i); });
  }
  a->synchronize();
  b->synchronize();
  std::vector<int> expected(kTasks);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(seen_a, expected);
  EXPECT_EQ(seen_b, expected);
}

TEST_F(HostDeviceTest, Copy2dWithStridedPitchesMatchesReference) {
  uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto s = stream();
  for (int iter = 0; iter < 24; ++iter) {
    size_t width = rng() % 200;
    size_t height = 1 + rng() % 48;
    size_t src_pitch = width + rng() % 64;
    size_t dst_pitch = width + rng() % 64;
    size_t src_bytes = src_pitch * height;
    size_t dst_bytes = dst_pitch * height + 37;  // a tail the copy must not touch
    bool dst_exportable = iter % 2 == 1;
    DeviceBuffer src = dev_->alloc(src_bytes);
    DeviceBuffer dst = dev_->alloc(dst_bytes, dst_exportable);
    // Odd iterations write through a second mapping of an exported buffer in this
    // process and read back through the original pointer.
    PeerMapping mapped;
    void* dst_ptr = dst.get();
    if (dst_exportable) {
      mapped = dev_->open_handle(dev_->export_handle(dst), dst_bytes);
      dst_ptr = mapped.get();
    }

    std::vector<unsigned char> src_host(src_bytes);
    for (auto& c : src_host) c = static_cast<unsigned char>(rng());
    std::vector<unsigned char> poison(dst_bytes, 0xA5);
    dev_->copy_to_device(src.get(), src_host.data(), src_bytes);
    dev_->copy_to_device(dst.get(), poison.data(), dst_bytes);

    dev_->copy_2d(*s, dst_ptr, dst_pitch, src.get(), src_pitch, width, height);
    s->synchronize();

    std::vector<unsigned char> expected = poison;
    for (size_t r = 0; r < height; ++r)
      for (size_t c = 0; c < width; ++c) expected[r * dst_pitch + c] = src_host[r * src_pitch + c];
    std::vector<unsigned char> got(dst_bytes);
    dev_->copy_to_host(got.data(), dst.get(), dst_bytes);
    ASSERT_EQ(got, expected) << "width " << width << " height " << height << " src_pitch " << src_pitch << " dst_pitch "
                             << dst_pitch << " exportable " << dst_exportable;
  }
}

TEST_F(HostDeviceTest, Copy2dBatchIsEveryCopyExactly) {
  uipc::testing::check_copy_2d_batch_is_every_copy_exactly(*dev_);
}

TEST_F(HostDeviceTest, Copy2dRejectsWidthAbovePitchAtTheCall) {
  auto s = stream();
  DeviceBuffer a = dev_->alloc(1024), b = dev_->alloc(1024);
  EXPECT_THROW(dev_->copy_2d(*s, a.get(), 16, b.get(), 64, 32, 4), RuntimeError);
  EXPECT_THROW(dev_->copy_2d(*s, a.get(), 64, b.get(), 16, 32, 4), RuntimeError);
  EXPECT_NO_THROW(s->synchronize());  // a rejected call does not fail the stream
}

TEST_F(HostDeviceTest, MemsetWritesExactlyItsRange) {
  uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto s = stream();
  constexpr size_t kBytes = 4096;
  DeviceBuffer buf = dev_->alloc(kBytes);
  std::vector<unsigned char> host(kBytes);
  for (auto& c : host) c = static_cast<unsigned char>(rng());
  dev_->copy_to_device(buf.get(), host.data(), kBytes);
  size_t off = rng() % kBytes;
  size_t len = rng() % (kBytes - off);
  int value = static_cast<int>(rng() % 256);
  dev_->memset(*s, buf.as<unsigned char>() + off, value, len);
  s->synchronize();
  std::fill(host.begin() + off, host.begin() + off + len, static_cast<unsigned char>(value));
  std::vector<unsigned char> got(kBytes);
  dev_->copy_to_host(got.data(), buf.get(), kBytes);
  EXPECT_EQ(got, host);
}

TEST_F(HostDeviceTest, ThrowingTaskFailsStreamAndSkipsLaterWork) {
  auto s = stream();
  auto other = stream();
  auto e = dev_->create_event();
  int before = 0, after = 0, other_ran = 0;
  host_stream(*s).enqueue([&] { ++before; });
  host_stream(*s).enqueue([] { throw InputError("boom from a task"); });
  host_stream(*s).enqueue([&] { ++after; });
  e->record(*s);
  dev_->stream_wait_event(*other, *e);
  host_stream(*other).enqueue([&] { ++other_ran; });

  for (int attempt = 0; attempt < 2; ++attempt) {  // the failure is sticky
    try {
      s->synchronize();
      ADD_FAILURE() << "synchronize did not rethrow the task's error";
    } catch (const InputError& err) {
      EXPECT_EQ(err.exit_code(), kExitBadInput);
      EXPECT_NE(std::string(err.what()).find("boom from a task"), std::string::npos);
    }
  }
  EXPECT_EQ(before, 1);
  EXPECT_EQ(after, 0);
  // The skipped record is not a success: the event reports the failure, and a stream
  // that waits on it fails with the same error instead of running on.
  EXPECT_THROW(e->query(), InputError);
  EXPECT_THROW(e->synchronize(), InputError);
  EXPECT_THROW(dev_->elapsed_ms(*e, *e), RuntimeError);
  EXPECT_THROW(other->synchronize(), InputError);
  EXPECT_EQ(other_ran, 0);
}

TEST_F(HostDeviceTest, NonProjectExceptionsBecomeRuntimeErrors) {
  auto s = stream();
  host_stream(*s).enqueue([] { throw std::logic_error("plain std exception"); });
  try {
    s->synchronize();
    ADD_FAILURE() << "synchronize did not throw";
  } catch (const RuntimeError& err) {
    EXPECT_EQ(err.exit_code(), kExitRuntime);
    EXPECT_NE(std::string(err.what()).find("plain std exception"), std::string::npos);
  }
}

TEST_F(HostDeviceTest, SynchronizeOfAStuckStreamIsBounded) {
  dev_->set_watchdog_seconds(0.3);
  Gate gate;  // outlives the stream that runs its task
  auto s = stream();
  host_stream(*s).enqueue(gate.task());
  host_stream(*s).enqueue([] {});
  auto t0 = Clock::now();
  try {
    s->synchronize();
    ADD_FAILURE() << "synchronize of a stuck stream returned";
  } catch (const PeerTimeout& err) {
    EXPECT_EQ(err.exit_code(), kExitPeerTimeout);
    EXPECT_NE(std::string(err.what()).find("did not drain"), std::string::npos) << err.what();
  }
  double waited = seconds_since(t0);
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 3.0);
  gate.release();
  EXPECT_NO_THROW(s->synchronize());
}

TEST_F(HostDeviceTest, DestroyingAStreamWithStuckWorkIsBounded) {
  DeviceBuffer word = dev_->alloc(sizeof(uint64_t));
  // Drained: the stuck wait runs into its own watchdog, then the stream goes.
  dev_->set_watchdog_seconds(0.3);
  auto t0 = Clock::now();
  {
    auto s = stream();
    dev_->wait_value64_geq(*s, word.as<uint64_t>(), 1, WaitLabel{1, "never written"});
    host_stream(*s).enqueue([] {});
  }
  EXPECT_LT(seconds_since(t0), 3.0);
  // During unwinding pending work is cancelled rather than drained: an error exit does
  // not wait out a 30 s watchdog.
  dev_->set_watchdog_seconds(30.0);
  t0 = Clock::now();
  try {
    auto s = stream();
    dev_->wait_value64_geq(*s, word.as<uint64_t>(), 1, WaitLabel{1, "never written"});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the wait go to sleep
    throw InputError("unwinding");
  } catch (const InputError&) {
  }
  EXPECT_LT(seconds_since(t0), 3.0);
}

// A kernel is work that ends by itself: however long a CPU takes over a full-size layer,
// host waits count it as progress. (Issue #24: a host GEMM that ran past the watchdog
// made synchronize() throw while it still wrote into buffers that the unwinding then
// freed: a segfault.)
TEST_F(HostDeviceTest, AKernelThatOutlivesTheWatchdogIsProgressNotAStuckStream) {
  constexpr double kWatchdog = 0.2;
  dev_->set_watchdog_seconds(kWatchdog);
  auto a = stream();
  auto b = stream();
  std::atomic<int> done{0};
  host_stream(*a).enqueue_kernel("long kernel", [&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // 6 watchdogs
    done.fetch_add(1);
  });
  auto e = dev_->create_event();
  e->record(*a);
  dev_->stream_wait_event(*b, *e);
  host_stream(*b).enqueue([&done] { done.fetch_add(10); });
  EXPECT_NO_THROW(a->synchronize());
  EXPECT_NO_THROW(b->synchronize());
  EXPECT_NO_THROW(e->synchronize());
  EXPECT_EQ(done.load(), 11);
}

// An error that unwinds past a buffer while a kernel on a stream still writes into it
// must stay an error: the memory stays mapped until the process ends, never unmapped
// under the kernel.
TEST_F(HostDeviceTest, AnErrorUnwindingPastBuffersInUseDoesNotUnmapThem) {
  dev_->set_watchdog_seconds(0.2);
  auto s = stream();
  std::atomic<bool> wrote{false};
  Gate gate;  // outlives the stream's tasks
  try {
    DeviceBuffer buf = dev_->alloc(1 << 20, true);  // shm: a freed mapping would fault
    auto* p = buf.as<unsigned char>();
    host_stream(*s).enqueue(gate.task());  // a task that never moves: synchronize times out
    host_stream(*s).enqueue_kernel("late writer", [p, &wrote] {
      std::memset(p, 0x5a, 1 << 20);
      wrote.store(true);
    });
    try {
      s->synchronize();
    } catch (const PeerTimeout&) {
      gate.release();  // the kernel now runs while `buf` goes out of scope
      throw;
    }
    ADD_FAILURE() << "synchronize of a stuck stream returned";
  } catch (const PeerTimeout& err) {
    EXPECT_NE(std::string(err.what()).find("did not drain"), std::string::npos) << err.what();
  }
  EXPECT_NO_THROW(s->synchronize());
  EXPECT_TRUE(wrote.load());
  EXPECT_TRUE(own_shm_entries().empty());  // kept mapped, but its name is gone
}

// --- reach of copies: every byte a copy touches lies in the buffer its pointer is in

template <typename F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.exit_code(), kExitRuntime);
    return e.what();
  }
  ADD_FAILURE() << "no RuntimeError";
  return "";
}

TEST_F(HostDeviceTest, ACopyPastItsDestinationOrSourceIsANamedError) {
  auto s = stream();
  DeviceBuffer small = dev_->alloc(64 * 10);
  DeviceBuffer big = dev_->alloc(64 * 100);
  // 11 rows of 64 bytes, pitch 64, into a 640-byte buffer: one row too many.
  std::string what = runtime_error_of([&] { dev_->copy_2d(*s, small.get(), 64, big.get(), 64, 64, 11); });
  EXPECT_NE(what.find("copy_2d: the destination reaches 704 bytes from offset 0 of a buffer of 640 bytes"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("11 rows of 64 bytes, pitch 64"), std::string::npos) << what;
  // The same from an offset inside the buffer, and with a pitch wider than the width.
  what = runtime_error_of([&] {
    dev_->copy_2d(*s, big.get(), 64, static_cast<unsigned char*>(small.get()) + 128, 128, 64, 5);
  });
  EXPECT_NE(what.find("copy_2d: the source reaches 576 bytes from offset 128 of a buffer of 640 bytes"),
            std::string::npos)
      << what;
  // Exactly to the end is fine, and so is the batch form; one byte more is not.
  EXPECT_NO_THROW(dev_->copy_2d(*s, small.get(), 64, big.get(), 128, 64, 10));
  std::vector<Copy2DOp> ops{{small.get(), 64, big.get(), 64, 64, 10}, {big.get(), 128, small.get(), 65, 65, 10}};
  what = runtime_error_of([&] { dev_->copy_2d_batch(*s, ops); });
  EXPECT_NE(what.find("copy_2d: the source reaches 650 bytes"), std::string::npos) << what;
  EXPECT_NE(runtime_error_of([&] { dev_->memset(*s, small.get(), 0, 641); }).find("memset: the destination"),
            std::string::npos);
  std::vector<unsigned char> host(1024);
  EXPECT_NE(runtime_error_of([&] { dev_->copy_to_host(host.data(), small.get(), 641); })
                .find("synchronous copy: the source reaches 641 bytes"),
            std::string::npos);
  EXPECT_NO_THROW(s->synchronize());
}

// The spans are formed in 64 bits, and a span that does not fit is an error, not a
// wrapped small number; memory the device layer did not hand out is not checked; every
// region is forgotten when its memory goes.
TEST_F(HostDeviceTest, ReachSpansAreSixtyFourBitAndRegionsComeAndGo) {
  const size_t before = recorded_region_count();
  EXPECT_EQ(span_2d("op", "view", 3, size_t{1} << 40, 8), (size_t{2} << 40) + 8);
  EXPECT_EQ(span_2d("op", "view", 0, 64, 8), 0u);
  EXPECT_NE(runtime_error_of([] { span_2d("op", "view", SIZE_MAX / 2, 4, 1); }).find("overflows a 64-bit byte count"),
            std::string::npos);
  EXPECT_NE(runtime_error_of([] { span_bytes("op", "view", SIZE_MAX / 2, 4); }).find("overflows a 64-bit byte count"),
            std::string::npos);
  auto s = stream();
  {
    DeviceBuffer empty = dev_->alloc(0);
    DeviceBuffer buf = dev_->alloc(256);
    EXPECT_EQ(recorded_region_count(), before + 2);
    std::string what = runtime_error_of([&] { dev_->copy_2d(*s, empty.get(), 1, buf.get(), 1, 1, 1); });
    EXPECT_NE(what.find("reaches 1 bytes from offset 0 of a buffer of 0 bytes"), std::string::npos) << what;
    // Rows whose pitch times count wraps size_t: an error, whichever way it would wrap.
    what = runtime_error_of([&] { dev_->copy_2d(*s, buf.get(), SIZE_MAX / 2, buf.get(), 16, 16, 3); });
    EXPECT_NE(what.find("overflows a 64-bit byte count"), std::string::npos) << what;
    // Host memory of the caller is not the device layer's to check.
    std::vector<unsigned char> host(64);
    EXPECT_NO_THROW(dev_->copy_2d(*s, host.data(), 64, buf.get(), 64, 64, 1));
    s->synchronize();
  }
  EXPECT_EQ(recorded_region_count(), before);
}

TEST_F(HostDeviceTest, ACopyPastAPeerMappingIsANamedError) {
  auto s = stream();
  DeviceBuffer exported = dev_->alloc(4096, true);
  DeviceBuffer src = dev_->alloc(8192);
  PeerMapping peer = dev_->open_handle(dev_->export_handle(exported), 4096);
  // A pitched copy into the mapping whose last row runs 64 bytes past it.
  std::string what = runtime_error_of([&] { dev_->copy_2d(*s, peer.get(), 256, src.get(), 256, 128, 17); });
  EXPECT_NE(what.find("copy_2d: the destination reaches 4224 bytes from offset 0 of a peer mapping (IPC handle) of "
                      "4096 bytes"),
            std::string::npos)
      << what;
  EXPECT_NO_THROW(dev_->copy_2d(*s, peer.get(), 256, src.get(), 256, 256, 16));
  EXPECT_NO_THROW(s->synchronize());
  // The same bytes through an imported descriptor.
  DeviceBuffer shared = dev_->alloc_fd_shareable(4096);
  PeerMapping imported = dev_->import_fd(dev_->export_fd(shared), 2048);
  what = runtime_error_of([&] { dev_->copy_2d(*s, src.get(), 4096, imported.get(), 4096, 4096, 1); });
  EXPECT_NE(what.find("the source reaches 4096 bytes from offset 0 of a peer mapping (descriptor) of 2048 bytes"),
            std::string::npos)
      << what;
  EXPECT_NO_THROW(s->synchronize());
}

// --- events

TEST_F(HostDeviceTest, EventElapsedCoversASleepingTask) {
  auto s = stream();
  auto start = dev_->create_event();
  auto end = dev_->create_event();
  start->record(*s);
  host_stream(*s).enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  end->record(*s);
  end->synchronize();
  EXPECT_TRUE(start->query());
  EXPECT_TRUE(end->query());
  double ms = dev_->elapsed_ms(*start, *end);
  EXPECT_GE(ms, 20.0);
  EXPECT_LT(ms, 5000.0);
}

TEST_F(HostDeviceTest, EventsNotCompleteCannotBeTimed) {
  Gate gate;
  auto s = stream();
  auto start = dev_->create_event();
  auto end = dev_->create_event();
  auto never = dev_->create_event();
  EXPECT_TRUE(never->query());  // never recorded: nothing to wait for
  EXPECT_NO_THROW(never->synchronize());
  start->record(*s);
  host_stream(*s).enqueue(gate.task());
  end->record(*s);
  start->synchronize();
  EXPECT_FALSE(end->query());
  EXPECT_THROW(dev_->elapsed_ms(*start, *end), RuntimeError);
  EXPECT_THROW(dev_->elapsed_ms(*start, *never), RuntimeError);
  gate.release();
  end->synchronize();
  EXPECT_GE(dev_->elapsed_ms(*start, *end), 0.0);
}

// `e`, recorded on one stream behind a 50 ms task and waited on by another, orders the
// other's next task after it (`also`: recorded right after `e`, on the same stream).
void expect_the_wait_orders(Device& dev, Stream& producer, Stream& consumer, Event& e, Event* also = nullptr) {
  std::atomic<int> produced{0};
  int observed = -1;
  host_stream(producer).enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    produced.store(1);
  });
  e.record(producer);
  if (also) also->record(producer);
  dev.stream_wait_event(consumer, e);
  host_stream(consumer).enqueue([&] { observed = produced.load(); });
  consumer.synchronize();
  EXPECT_EQ(observed, 1);
}

TEST_F(HostDeviceTest, StreamWaitEventOrdersWorkAcrossStreams) {
  auto producer = stream();
  auto consumer = stream();
  auto e = dev_->create_event();
  expect_the_wait_orders(*dev_, *producer, *consumer, *e);
}

TEST_F(HostDeviceTest, AnOrderingEventJoinsStreamsButIsNeverRead) {
  auto producer = stream();
  auto consumer = stream();
  auto e = dev_->create_event(EventUse::kOrdering);
  auto timed = dev_->create_event();
  EXPECT_EQ(e->use(), EventUse::kOrdering);
  EXPECT_EQ(timed->use(), EventUse::kTimed);
  expect_the_wait_orders(*dev_, *producer, *consumer, *e, timed.get());
  // The consumer saw `e` complete, not `timed`, recorded after it: the producer may not
  // have reached it yet (a race this test had on a loaded CI machine).
  timed->synchronize();
  // Never timed, queried or synchronized: each is a named error, on every device.
  const std::string named = "an ordering event (EventUse::kOrdering) only joins streams";
  auto expect_refused = [&](const std::function<void()>& read, const char* what) {
    try {
      read();
      ADD_FAILURE() << what << " of an ordering event was accepted";
    } catch (const RuntimeError& err) {
      EXPECT_NE(std::string(err.what()).find(named), std::string::npos) << err.what();
    }
  };
  expect_refused([&] { (void)e->query(); }, "query");
  expect_refused([&] { e->synchronize(); }, "synchronize");
  expect_refused([&] { (void)dev_->elapsed_ms(*timed, *e); }, "elapsed_ms");
  expect_refused([&] { (void)dev_->elapsed_ms(*e, *timed); }, "elapsed_ms");
  EXPECT_GE(dev_->elapsed_ms(*timed, *timed), 0.0);
}

TEST_F(HostDeviceTest, StreamWaitEventWaitsForTheRecordAtCallTime) {
  Gate gate;
  auto a = stream();
  auto b = stream();
  auto c = stream();
  auto e = dev_->create_event();
  std::atomic<bool> b_ran{false};
  host_stream(*a).enqueue(gate.task());
  e->record(*a);
  dev_->stream_wait_event(*b, *e);
  host_stream(*b).enqueue([&] { b_ran.store(true); });
  // Re-recording on an idle stream completes the event, but b waits for the record it saw.
  e->record(*c);
  c->synchronize();
  EXPECT_TRUE(e->query());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(b_ran.load());
  gate.release();
  b->synchronize();
  EXPECT_TRUE(b_ran.load());
}

TEST_F(HostDeviceTest, WaitsRunOutOnlyWhenWhatTheyWaitOnStopsMoving) {
  dev_->set_watchdog_seconds(0.3);
  {
    // A queue that keeps moving for three watchdogs is not stuck.
    auto a = stream();
    auto b = stream();
    auto e = dev_->create_event();
    for (int i = 0; i < 9; ++i)
      host_stream(*a).enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
    e->record(*a);
    dev_->stream_wait_event(*b, *e);
    EXPECT_NO_THROW(b->synchronize());
    EXPECT_NO_THROW(e->synchronize());
    EXPECT_NO_THROW(a->synchronize());
  }
  {
    // A stream stuck in a task that never ends makes its waiters time out.
    Gate gate;
    auto a = stream();
    auto b = stream();
    auto e = dev_->create_event();
    host_stream(*a).enqueue(gate.task());
    e->record(*a);
    dev_->stream_wait_event(*b, *e);
    auto t0 = Clock::now();
    try {
      b->synchronize();
      ADD_FAILURE() << "a wait on a stuck stream's event returned";
    } catch (const PeerTimeout& err) {
      EXPECT_NE(std::string(err.what()).find("stopped making progress"), std::string::npos) << err.what();
    }
    EXPECT_LT(seconds_since(t0), 3.0);
    EXPECT_THROW(e->synchronize(), PeerTimeout);
    gate.release();
    EXPECT_NO_THROW(a->synchronize());
  }
}

// --- epoch words

TEST_F(HostDeviceTest, UnsatisfiedWaitValueTimesOutWithoutBurningACore) {
  constexpr double kWatchdog = 0.5;
  dev_->set_watchdog_seconds(kWatchdog);
  auto s = stream();
  DeviceBuffer word = dev_->alloc(sizeof(uint64_t), true);
  dev_->wait_value64_geq(*s, word.as<uint64_t>(), 1, WaitLabel{3, "ready epoch of group 7 (tags V,Q,K)"});
  auto t0 = Clock::now();
  double cpu0 = process_cpu_seconds();
  try {
    s->synchronize();
    ADD_FAILURE() << "an unsatisfied wait did not time out";
  } catch (const PeerTimeout& err) {
    std::string what = err.what();
    EXPECT_EQ(err.exit_code(), kExitPeerTimeout);
    EXPECT_NE(what.find("rank " + std::to_string(world_rank()) + ":"), std::string::npos) << what;
    EXPECT_NE(what.find("peer 3 did not arrive"), std::string::npos) << what;
    EXPECT_NE(what.find("ready epoch of group 7 (tags V,Q,K)"), std::string::npos) << what;
    EXPECT_NE(what.find("word holds 0, needs >= 1"), std::string::npos) << what;
  }
  double waited = seconds_since(t0);
  double cpu = process_cpu_seconds() - cpu0;
  EXPECT_GE(waited, 0.9 * kWatchdog);
  EXPECT_LT(waited, kWatchdog + 2.0);
  // A spinning waiter would use about the whole wait in CPU time.
  EXPECT_LT(cpu, 0.4 * waited) << "the wait used " << cpu << " s of CPU in " << waited << " s";
}

TEST_F(HostDeviceTest, WaitValueReleasesWhenWrittenAndSeesEarlierCopies) {
  uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  dev_->set_watchdog_seconds(10.0);
  auto writer = stream();
  auto reader = stream();
  constexpr size_t kBytes = 1 << 16;
  DeviceBuffer src = dev_->alloc(kBytes), dst = dev_->alloc(kBytes), word = dev_->alloc(64);
  std::vector<unsigned char> data(kBytes);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  dev_->copy_to_device(src.get(), data.data(), kBytes);
  std::vector<unsigned char> seen(kBytes, 0);

  // The wait must not pass on a smaller value (4) and must pass on the target (5).
  uint64_t* w = word.as<uint64_t>();
  auto t0 = Clock::now();  // before the writer's sleep can start
  double cpu0 = process_cpu_seconds();
  dev_->wait_value64_geq(*reader, w, 5, WaitLabel{0, "test epoch"});
  host_stream(*reader).enqueue([&] { std::memcpy(seen.data(), dst.get(), kBytes); });
  dev_->write_value64(*writer, w, 4);
  host_stream(*writer).enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  dev_->copy_2d(*writer, dst.get(), kBytes, src.get(), kBytes, kBytes, 1);
  dev_->write_value64(*writer, w, 5);
  reader->synchronize();
  double waited = seconds_since(t0);
  double cpu = process_cpu_seconds() - cpu0;
  writer->synchronize();
  EXPECT_EQ(seen, data);
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 5.0);
  EXPECT_LT(cpu, 0.4 * waited) << "the wait used " << cpu << " s of CPU in " << waited << " s";
}

TEST_F(HostDeviceTest, WordAddressesMustBeAligned) {
  auto s = stream();
  DeviceBuffer buf = dev_->alloc(64);
  auto* misaligned = reinterpret_cast<uint64_t*>(buf.as<unsigned char>() + 4);
  EXPECT_THROW(dev_->write_value64(*s, misaligned, 1), RuntimeError);
  EXPECT_THROW(dev_->wait_value64_geq(*s, misaligned, 1, WaitLabel{}), RuntimeError);
  EXPECT_NO_THROW(s->synchronize());
}

// --- shared memory names

TEST_F(HostDeviceTest, ExportableBufferFreedWithoutSealLeavesNothing) {
  ASSERT_TRUE(own_shm_entries().empty());
  {
    DeviceBuffer sealed_by_virtual = dev_->alloc(64, true);
    dev_->seal_export(sealed_by_virtual);
    ASSERT_TRUE(own_shm_entries().empty());
    DeviceBuffer buf = dev_->alloc(12345, true);
    auto entries = own_shm_entries();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].rfind(std::string(host_shm_prefix()).substr(1), 0), 0u);
    PeerMapping self = dev_->open_handle(dev_->export_handle(buf), buf.bytes());
  }
  EXPECT_TRUE(own_shm_entries().empty());
}

TEST_F(HostDeviceTest, SealDropsTheNameButMappingsStayValid) {
  uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  DeviceBuffer buf = dev_->alloc(4096, true);
  IpcHandle h = dev_->export_handle(buf);
  PeerMapping map = dev_->open_handle(h, 4096);
  ASSERT_EQ(own_shm_entries().size(), 1u);
  seal_export(*dev_, buf);
  EXPECT_TRUE(own_shm_entries().empty());
  EXPECT_NO_THROW(seal_export(*dev_, buf));  // idempotent
  EXPECT_NO_THROW(dev_->seal_export(buf));   // the virtual of Device is the same operation
  std::vector<unsigned char> data(4096), back(4096);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  dev_->copy_to_device(buf.get(), data.data(), data.size());
  dev_->copy_to_host(back.data(), map.get(), back.size());
  EXPECT_EQ(back, data);
  EXPECT_THROW(dev_->open_handle(h, 4096), RuntimeError);  // nobody can join any more
  EXPECT_THROW(dev_->export_handle(buf), RuntimeError);
  DeviceBuffer plain = dev_->alloc(64);
  EXPECT_THROW(seal_export(*dev_, plain), RuntimeError);
  EXPECT_THROW(dev_->export_handle(plain), RuntimeError);
}

TEST_F(HostDeviceTest, OpenHandleRejectsOversizedRequests) {
  DeviceBuffer buf = dev_->alloc(1000, true);
  EXPECT_THROW(dev_->open_handle(dev_->export_handle(buf), 1001), RuntimeError);
  IpcHandle junk;
  EXPECT_THROW(dev_->open_handle(junk, 8), RuntimeError);
}

// --- descriptor-shared memory (the vmm path's host analog)

int open_fd_count() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// memfd memory: zeroed, named nowhere, shared through descriptors both ways, alive as
// long as any descriptor or mapping is, and every descriptor handed in is closed.
TEST_F(HostDeviceTest, FdShareableMemoryTravelsAsDescriptorsAndNamesNothing) {
  EXPECT_EQ(dev_->vmm_ineligible_reason(), "");
  std::mt19937_64 rng(fresh_seed());
  const int fds_before = open_fd_count();
  {
    const size_t bytes = 5000;
    DeviceBuffer buf = dev_->alloc_fd_shareable(bytes);
    ASSERT_TRUE(buf);
    EXPECT_EQ(buf.bytes(), bytes);
    EXPECT_TRUE(own_shm_entries().empty()) << "a descriptor-shared buffer must not appear in /dev/shm";
    std::vector<unsigned char> data(bytes), back(bytes);
    dev_->copy_to_host(back.data(), buf.get(), bytes);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](unsigned char c) { return c == 0; }));

    const int fd = dev_->export_fd(buf);
    ASSERT_GE(fd, 0);
    char link[256] = {0};
    ASSERT_GT(readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1), 0);
    EXPECT_EQ(std::string(link).rfind("/memfd:", 0), 0u) << link;
    PeerMapping map = dev_->import_fd(fd, bytes);
    EXPECT_FALSE(fd_is_open(fd)) << "import_fd takes ownership of the descriptor";
    ASSERT_NE(map.get(), buf.get());
    for (auto& c : data) c = static_cast<unsigned char>(rng());
    dev_->copy_to_device(buf.get(), data.data(), bytes);
    dev_->copy_to_host(back.data(), map.get(), bytes);
    EXPECT_EQ(back, data);
    for (auto& c : data) c = static_cast<unsigned char>(rng());
    dev_->copy_to_device(map.get(), data.data(), bytes);
    dev_->copy_to_host(back.data(), buf.get(), bytes);
    EXPECT_EQ(back, data);

    // A descriptor in flight keeps the memory after its exporter freed the buffer.
    const int in_flight = dev_->export_fd(buf);
    const int too_small = dev_->export_fd(buf);
    buf.reset();
    PeerMapping late = dev_->import_fd(in_flight, bytes);
    dev_->copy_to_host(back.data(), late.get(), bytes);
    EXPECT_EQ(back, data);
    EXPECT_THROW(dev_->import_fd(too_small, bytes + (size_t(1) << 20)), RuntimeError);
    EXPECT_FALSE(fd_is_open(too_small)) << "a failed import_fd closes the descriptor too";

    DeviceBuffer plain = dev_->alloc(64), named = dev_->alloc(64, true);
    EXPECT_THROW(dev_->export_fd(plain), RuntimeError);
    EXPECT_THROW(dev_->export_fd(named), RuntimeError);
    DeviceBuffer fdbuf = dev_->alloc_fd_shareable(64);
    EXPECT_THROW(dev_->export_handle(fdbuf), RuntimeError);
    EXPECT_NO_THROW(dev_->seal_export(fdbuf));  // nothing to seal
  }
  EXPECT_EQ(open_fd_count(), fds_before) << "a descriptor leaked";
  EXPECT_TRUE(own_shm_entries().empty());
}

TEST_F(HostDeviceTest, UnlinkAllRemovesUnsealedNames) {
  DeviceBuffer a = dev_->alloc(100, true), b = dev_->alloc(200, true), c = dev_->alloc(300, true);
  seal_export(*dev_, b);
  ASSERT_EQ(own_shm_entries().size(), 2u);
  host_unlink_all_shm();
  EXPECT_TRUE(own_shm_entries().empty());
  // The buffers themselves live on until freed.
  std::vector<unsigned char> ones(100, 1), back(100, 0);
  dev_->copy_to_device(a.get(), ones.data(), 100);
  dev_->copy_to_host(back.data(), a.get(), 100);
  EXPECT_EQ(back, ones);
  a.reset();
  b.reset();
  c.reset();
  // Freed slots are reused and their names tracked again.
  DeviceBuffer d = dev_->alloc(64, true);
  EXPECT_EQ(own_shm_entries().size(), 1u);
  host_unlink_all_shm();
  EXPECT_TRUE(own_shm_entries().empty());
}

// --- cross-process: every rank scatters into every peer's exported buffer

// The byte that rank `src` sends to rank `dst` at row r, column c in round `round`.
unsigned char payload(uint64_t seed, int round, int src, int dst, size_t r, size_t c) {
  uint64_t stream =
      (static_cast<uint64_t>(round) << 40) ^ (static_cast<uint64_t>(src) << 20) ^ static_cast<uint64_t>(dst);
  return static_cast<unsigned char>(splitmix64(splitmix64(seed ^ stream) + r * 1000003ull + c) >> 56);
}

TEST_F(HostDeviceTest, ScatterIntoPeerBuffersAcrossProcesses) {
  const int rank = world_rank();
  const int nranks = world_size();
  dev_->set_watchdog_seconds(30.0);

  // Shape and seed agreed by all ranks, fresh each run.
  uint64_t params[5] = {fresh_seed(), 0, 0, 0, 0};
  std::mt19937_64 rng(params[0]);
  params[1] = 1 + rng() % 300;              // width in bytes
  params[2] = 1 + rng() % 40;               // rows
  params[3] = params[1] + rng() % 100;      // destination pitch
  params[4] = params[1] + 1 + rng() % 100;  // source pitch (strided source)
  MPI_Bcast(params, 5, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  const uint64_t seed = params[0];
  const size_t width = params[1], height = params[2], dst_pitch = params[3], src_pitch = params[4];
  SCOPED_TRACE("seed " + std::to_string(seed));

  // Own buffer: one 64-byte epoch slot per peer, then one block per source rank.
  const size_t slot_bytes = 64;
  const size_t data_offset = slot_bytes * static_cast<size_t>(nranks);
  const size_t block_bytes = dst_pitch * height;
  const size_t total = data_offset + block_bytes * static_cast<size_t>(nranks);
  DeviceBuffer own = dev_->alloc(total, true);
  std::vector<unsigned char> poison(block_bytes * nranks, 0xA5);
  dev_->copy_to_device(own.as<unsigned char>() + data_offset, poison.data(), poison.size());

  IpcHandle mine = dev_->export_handle(own);
  std::vector<IpcHandle> handles(nranks);
  MPI_Allgather(mine.bytes.data(), sizeof(mine.bytes), MPI_BYTE, handles.data(), sizeof(mine.bytes), MPI_BYTE,
                MPI_COMM_WORLD);
  long pid = static_cast<long>(getpid());
  std::vector<long> pids(nranks);
  MPI_Allgather(&pid, 1, MPI_LONG, pids.data(), 1, MPI_LONG, MPI_COMM_WORLD);
  auto leftovers = [&] {
    size_t n = 0;
    for (long p : pids) n += shm_entries(host_shm_process_prefix(p)).size();
    return n;
  };

  std::vector<PeerMapping> peers(nranks);
  for (int q = 0; q < nranks; ++q) peers[q] = dev_->open_handle(handles[q], total);
  MPI_Barrier(MPI_COMM_WORLD);  // everyone has opened everyone: drop the names
  seal_export(*dev_, own);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(leftovers(), 0u) << "names left in /dev/shm after every rank sealed";

  auto copy_stream = dev_->create_stream(StreamPriority::kHigh);
  auto wait_stream = dev_->create_stream(StreamPriority::kNormal);
  for (int round = 1; round <= 2; ++round) {
    // Strided sources, one per destination; the gap bytes must never arrive anywhere.
    std::vector<DeviceBuffer> sources;
    for (int q = 0; q < nranks; ++q) {
      std::vector<unsigned char> host(src_pitch * height);
      for (auto& c : host) c = static_cast<unsigned char>(rng());
      for (size_t r = 0; r < height; ++r)
        for (size_t c = 0; c < width; ++c) host[r * src_pitch + c] = payload(seed, round, rank, q, r, c);
      sources.push_back(dev_->alloc(host.size()));
      dev_->copy_to_device(sources.back().get(), host.data(), host.size());
    }
    for (int q = 0; q < nranks; ++q) {
      auto* base = static_cast<unsigned char*>(peers[q].get());
      dev_->copy_2d(*copy_stream, base + data_offset + block_bytes * rank, dst_pitch, sources[q].get(), src_pitch,
                    width, height);
      dev_->write_value64(*copy_stream, reinterpret_cast<uint64_t*>(base + slot_bytes * rank), round);
    }
    for (int q = 0; q < nranks; ++q) {
      dev_->wait_value64_geq(*wait_stream, reinterpret_cast<const uint64_t*>(own.as<unsigned char>() + slot_bytes * q),
                             round, WaitLabel{q, "test block of round " + std::to_string(round)});
    }
    EXPECT_NO_THROW(wait_stream->synchronize());
    EXPECT_NO_THROW(copy_stream->synchronize());

    std::vector<unsigned char> expected = poison;
    for (int src = 0; src < nranks; ++src)
      for (size_t r = 0; r < height; ++r)
        for (size_t c = 0; c < width; ++c)
          expected[block_bytes * src + r * dst_pitch + c] = payload(seed, round, src, rank, r, c);
    std::vector<unsigned char> got(expected.size());
    dev_->copy_to_host(got.data(), own.as<unsigned char>() + data_offset, got.size());
    EXPECT_EQ(got, expected) << "round " << round << ": width " << width << " height " << height << " dst_pitch "
                             << dst_pitch << " src_pitch " << src_pitch;
    // Nobody writes the next round into a buffer its owner is still checking.
    MPI_Barrier(MPI_COMM_WORLD);
  }

  copy_stream.reset();
  wait_stream.reset();
  for (auto& m : peers) m.reset();
  MPI_Barrier(MPI_COMM_WORLD);  // no peer maps our buffer any more
  own.reset();
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(leftovers(), 0u) << "names left in /dev/shm after the exchange";
}

}  // namespace
}  // namespace uipc
