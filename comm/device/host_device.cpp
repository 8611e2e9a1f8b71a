// The host (simulation-mode) device: "device memory" is process memory, POSIX shared
// memory (IPC-handle path) or memfd (file-descriptor path), every stream is an in-order queue served by its own worker thread, events are
// completion records with steady_clock times, and the epoch words are 64-bit atomics in
// shared memory whose waiters sleep on a futex. The transport protocols run unchanged on
// top of it, so CI exercises them on the CPU.
#include "comm/device/host_device.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <fstream>
#include <mutex>
#include <utility>
#include <sstream>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "comm/device/memory_reach.hpp"

namespace uipc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kHostAlignment = 64;
// Longest sleep of a waiting task between checks of its deadline and of cancellation;
// a futex or condition-variable wake ends it earlier.
constexpr auto kPollSlice = std::chrono::milliseconds(20);
// Loads of an epoch word before a waiter goes to sleep: a write that is already on its
// way costs no system call, and a wait that is not costs next to no CPU.
constexpr int kSpinLoads = 128;

std::string format_seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g s", s);
  return text;
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// Watchdog seconds as a clock duration; clamped so that now() + bound cannot overflow.
Clock::duration to_duration(double seconds) {
  double s = std::min(std::max(seconds, 0.0), 1e7);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Host-side waits (synchronize, destruction) get a margin over the watchdog, so that a
// stuck wait task reports its own, more precise PeerTimeout first.
Clock::duration host_wait_bound(double watchdog_s) {
  return to_duration(watchdog_s + std::max(0.25, 0.05 * watchdog_s));
}

// ---------------------------------------------------------------------------------------
// Registry of the shared-memory names this process created and has not unlinked yet.
// host_unlink_all_shm() walks it from signal handlers, so it is a fixed array guarded by
// one atomic state per slot: no allocation, no locks. Only the owner of a slot frees it;
// the cleanup path only borrows a live slot (kLive -> kUnlinking -> kLive) while it
// unlinks, so a slot is never reused under its feet.

constexpr int kMaxShmNames = 1024;
constexpr size_t kShmNameMax = 64;

enum SlotState : int { kSlotFree = 0, kSlotReserved = 1, kSlotLive = 2, kSlotUnlinking = 3 };

struct ShmRegistry {
  std::atomic<int> state[kMaxShmNames];
  char names[kMaxShmNames][kShmNameMax];
};

// Zero-initialised static storage: every slot starts free, before any constructor runs.
ShmRegistry g_registry;
static_assert(std::atomic<int>::is_always_lock_free, "the registry must be usable from signal handlers");

// Returns the slot now holding `name`, or -1 when the registry is full.
int registry_add(const char* name) {
  for (int i = 0; i < kMaxShmNames; ++i) {
    int expected = kSlotFree;
    if (g_registry.state[i].compare_exchange_strong(expected, kSlotReserved, std::memory_order_acquire)) {
      std::snprintf(g_registry.names[i], kShmNameMax, "%s", name);
      g_registry.state[i].store(kSlotLive, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

// Frees the owner's slot once its name is unlinked. Waits out a concurrent cleanup pass
// that is borrowing the slot (a handler on this thread finishes before we resume).
void registry_remove(int slot) {
  if (slot < 0) return;
  for (;;) {
    int expected = kSlotLive;
    if (g_registry.state[slot].compare_exchange_weak(expected, kSlotFree, std::memory_order_acq_rel)) return;
    if (expected != kSlotLive && expected != kSlotUnlinking) return;  // not ours any more: nothing to do
    if (expected == kSlotUnlinking) std::this_thread::yield();
  }
}

// Unlinks a name and forgets it; ENOENT (already unlinked by a cleanup pass) is fine.
void unlink_owned_name(const char* name, int slot) {
  shm_unlink(name);
  registry_remove(slot);
}

std::atomic<uint64_t> g_shm_counter{0};
std::once_flag g_atexit_once;

void unlink_all_at_exit() { host_unlink_all_shm(); }

// ---------------------------------------------------------------------------------------
// Exportable memory: one POSIX shared-memory segment per buffer.

constexpr uint64_t kShmSegmentMagic = 0x75697063'73686d31ull;  // "uipcshm1"

struct ShmSegment {
  uint64_t magic = kShmSegmentMagic;
  char name[kShmNameMax] = {0};
  size_t mapped_bytes = 0;
  int slot = -1;        // registry slot while the name exists
  bool sealed = false;  // name unlinked before the buffer was freed
};

// What an IpcHandle of the host device carries: a tag, the exported size, and the name.
struct HandleLayout {
  static constexpr size_t kMagicOffset = 0;
  static constexpr size_t kBytesOffset = 8;
  static constexpr size_t kNameOffset = 16;
  static constexpr size_t kNameCapacity = sizeof(IpcHandle::bytes) - kNameOffset;
};
constexpr uint64_t kHandleMagic = 0x75697063'68646c31ull;  // "uipchdl1"
static_assert(HandleLayout::kNameCapacity >= kShmNameMax, "an IpcHandle must hold a segment name");

// ---------------------------------------------------------------------------------------
// Descriptor-shared memory (the host analog of a CUDA VMM allocation with a POSIX-fd
// handle): an anonymous memfd, mapped shared. It has no name anywhere, so nothing can be
// left behind in /dev/shm, whatever way the process ends.

constexpr uint64_t kMemfdSegmentMagic = 0x75697063'6d666431ull;  // "uipcmfd1"

struct MemfdSegment {
  uint64_t magic = kMemfdSegmentMagic;
  int fd = -1;  // kept for export_fd (dup'ed per export); closed when the buffer goes
  size_t mapped_bytes = 0;
};

// Private memory of a device that leaves memory untouched (--mode model): anonymous
// pages mapped without reserving them, so a full-size layer costs no memory until (and
// unless) something writes it.
constexpr uint64_t kUntouchedSegmentMagic = 0x75697063'6c7a7931ull;  // "uipclzy1"

struct UntouchedSegment {
  uint64_t magic = kUntouchedSegmentMagic;
  size_t mapped_bytes = 0;
};

// Every segment kind starts with its magic (standard layout), so the kind of a
// buffer's impl can be told by reading the first word.
uint64_t segment_magic(const void* impl) { return *static_cast<const uint64_t*>(impl); }

// ---------------------------------------------------------------------------------------
// Epoch words: 64-bit atomics; sleepers use a shared (non-private) futex on the low half,
// which works across processes that map the same segment.

uint32_t* futex_word(const uint64_t* addr) {
  auto* word = reinterpret_cast<uint32_t*>(const_cast<uint64_t*>(addr));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return word + 1;
#else
  return word;
#endif
}

void futex_wake_all(const uint64_t* addr) {
  syscall(SYS_futex, futex_word(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps while the low half of *addr still equals `low`, at most `timeout`. Any result
// (woken, value changed, timed out, interrupted) sends the caller back to re-check.
void futex_wait(const uint64_t* addr, uint32_t low, Clock::duration timeout) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  if (ns <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  syscall(SYS_futex, futex_word(addr), FUTEX_WAIT, low, &ts, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void check_word_address(const void* addr, const char* op) {
  UIPC_CHECK(addr != nullptr, std::string(op) + ": null address");
  UIPC_CHECK(reinterpret_cast<uintptr_t>(addr) % alignof(uint64_t) == 0,
             std::string(op) + ": the 64-bit word must be 8-byte aligned");
}

// ---------------------------------------------------------------------------------------
// Streams.

// One unit of stream work. `skip` runs instead of `run` when the stream has failed or is
// being torn down, so that completion records can be marked failed rather than done.
// `bounded` marks work that ends by itself: kernels and copies (however long a CPU takes
// over a full-size layer), and the waits that end within their own watchdog (success or
// PeerTimeout). A host wait counts such a task as progress, so only a task that may never
// return (a plain enqueue) can run a host wait into its watchdog.
struct Task {
  std::function<void()> run;
  std::function<void(const std::exception_ptr&)> skip;
  const char* what = "host task";
  bool bounded = false;
};

// State shared by a stream and its worker thread; the worker keeps it alive, so a worker
// that must be abandoned (a user task that never returns) touches no freed memory.
struct StreamState {
  std::mutex mu;
  std::condition_variable work_cv;  // the worker waits for tasks or stop
  std::condition_variable idle_cv;  // hosts wait for progress, drain or exit
  std::deque<Task> queue;
  bool running = false;
  bool running_bounded = false;
  const char* running_what = "";
  bool stop = false;
  bool exited = false;
  uint64_t completed = 0;           // tasks finished or skipped: the progress the host waits on
  std::exception_ptr error;         // the first failure; the stream stays failed
  std::atomic<bool> cancel{false};  // set at teardown: pending tasks are skipped, waits end
  std::exception_ptr cancel_error;  // what skipped tasks report after cancellation
  std::string description;          // e.g. "stream 3 (high priority)"
};

void worker_loop(const std::shared_ptr<StreamState>& st) {
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    st->work_cv.wait(lk, [&] { return st->stop || !st->queue.empty(); });
    if (st->queue.empty()) break;  // stop requested and nothing left
    Task task = std::move(st->queue.front());
    st->queue.pop_front();
    st->running = true;
    st->running_bounded = task.bounded;
    st->running_what = task.what;
    std::exception_ptr skip_with = st->error;
    if (!skip_with && st->cancel.load(std::memory_order_acquire)) skip_with = st->cancel_error;
    lk.unlock();

    std::exception_ptr failure;
    if (skip_with) {
      try {
        if (task.skip) task.skip(skip_with);
      } catch (...) {
        // A skip hook only marks records; if it fails the stream is failed already.
      }
    } else {
      try {
        task.run();
      } catch (const Error&) {
        failure = std::current_exception();
      } catch (const std::exception& e) {
        // Keep the project's contract that every error carries an exit code.
        failure = std::make_exception_ptr(RuntimeError(std::string("host stream task failed: ") + e.what()));
      } catch (...) {
        failure = std::make_exception_ptr(RuntimeError("host stream task failed with a non-standard exception"));
      }
    }
    task = Task{};  // release the task's captures outside the lock

    lk.lock();
    if (failure && !st->error) st->error = failure;
    st->running = false;
    st->running_bounded = false;
    st->running_what = "";
    ++st->completed;
    st->idle_cv.notify_all();
  }
  st->exited = true;
  st->idle_cv.notify_all();
}

// Whether a stream is still moving (st.mu held): it completed a task since `seen` (which
// is updated), or it runs a wait that ends by itself. A long queue that keeps moving is
// legitimate; a stream that stops moving is stuck. Host waits renew their deadline only
// while what they wait on moves, so every wait stays bounded.
bool still_moving(const StreamState& st, uint64_t& seen) {
  bool moved = st.completed != seen || st.running_bounded;
  seen = st.completed;
  return moved;
}

bool still_moving_unlocked(StreamState& st, uint64_t& seen) {
  std::lock_guard<std::mutex> lk(st.mu);
  return still_moving(st, seen);
}

uint64_t completed_of(StreamState& st) {
  std::lock_guard<std::mutex> lk(st.mu);
  return st.completed;
}

// Waits (lock held) until pred() holds or the stream stops moving for `bound`.
template <typename Pred>
bool wait_with_progress(StreamState& st, std::unique_lock<std::mutex>& lk, Clock::duration bound, Pred pred) {
  uint64_t seen = st.completed;
  auto deadline = Clock::now() + bound;
  while (!pred()) {
    if (st.idle_cv.wait_until(lk, deadline) == std::cv_status::timeout && !pred()) {
      if (!still_moving(st, seen)) return false;
      deadline = Clock::now() + bound;
    }
  }
  return true;
}

class HostStreamImpl;
class HostEvent;

// A graph being captured on the host device: the op list, in issue order. Plain work
// (copies, memsets, kernels) is kept as its task and submitted again at each launch;
// event records, event waits and the 64-bit writes and waits are issued again through
// the device, so that each launch makes its own event records and takes its own values.
//
// The rules of a CUDA stream capture hold here too, so that simulation mode fails where
// a GPU would: a stream takes part only after it waited on an event recorded in the
// capture (the origin from the start), and every stream's work must join back into the
// origin (through events the origin, or a stream it joins, waits on) before the end.
struct HostCapture {
  enum class Kind { kTask, kRecord, kWaitEvent, kValue };
  struct Entry {
    Kind kind = Kind::kTask;
    HostStreamImpl* stream = nullptr;
    Task task;                  // kTask
    HostEvent* event = nullptr; // kRecord, kWaitEvent
    size_t value = 0;           // kValue: index into values
    // kWaitEvent on an event recorded in this capture: that record's stream and entry.
    const HostStreamImpl* joins = nullptr;
    size_t joins_entry = 0;
  };
  std::atomic<bool> active{false};
  HostStreamImpl* origin = nullptr;
  std::vector<Entry> entries;
  std::vector<GraphValueOp> values;
  std::vector<const HostStreamImpl*> joined;                         // streams in the capture
  std::vector<std::pair<const HostEvent*, size_t>> records;          // event -> its last record's entry
  std::string broken;                                                // the first rule broken

  void add(Entry e, const char* what) {
    const bool in = std::find(joined.begin(), joined.end(), e.stream) != joined.end();
    if (e.kind == Kind::kWaitEvent) {
      for (auto it = records.rbegin(); it != records.rend(); ++it)
        if (it->first == e.event) {
          e.joins = entries[it->second].stream;
          e.joins_entry = it->second;
          break;
        }
      if (e.joins && !in) joined.push_back(e.stream);
    } else if (!in && broken.empty()) {
      broken = std::string(what) + " on a stream that has not joined the capture (it must first wait on an event "
                                   "recorded in it)";
    }
    if (e.kind == Kind::kRecord) records.emplace_back(e.event, entries.size());
    entries.push_back(std::move(e));
  }
  // The first entry that does not join back into the origin ("" when all do).
  std::string unjoined() const;
};

class HostStreamImpl final : public HostStream {
 public:
  HostStreamImpl(const Device& device, int id, StreamPriority priority, std::shared_ptr<HostCapture> capture)
      : device_(device), priority_(priority), state_(std::make_shared<StreamState>()), capture_(std::move(capture)) {
    state_->description = "stream " + std::to_string(id) +
                          (priority == StreamPriority::kHigh ? " (high priority)" : " (normal priority)");
    state_->cancel_error =
        std::make_exception_ptr(RuntimeError("rank " + std::to_string(error_rank()) + ": " + state_->description +
                                             " was destroyed with work pending; the work was skipped"));
    auto st = state_;
    worker_ = std::thread([st] { worker_loop(st); });
  }

  ~HostStreamImpl() override {
    auto bound = host_wait_bound(device_.watchdog_seconds());
    StreamState& st = *state_;
    std::unique_lock<std::mutex> lk(st.mu);
    // While an error unwinds, pending work only delays the exit: skip it. Otherwise drain
    // first, like a CUDA stream whose work completes after cudaStreamDestroy.
    if (std::uncaught_exceptions() > 0) st.cancel.store(true, std::memory_order_release);
    auto drained = [&] { return st.queue.empty() && !st.running; };
    if (!wait_with_progress(st, lk, bound, drained)) st.cancel.store(true, std::memory_order_release);
    st.stop = true;
    st.work_cv.notify_all();
    bool exited = st.idle_cv.wait_for(lk, bound, [&] { return st.exited; });
    lk.unlock();
    if (exited) {
      worker_.join();
    } else {
      // Only a user task that never returns gets here (internal waits watch `cancel`).
      // The worker owns its state, so letting it go is safe; hanging here is not.
      std::fprintf(stderr, "rank %d: %s: a task did not return within %s of teardown; abandoning its worker\n",
                   error_rank(), st.description.c_str(), format_seconds(device_.watchdog_seconds()).c_str());
      worker_.detach();
    }
  }

  void enqueue(std::function<void()> task) override {
    UIPC_CHECK(task != nullptr, "HostStream::enqueue: empty task");
    submit(Task{std::move(task), nullptr, "host task"});
  }

  void enqueue_kernel(const char* what, std::function<void()> task) override {
    UIPC_CHECK(task != nullptr, "HostStream::enqueue_kernel: empty task");
    submit(Task{std::move(task), nullptr, what, true});
  }

  // Runs `task` on the worker; while a graph is captured, records it instead.
  void submit(Task task) {
    if (capturing()) {
      HostCapture::Entry e;
      e.stream = this;
      const char* what = task.what;
      e.task = std::move(task);
      capture_->add(std::move(e), what);
      return;
    }
    submit_now(std::move(task));
  }
  void submit_now(Task task) {
    {
      std::lock_guard<std::mutex> lk(state_->mu);
      state_->queue.push_back(std::move(task));
    }
    state_->work_cv.notify_one();
  }

  void synchronize() override {
    double watchdog_s = device_.watchdog_seconds();
    StreamState& st = *state_;
    std::unique_lock<std::mutex> lk(st.mu);
    auto drained = [&] { return st.queue.empty() && !st.running; };
    if (!wait_with_progress(st, lk, host_wait_bound(watchdog_s), drained)) {
      std::ostringstream msg;
      msg << "rank " << error_rank() << ": " << st.description << " did not drain within " << format_seconds(watchdog_s)
          << " (watchdog): running " << (st.running ? st.running_what : "nothing") << ", " << st.queue.size()
          << " more task(s) queued";
      throw PeerTimeout(msg.str());
    }
    if (st.error) std::rethrow_exception(st.error);
  }

  void* native() override { return nullptr; }

  StreamPriority priority() const { return priority_; }
  const std::string& description() const { return state_->description; }
  const std::shared_ptr<StreamState>& state() const { return state_; }
  // Internal waits poll this so that teardown does not wait out their watchdog.
  const std::atomic<bool>& cancel_flag() const { return state_->cancel; }
  bool capturing() const { return capture_->active.load(std::memory_order_relaxed); }
  HostCapture& capture() { return *capture_; }

 private:
  const Device& device_;
  StreamPriority priority_;  // recorded only: one worker per stream has no priorities
  std::shared_ptr<StreamState> state_;
  std::shared_ptr<HostCapture> capture_;
  std::thread worker_;
};

HostStreamImpl& impl_of(Stream& s) {
  auto* impl = dynamic_cast<HostStreamImpl*>(&s);
  UIPC_CHECK(impl != nullptr, "not a stream of the host device");
  return *impl;
}

// ---------------------------------------------------------------------------------------
// Events: every record() makes a new completion record, so a wait captured earlier keeps
// waiting for the record of its time, as cudaStreamWaitEvent does.

struct EventRecord {
  uint64_t generation = 0;
  std::string stream;                       // where it was recorded, for messages
  std::weak_ptr<StreamState> stream_state;  // whether that stream still moves
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;  // the record was skipped because its stream failed
  Clock::time_point time;

  void complete(const std::exception_ptr& failure) {
    auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lk(mu);
      time = now;
      error = failure;
      done = true;
    }
    cv.notify_all();
  }
};

// Waits until `rec` completes; false once its stream has not moved for `bound`. Polls
// `cancel` (if given) so that a waiting stream's teardown ends the wait.
bool wait_for_record(EventRecord& rec, Clock::duration bound, const std::atomic<bool>* cancel) {
  auto st = rec.stream_state.lock();  // null: that stream is gone, its records are final
  uint64_t seen = st ? completed_of(*st) : 0;
  auto deadline = Clock::now() + bound;
  std::unique_lock<std::mutex> lk(rec.mu);
  while (!rec.done) {
    if (cancel && cancel->load(std::memory_order_acquire))
      throw RuntimeError("stream destroyed while waiting for event record #" + std::to_string(rec.generation) + " on " +
                         rec.stream);
    auto now = Clock::now();
    if (now >= deadline) {
      lk.unlock();  // never hold a record's lock and a stream's together
      bool moving = st && still_moving_unlocked(*st, seen);
      lk.lock();
      if (rec.done) break;
      if (!moving) return false;
      deadline = now + bound;
      continue;
    }
    rec.cv.wait_until(lk, std::min(deadline, now + kPollSlice));
  }
  return true;
}

class HostEvent final : public Event {
 public:
  HostEvent(const Device& device, EventUse use) : Event(use), device_(device) {}

  void record(Stream& s) override {
    HostStreamImpl& stream = impl_of(s);
    if (stream.capturing()) {
      HostCapture::Entry e;
      e.kind = HostCapture::Kind::kRecord;
      e.stream = &stream;
      e.event = this;
      stream.capture().add(std::move(e), "an event record");
      return;
    }
    auto rec = std::make_shared<EventRecord>();
    rec->stream = stream.description();
    rec->stream_state = stream.state();
    {
      std::lock_guard<std::mutex> lk(mu_);
      rec->generation = ++generation_;
      latest_ = rec;
    }
    stream.submit_now(Task{[rec] { rec->complete(nullptr); }, [rec](const std::exception_ptr& e) { rec->complete(e); },
                           "event record"});
  }

  bool query() override {
    require_timed(*this, "query");
    auto rec = latest();
    if (!rec) return true;
    std::lock_guard<std::mutex> lk(rec->mu);
    if (rec->error) std::rethrow_exception(rec->error);
    return rec->done;
  }

  void synchronize() override {
    require_timed(*this, "synchronize");
    auto rec = latest();
    if (!rec) return;
    double watchdog_s = device_.watchdog_seconds();
    if (!wait_for_record(*rec, host_wait_bound(watchdog_s), nullptr)) {
      throw PeerTimeout("rank " + std::to_string(error_rank()) + ": event record #" + std::to_string(rec->generation) +
                        " on " + rec->stream + " did not complete within " + format_seconds(watchdog_s) +
                        " (watchdog)");
    }
    std::lock_guard<std::mutex> lk(rec->mu);
    if (rec->error) std::rethrow_exception(rec->error);
  }

  // The record of the most recent record() call, or null if never recorded.
  std::shared_ptr<EventRecord> latest() {
    std::lock_guard<std::mutex> lk(mu_);
    return latest_;
  }

 private:
  const Device& device_;
  std::mutex mu_;
  uint64_t generation_ = 0;
  std::shared_ptr<EventRecord> latest_;
};

HostEvent& impl_of(Event& e) {
  auto* impl = dynamic_cast<HostEvent*>(&e);
  UIPC_CHECK(impl != nullptr, "not an event of the host device");
  return *impl;
}

// ---------------------------------------------------------------------------------------

class HostDevice final : public Device {
 public:
  HostDevice(int rank, bool untouched) : rank_(rank), untouched_(untouched) {
    // Names of unsealed segments must not outlive an exit that skips destructors.
    std::call_once(g_atexit_once, [] { std::atexit(unlink_all_at_exit); });
  }

  DeviceKind kind() const override { return DeviceKind::kHost; }
  std::string name() const override { return "simulated GPU (host)"; }
  // Every rank is a simulated GPU of its own.
  int ordinal() const override { return rank_; }

  DeviceBuffer alloc(size_t bytes, bool exportable) override {
    return exportable ? alloc_shared(bytes) : alloc_private(bytes);
  }

  IpcHandle export_handle(const DeviceBuffer& buf) override {
    ShmSegment& seg = segment_of(buf, "export_handle");
    UIPC_CHECK(!seg.sealed,
               std::string("export_handle: segment ") + seg.name + " is sealed: peers can no longer open it");
    IpcHandle h;
    uint64_t exported = buf.bytes();
    std::memcpy(h.bytes.data() + HandleLayout::kMagicOffset, &kHandleMagic, sizeof(kHandleMagic));
    std::memcpy(h.bytes.data() + HandleLayout::kBytesOffset, &exported, sizeof(exported));
    std::snprintf(reinterpret_cast<char*>(h.bytes.data() + HandleLayout::kNameOffset), HandleLayout::kNameCapacity,
                  "%s", seg.name);
    return h;
  }

  PeerMapping open_handle(const IpcHandle& h, size_t bytes) override {
    uint64_t magic = 0, exported = 0;
    std::memcpy(&magic, h.bytes.data() + HandleLayout::kMagicOffset, sizeof(magic));
    std::memcpy(&exported, h.bytes.data() + HandleLayout::kBytesOffset, sizeof(exported));
    UIPC_CHECK(magic == kHandleMagic, "open_handle: not a handle of the host device");
    char name[HandleLayout::kNameCapacity];
    std::memcpy(name, h.bytes.data() + HandleLayout::kNameOffset, sizeof(name));
    name[sizeof(name) - 1] = '\0';
    UIPC_CHECK(std::strncmp(name, host_shm_prefix(), std::strlen(host_shm_prefix())) == 0,
               std::string("open_handle: ") + name + " is not a segment of this program");
    UIPC_CHECK(bytes <= exported, "open_handle: asked to map " + std::to_string(bytes) + " bytes of " + name +
                                      ", which exports " + std::to_string(exported));

    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
      int err = errno;
      throw_runtime(std::string("open_handle: shm_open(") + name + ") failed: " + errno_text(err) +
                        (err == ENOENT ? "; the exporter sealed or freed it before this peer opened it" : ""),
                    __FILE__, __LINE__);
    }
    size_t map_bytes = std::max<size_t>(bytes, 1);
    // A mapping past the end of the segment would turn a bad handle into a SIGBUS later.
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < map_bytes) {
      close(fd);
      throw_runtime(std::string("open_handle: ") + name + " is smaller than the " + std::to_string(map_bytes) +
                        " bytes asked for",
                    __FILE__, __LINE__);
    }
    void* ptr = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    UIPC_CHECK(ptr != MAP_FAILED, std::string("open_handle: mmap of ") + name + " failed: " + errno_text(err));
    record_region(ptr, bytes, "peer mapping (IPC handle)");
    return PeerMapping(this, ptr, bytes, nullptr);
  }

  DeviceBuffer alloc_fd_shareable(size_t bytes) override {
    UIPC_CHECK(bytes <= static_cast<size_t>(INT64_MAX),
               "alloc_fd_shareable: " + std::to_string(bytes) + " bytes is not a size");
    auto seg = std::make_unique<MemfdSegment>();
    seg->mapped_bytes = std::max<size_t>(bytes, 1);
    seg->fd = memfd_create("uipc-vmm", MFD_CLOEXEC);
    UIPC_CHECK(seg->fd >= 0, "alloc_fd_shareable: memfd_create failed: " + errno_text(errno));
    auto fail = [&](const std::string& what, int err) {
      close(seg->fd);
      throw_runtime("alloc_fd_shareable: " + what + " of " + std::to_string(bytes) + " bytes failed: " + errno_text(err),
                    __FILE__, __LINE__);
    };
    if (ftruncate(seg->fd, static_cast<off_t>(seg->mapped_bytes)) != 0) fail("ftruncate", errno);
    // Reserve the pages now: running out of memory is then an error here, not a SIGBUS later
    // (not for memory that stays untouched: then only what is written costs pages).
    int rc = untouched_ ? 0 : posix_fallocate(seg->fd, 0, static_cast<off_t>(seg->mapped_bytes));
    if (rc != 0) fail("posix_fallocate", rc);
    void* ptr = mmap(nullptr, seg->mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (ptr == MAP_FAILED) fail("mmap", errno);
    record_region(ptr, bytes, "descriptor-shared buffer");
    return DeviceBuffer(this, ptr, bytes, seg.release());  // a fresh memfd reads as zeros
  }

  int export_fd(const DeviceBuffer& buf) override {
    auto* seg = static_cast<MemfdSegment*>(buf.impl());
    UIPC_CHECK(seg != nullptr && seg->magic == kMemfdSegmentMagic,
               "export_fd: the buffer was not allocated with alloc_fd_shareable on the host device");
    int fd = fcntl(seg->fd, F_DUPFD_CLOEXEC, 0);
    UIPC_CHECK(fd >= 0, "export_fd: dup of the memfd failed: " + errno_text(errno));
    return fd;
  }

  PeerMapping import_fd(int fd, size_t bytes) override {
    UIPC_CHECK(fd >= 0, "import_fd: invalid descriptor " + std::to_string(fd));
    size_t map_bytes = std::max<size_t>(bytes, 1);
    // A mapping past the end of the memory would turn a bad descriptor into a SIGBUS later.
    struct stat st {};
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < map_bytes) {
      close(fd);
      throw_runtime("import_fd: the descriptor's memory is smaller than the " + std::to_string(map_bytes) +
                        " bytes asked for",
                    __FILE__, __LINE__);
    }
    void* ptr = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the memory
    UIPC_CHECK(ptr != MAP_FAILED, "import_fd: mmap failed: " + errno_text(err));
    record_region(ptr, bytes, "peer mapping (descriptor)");
    return PeerMapping(this, ptr, bytes, nullptr);
  }

  std::string vmm_ineligible_reason() override { return ""; }

  void copy_to_device(void* dst, const void* src, size_t bytes) override { copy_sync(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy_sync(dst, src, bytes); }

  size_t free_memory() const override {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
      unsigned long long kib = 0;
      if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return static_cast<size_t>(kib) * 1024;
    }
    throw_runtime("free_memory: no MemAvailable in /proc/meminfo", __FILE__, __LINE__);
  }

  std::unique_ptr<Stream> create_stream(StreamPriority p) override {
    auto stream = std::make_unique<HostStreamImpl>(*this, next_stream_id_.fetch_add(1) + 1, p, capture_);
    std::lock_guard<std::mutex> lk(streams_mu_);
    streams_.erase(std::remove_if(streams_.begin(), streams_.end(), [](const auto& w) { return w.expired(); }),
                   streams_.end());
    streams_.push_back(stream->state());
    return stream;
  }

  std::unique_ptr<Event> create_event(EventUse use = EventUse::kTimed) override {
    return std::make_unique<HostEvent>(*this, use);
  }

  // --- graphs: the op list, recorded once and issued again at each launch
  std::string graph_ineligible_reason() override { return ""; }
  void begin_capture(Stream& origin) override {
    UIPC_CHECK(!capture_->active, "begin_capture: a graph is already being captured");
    capture_->origin = &impl_of(origin);
    capture_->entries.clear();
    capture_->values.clear();
    capture_->records.clear();
    capture_->joined = {capture_->origin};
    capture_->broken.clear();
    capture_->active = true;
  }
  std::unique_ptr<Graph> end_capture(Stream& origin) override;

  void stream_wait_event(Stream& s, Event& e) override {
    HostStreamImpl& stream = impl_of(s);
    if (stream.capturing()) {
      HostCapture::Entry entry;
      entry.kind = HostCapture::Kind::kWaitEvent;
      entry.stream = &stream;
      entry.event = &impl_of(e);
      stream.capture().add(std::move(entry), "an event wait");
      return;
    }
    auto rec = impl_of(e).latest();
    if (!rec) return;  // never recorded: nothing to wait for
    auto timeout = to_duration(watchdog_seconds());
    double watchdog_s = watchdog_seconds();
    int rank = error_rank();
    const std::atomic<bool>* cancel = &stream.cancel_flag();
    std::string waiter = stream.description();
    stream.submit_now(Task{[rec, timeout, watchdog_s, rank, cancel, waiter] {
                         if (!wait_for_record(*rec, timeout, cancel)) {
                           throw PeerTimeout("rank " + std::to_string(rank) + ": " + waiter + " waited " +
                                             format_seconds(watchdog_s) + " for event record #" +
                                             std::to_string(rec->generation) + " on " + rec->stream +
                                             ", which stopped making progress");
                         }
                         // A record skipped by a failed stream fails the waiter with the same error.
                         std::lock_guard<std::mutex> lk(rec->mu);
                         if (rec->error) std::rethrow_exception(rec->error);
                       },
                       nullptr, "stream_wait_event", true});
  }

  double elapsed_ms(Event& start, Event& end) override {
    require_timed(start, "elapsed_ms");
    require_timed(end, "elapsed_ms");
    auto a = impl_of(start).latest();
    auto b = impl_of(end).latest();
    UIPC_CHECK(a && b, "elapsed_ms: an event was never recorded");
    Clock::time_point ta, tb;
    {
      std::lock_guard<std::mutex> lk(a->mu);
      UIPC_CHECK(a->done && !a->error, "elapsed_ms: the start event has not completed");
      ta = a->time;
    }
    {
      std::lock_guard<std::mutex> lk(b->mu);
      UIPC_CHECK(b->done && !b->error, "elapsed_ms: the end event has not completed");
      tb = b->time;
    }
    return std::chrono::duration<double, std::milli>(tb - ta).count();
  }

  void copy_2d(Stream& s, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
               size_t height) override {
    // Reject what cudaMemcpy2DAsync rejects, at the call, not later on the stream.
    UIPC_CHECK(width_bytes <= dst_pitch, "copy_2d: width " + std::to_string(width_bytes) +
                                             " exceeds the destination pitch " + std::to_string(dst_pitch));
    UIPC_CHECK(width_bytes <= src_pitch, "copy_2d: width " + std::to_string(width_bytes) +
                                             " exceeds the source pitch " + std::to_string(src_pitch));
    bool empty = width_bytes == 0 || height == 0;
    UIPC_CHECK(empty || (dst != nullptr && src != nullptr), "copy_2d: null pointer");
    check_reach_2d("copy_2d", "destination", dst, height, dst_pitch, width_bytes);
    check_reach_2d("copy_2d", "source", src, height, src_pitch, width_bytes);
    impl_of(s).submit(Task{[=] {
                             if (empty) return;
                             auto* d = static_cast<unsigned char*>(dst);
                             auto* from = static_cast<const unsigned char*>(src);
                             for (size_t row = 0; row < height; ++row)
                               std::memcpy(d + row * dst_pitch, from + row * src_pitch, width_bytes);
                           },
                           nullptr, "copy_2d", true});
  }

  void memset(Stream& s, void* dst, int byte, size_t bytes) override {
    UIPC_CHECK(bytes == 0 || dst != nullptr, "memset: null pointer");
    check_reach("memset", "destination", dst, bytes);
    impl_of(s).submit(Task{[=] {
                             if (bytes) std::memset(dst, byte, bytes);
                           },
                           nullptr, "memset", true});
  }

  void write_value64(Stream& s, uint64_t* addr, uint64_t v) override {
    check_word_address(addr, "write_value64");
    if (capture_value(s, GraphValueOp{false, addr, v, {}})) return;
    impl_of(s).submit(Task{[addr, v] {
                             // Release: the stream's earlier copies are visible to whoever
                             // acquires this value, in this process or another.
                             __atomic_store_n(addr, v, __ATOMIC_RELEASE);
                             futex_wake_all(addr);
                           },
                           nullptr, "write_value64"});
  }

  void wait_value64_geq(Stream& s, const uint64_t* addr, uint64_t v, const WaitLabel& label) override {
    check_word_address(addr, "wait_value64_geq");
    if (capture_value(s, GraphValueOp{true, addr, v, label})) return;
    HostStreamImpl& stream = impl_of(s);
    auto timeout = to_duration(watchdog_seconds());
    double watchdog_s = watchdog_seconds();
    int rank = error_rank();
    const std::atomic<bool>* cancel = &stream.cancel_flag();
    stream.submit(Task{
        [addr, v, label, timeout, watchdog_s, rank, cancel] {
          uint64_t seen = 0;
          for (int i = 0; i < kSpinLoads; ++i) {
            seen = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
            if (seen >= v) return;
            cpu_relax();
          }
          // Then sleep on the word: with 4 ranks and their workers on 2 cores, a spinning
          // waiter would starve the writer it waits for.
          auto deadline = Clock::now() + timeout;
          for (;;) {
            seen = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
            if (seen >= v) return;
            if (cancel->load(std::memory_order_acquire))
              throw RuntimeError("rank " + std::to_string(rank) + ": stream destroyed while waiting for " + label.what);
            auto now = Clock::now();
            if (now >= deadline) {
              std::ostringstream msg;
              msg << "rank " << rank << ": peer " << label.peer << " did not arrive within "
                  << format_seconds(watchdog_s) << ": " << label.what << " (word holds " << seen << ", needs >= " << v
                  << ")";
              throw PeerTimeout(msg.str());
            }
            futex_wait(addr, static_cast<uint32_t>(seen), std::min<Clock::duration>(deadline - now, kPollSlice));
          }
        },
        nullptr, "wait_value64_geq", true});
  }

  void free_buffer(void* ptr, size_t /*bytes*/, void* impl) override {
    forget_region(ptr);
    if (work_may_still_use_memory()) {
      // Keep the memory mapped (the process is ending on the error), but leave no name.
      if (impl && segment_magic(impl) == kShmSegmentMagic) {
        auto* seg = static_cast<ShmSegment*>(impl);
        if (!seg->sealed) unlink_owned_name(seg->name, seg->slot);
        seg->sealed = true;
      }
      keep_until_exit(ptr, impl);
      return;
    }
    if (!impl) {
      std::free(ptr);
      return;
    }
    if (segment_magic(impl) == kUntouchedSegmentMagic) {
      auto* useg = static_cast<UntouchedSegment*>(impl);
      if (ptr) munmap(ptr, useg->mapped_bytes);
      delete useg;
      return;
    }
    if (segment_magic(impl) == kMemfdSegmentMagic) {
      auto* mseg = static_cast<MemfdSegment*>(impl);
      if (ptr) munmap(ptr, mseg->mapped_bytes);
      close(mseg->fd);  // the memory goes with the last descriptor or mapping, peers' too
      delete mseg;
      return;
    }
    auto* seg = static_cast<ShmSegment*>(impl);
    if (ptr) munmap(ptr, seg->mapped_bytes);
    if (!seg->sealed) unlink_owned_name(seg->name, seg->slot);
    delete seg;
  }

  void close_mapping(void* ptr, size_t bytes, void* /*impl*/) override {
    forget_region(ptr);
    if (work_may_still_use_memory()) return;
    if (ptr) munmap(ptr, std::max<size_t>(bytes, 1));
  }

  void seal_export(const DeviceBuffer& buf) override {
    // A memfd buffer has no name to drop.
    if (buf.impl() != nullptr && segment_magic(buf.impl()) == kMemfdSegmentMagic) return;
    ShmSegment& seg = segment_of(buf, "seal_export");
    if (seg.sealed) return;
    unlink_owned_name(seg.name, seg.slot);
    seg.slot = -1;
    seg.sealed = true;
  }

 private:
  DeviceBuffer alloc_private(size_t bytes) {
    // Rounding up must not wrap a huge request to a small allocation.
    UIPC_CHECK(bytes <= SIZE_MAX - kHostAlignment, "alloc: " + std::to_string(bytes) + " bytes is not a size");
    size_t rounded = (std::max<size_t>(bytes, 1) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    if (untouched_) {
      auto seg = std::make_unique<UntouchedSegment>();
      seg->mapped_bytes = rounded;
      void* ptr = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      UIPC_CHECK(ptr != MAP_FAILED, "alloc: mmap of " + std::to_string(bytes) + " untouched bytes failed: " + errno_text(errno));
      record_region(ptr, bytes, "buffer");
      return DeviceBuffer(this, ptr, bytes, seg.release());  // fresh anonymous pages read as zeros
    }
    void* ptr = nullptr;
    int rc = posix_memalign(&ptr, kHostAlignment, rounded);
    UIPC_CHECK(rc == 0, "alloc: posix_memalign of " + std::to_string(bytes) + " bytes failed: " + errno_text(rc));
    std::memset(ptr, 0, rounded);  // device memory of the host device starts zeroed
    record_region(ptr, bytes, "buffer");
    return DeviceBuffer(this, ptr, bytes, nullptr);
  }

  DeviceBuffer alloc_shared(size_t bytes) {
    auto seg = std::make_unique<ShmSegment>();
    seg->mapped_bytes = std::max<size_t>(bytes, 1);
    // ftruncate and posix_fallocate take an off_t: a larger size would turn negative.
    UIPC_CHECK(bytes <= static_cast<size_t>(INT64_MAX), "alloc: " + std::to_string(bytes) + " bytes is not a size");
    int fd = -1;
    // A name left by a crashed process that had our pid (pids get reused) is stepped
    // over, never adopted: O_EXCL guarantees the segment is ours.
    for (int attempt = 0; fd < 0; ++attempt) {
      std::snprintf(seg->name, sizeof(seg->name), "%sr%d-%llu", host_shm_process_prefix(getpid()).c_str(), rank_,
                    static_cast<unsigned long long>(g_shm_counter.fetch_add(1)));
      // Registered before it exists, so that no instant has a name the cleanup can't see.
      seg->slot = registry_add(seg->name);
      UIPC_CHECK(seg->slot >= 0, "alloc: more than " + std::to_string(kMaxShmNames) +
                                     " unsealed shared-memory segments in this process");
      fd = shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd < 0) {
        int err = errno;
        registry_remove(seg->slot);
        seg->slot = -1;
        if (err != EEXIST || attempt >= 15)
          throw_runtime(std::string("alloc: shm_open(") + seg->name + ") failed: " + errno_text(err), __FILE__,
                        __LINE__);
      }
    }
    auto fail = [&](const std::string& what, int err) {
      close(fd);
      unlink_owned_name(seg->name, seg->slot);
      throw_runtime(
          "alloc: " + what + " of " + std::to_string(bytes) + " bytes in " + seg->name + " failed: " + errno_text(err),
          __FILE__, __LINE__);
    };
    if (ftruncate(fd, static_cast<off_t>(seg->mapped_bytes)) != 0) fail("ftruncate", errno);
    // Reserve the pages now: a full /dev/shm is then an error here, not a SIGBUS later.
    int rc = untouched_ ? 0 : posix_fallocate(fd, 0, static_cast<off_t>(seg->mapped_bytes));
    if (rc != 0) fail("posix_fallocate (is /dev/shm large enough?)", rc);
    void* ptr = mmap(nullptr, seg->mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ptr == MAP_FAILED) fail("mmap", errno);
    close(fd);  // the mapping keeps the segment
    record_region(ptr, bytes, "exported buffer");
    return DeviceBuffer(this, ptr, bytes, seg.release());
  }

  // Whether freeing memory now could pull it from under running work: an error unwinds
  // past buffers while a stream of this device still runs a task (a kernel that outlived
  // a host wait, or a worker abandoned at teardown). Then the memory stays mapped, as the
  // process is ending on that error; unmapping it would turn the error into a segfault on
  // the worker. Outside an error, memory is freed as before.
  // What an error left mapped under running work stays owned here until the process
  // ends: held on purpose, not lost (a leak checker sees it reachable). The list is never
  // destroyed, so no exit-time destructor drops it before the work is gone.
  static void keep_until_exit(void* ptr, void* impl) {
    static std::mutex mu;
    static auto* kept = new std::vector<std::pair<void*, void*>>();
    std::lock_guard<std::mutex> lk(mu);
    kept->emplace_back(ptr, impl);
  }

  bool work_may_still_use_memory() {
    if (std::uncaught_exceptions() == 0) return false;
    std::lock_guard<std::mutex> lk(streams_mu_);
    for (const auto& w : streams_) {
      auto st = w.lock();  // the worker keeps an abandoned stream's state alive
      if (!st) continue;
      std::lock_guard<std::mutex> slk(st->mu);
      if (st->running || !st->queue.empty()) return true;
    }
    return false;
  }

  static ShmSegment& segment_of(const DeviceBuffer& buf, const char* op) {
    auto* seg = static_cast<ShmSegment*>(buf.impl());
    UIPC_CHECK(seg != nullptr && seg->magic == kShmSegmentMagic,
               std::string(op) + ": the buffer was not allocated exportable on the host device");
    return *seg;
  }

  static void copy_sync(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    UIPC_CHECK(dst != nullptr && src != nullptr, "synchronous copy: null pointer");
    check_reach("synchronous copy", "destination", dst, bytes);
    check_reach("synchronous copy", "source", src, bytes);
    std::memcpy(dst, src, bytes);
  }

  // While a graph is captured: the write or wait goes into its op list (true).
  bool capture_value(Stream& s, GraphValueOp op) {
    HostStreamImpl& stream = impl_of(s);
    if (!stream.capturing()) return false;
    HostCapture& cap = stream.capture();
    HostCapture::Entry e;
    e.kind = HostCapture::Kind::kValue;
    e.stream = &stream;
    e.value = cap.values.size();
    const char* what = op.wait ? "a 64-bit wait" : "a 64-bit write";
    cap.values.push_back(std::move(op));
    cap.add(std::move(e), what);
    return true;
  }

  int rank_;
  bool untouched_;  // memory is not reserved or touched up front (--mode model)
  std::shared_ptr<HostCapture> capture_ = std::make_shared<HostCapture>();
  std::atomic<int> next_stream_id_{0};
  std::mutex streams_mu_;
  std::vector<std::weak_ptr<StreamState>> streams_;  // of every stream made, while it lives
};

// A captured op list of the host device, issued again at each launch.
class HostGraph final : public Graph {
 public:
  HostGraph(Device& dev, Stream& origin, std::vector<HostCapture::Entry> entries, std::vector<GraphValueOp> values)
      : dev_(dev), origin_(origin), entries_(std::move(entries)), values_(std::move(values)) {}
  const std::vector<GraphValueOp>& value_ops() const override { return values_; }
  void launch(Stream& origin, const std::vector<GraphValueOp>& values) override {
    UIPC_CHECK(&origin == &origin_, "graph launch: not the stream the graph was captured on");
    UIPC_CHECK(values.size() == values_.size(), "graph launch: " + std::to_string(values.size()) + " values for " +
                                                    std::to_string(values_.size()) + " captured writes and waits");
    for (size_t i = 0; i < values.size(); ++i)
      UIPC_CHECK(values[i].wait == values_[i].wait && values[i].addr == values_[i].addr,
                 "graph launch: value " + std::to_string(i) + " is not for the captured word");
    for (const HostCapture::Entry& e : entries_) {
      switch (e.kind) {
        case HostCapture::Kind::kTask: e.stream->submit_now(e.task); break;
        case HostCapture::Kind::kRecord: e.event->record(*e.stream); break;
        case HostCapture::Kind::kWaitEvent: dev_.stream_wait_event(*e.stream, *e.event); break;
        case HostCapture::Kind::kValue: {
          const GraphValueOp& v = values[e.value];
          if (v.wait)
            dev_.wait_value64_geq(*e.stream, v.addr, v.value, v.label);
          else
            dev_.write_value64(*e.stream, const_cast<uint64_t*>(v.addr), v.value);
          break;
        }
      }
    }
  }

 private:
  Device& dev_;
  Stream& origin_;
  std::vector<HostCapture::Entry> entries_;
  std::vector<GraphValueOp> values_;
};

std::string HostCapture::unjoined() const {
  // How far each stream's work is waited on from the origin's end, to a fixed point.
  std::vector<std::pair<const HostStreamImpl*, size_t>> upto{{origin, entries.size()}};
  auto reach = [&](const HostStreamImpl* s) -> size_t* {
    for (auto& [st, n] : upto)
      if (st == s) return &n;
    return nullptr;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const size_t* r = reach(e.stream);
      if (e.kind != Kind::kWaitEvent || !e.joins || !r || i > *r) continue;
      size_t* j = reach(e.joins);
      if (!j) {
        upto.emplace_back(e.joins, e.joins_entry);
        changed = true;
      } else if (*j < e.joins_entry) {
        *j = e.joins_entry;
        changed = true;
      }
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t* r = reach(entries[i].stream);
    if (!r || i > *r)
      return "operation " + std::to_string(i) + " of the capture (" + entries[i].stream->description() +
             ") does not join back into the stream the capture began on";
  }
  return {};
}

std::unique_ptr<Graph> HostDevice::end_capture(Stream& origin) {
  UIPC_CHECK(capture_->active && capture_->origin == &impl_of(origin),
             "end_capture: no graph is being captured on this stream");
  capture_->active = false;
  std::string broken = capture_->broken;
  if (broken.empty()) broken = capture_->unjoined();
  capture_->origin = nullptr;
  if (!broken.empty()) {
    capture_->entries.clear();
    capture_->values.clear();
    throw RuntimeError("the graph capture of a layer failed: " + broken + "; run with --graphs off");
  }
  return std::make_unique<HostGraph>(*this, origin, std::move(capture_->entries), std::move(capture_->values));
}

}  // namespace

HostStream& host_stream(Stream& s) {
  auto* hs = dynamic_cast<HostStream*>(&s);
  UIPC_CHECK(hs != nullptr, "host_stream: not a stream of the host device");
  return *hs;
}

const char* host_shm_prefix() { return "/uipc-"; }

std::string host_shm_process_prefix(long pid) { return std::string(host_shm_prefix()) + std::to_string(pid) + "-"; }

void seal_export(Device& dev, const DeviceBuffer& buf) {
  auto* host = dynamic_cast<HostDevice*>(&dev);
  UIPC_CHECK(host != nullptr, "seal_export: not the host device");
  host->seal_export(buf);
}

void host_unlink_all_shm() noexcept {
  int saved_errno = errno;  // a signal handler must leave errno as it found it
  for (int i = 0; i < kMaxShmNames; ++i) {
    int expected = kSlotLive;
    // Borrow the slot so that its owner cannot free and reuse it while we read the name.
    if (!g_registry.state[i].compare_exchange_strong(expected, kSlotUnlinking, std::memory_order_acquire)) continue;
    shm_unlink(g_registry.names[i]);  // glibc: a path built on the stack, then unlink(2)
    g_registry.state[i].store(kSlotLive, std::memory_order_release);
  }
  errno = saved_errno;
}

std::unique_ptr<Device> make_host_device(int rank, bool untouched_memory) {
  return std::make_unique<HostDevice>(rank, untouched_memory);
}

}  // namespace uipc
