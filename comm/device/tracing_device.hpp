// The recording decorator of the device layer: a Device that forwards every call to the
// device it wraps (host or CUDA) and, between begin_trace() and end_trace(), writes each
// operation into an op trace (model/trace/trace.hpp): its stream, kind, size, where its memory
// lives, and what it depends on. The protocol code above (transports, pipeline) is the
// same with or without it; kernels/tracing_kernels.hpp and comm/collectives/tracing_collectives.hpp
// record the kernels and collectives the same way, through record_op().
//
// Memory identity without help from the protocol: a buffer exported with an IPC handle
// is known by a hash of the handle's bytes, which the importer opens too; one exported
// as a file descriptor by the descriptor's (device, inode), which a descriptor passed
// over a Unix socket keeps. A copy or a 64-bit write into a mapping thus names the
// exporter's buffer, and the simulator matches each wait to the writes of its word.
// The memory calls themselves (allocation, export, import or open, free, close) are host
// ops of the trace (kHostCall): the simulator charges each its measured host time.
//
// With measure on, every recorded op is bracketed by two events on its own stream, and
// end_trace() turns them into start and end times: a real per-stream timeline on the
// GPU (CPU times on the host device). With elide_data on (--mode model), copies,
// memsets and kernels are recorded but not executed: the protocol's own operations
// (events, stream waits, 64-bit writes and waits) still run for real.
//
// The same funnel carries graphs (lib/run/layer_graph.hpp): a layer captured once by the
// wrapped device, then replayed. A replayed layer still runs its host logic (the
// transports' epochs, target lookups and statistics stay exact), but each stream
// operation it issues is checked against the captured one (its key: kind, stream,
// memory and sizes; not the 64-bit values) and held back instead of issued. When every
// operation matched, the graph is launched with the layer's own write and wait values;
// the first operation that does not match (or a host call a graph cannot stand for: an
// allocation, a mapping, a synchronization) issues the held ones one by one, in order,
// and the layer goes on op by op: never a graph that is not the layer's.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/device/device.hpp"
#include "model/trace/trace.hpp"

namespace uipc {

// A key of an operation's arguments (memory, sizes, kinds), field by field.
inline uint64_t op_key_bytes(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
template <typename... A>
uint64_t op_key(const A&... args) {
  uint64_t h = 1469598103934665603ull;
  ((h = op_key_bytes(h, &args, sizeof(args))), ...);
  return h;
}

// A layer captured as a graph: the graph, and the key of each operation it holds.
struct CapturedLayer {
  std::unique_ptr<Graph> graph;
  std::vector<uint64_t> keys;
};

class TracingDevice final : public Device {
 public:
  TracingDevice(std::unique_ptr<Device> inner, int world_rank, int world_size, bool elide_data);
  ~TracingDevice() override;

  Device& inner() { return *inner_; }
  bool elides_data() const { return elide_; }
  // The wrapped stream of one of this device's streams.
  static Stream& inner_stream(Stream& s);

  // --- recording
  void begin_trace(bool measure);
  // Ends the trace: waits (bounded) for the measurement events and returns the trace.
  model::RankTrace end_trace();
  bool recording() const { return recording_; }
  // Records `op` on stream s (if recording) and runs `run` on the wrapped stream unless
  // data work is elided and `data_work` is true. Kernels and collectives come here.
  // `key`: op_key of the call's arguments (graphs); `value`: a 64-bit write's or wait's
  // value. `run` must own what it needs (a replayed layer may hold it to the layer's end).
  void record_op(Stream& s, model::Op op, bool data_work, std::function<void(Stream&)> run, uint64_t key = 0,
                 const GraphValueOp* value = nullptr);

  // --- graphs, one layer at a time (lib/run/layer_graph.hpp)
  // A layer issued op by op, watched: end_watch() returns "" when it made only stream
  // work (what a graph can stand for), else the first call that was not.
  void begin_watch();
  std::string end_watch();
  // A layer captured by the wrapped device on `origin` (nothing runs until launched).
  // end_capture_layer throws RuntimeError when the capture broke (naming why).
  void begin_capture_layer(Stream& origin);
  CapturedLayer end_capture_layer(Stream& origin);
  // A layer replayed from `c`: true when it matched and `c` was launched on `origin`;
  // false when it diverged (why: at which op and how) and ran op by op.
  void begin_replay(const CapturedLayer& c);
  bool end_replay(Stream& origin, std::string* why);
  // Launches `c` with the values it was captured with (the captured layer itself).
  void launch(const CapturedLayer& c, Stream& origin);
  // Closes an open window on an error: a capture is ended and dropped, held work dropped.
  void abandon_window() noexcept;
  // The index of the collective group of these world ranks, and the next call's number.
  int group_index(const std::vector<int>& world_ranks);
  int64_t next_sequence(int group) { return ++sequences_[group]; }

  // While set, elapsed_ms() between events recorded in the last trace answers from these
  // modelled op times instead of the device's clock (the pipeline's own stage accounting
  // then gives modelled stage times). nullptr restores the device's clock.
  void use_modeled_clock(const std::vector<model::OpTime>* times) { modeled_ = times; }

  // --- Device
  DeviceKind kind() const override { return inner_->kind(); }
  std::string name() const override { return inner_->name(); }
  DeviceBuffer alloc(size_t bytes, bool exportable = false) override;
  IpcHandle export_handle(const DeviceBuffer& buf) override;
  PeerMapping open_handle(const IpcHandle& h, size_t bytes) override;
  void seal_export(const DeviceBuffer& buf) override { inner_->seal_export(buf); }
  DeviceBuffer alloc_fd_shareable(size_t bytes) override;
  int export_fd(const DeviceBuffer& buf) override;
  void close_export(int fd, size_t bytes) override;
  PeerMapping import_fd(int fd, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    note_host_call("a synchronous copy to the device");
    inner_->copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    note_host_call("a synchronous copy to the host");
    inner_->copy_to_host(dst, src, bytes);
  }
  size_t free_memory() const override { return inner_->free_memory(); }
  std::unique_ptr<Stream> create_stream(StreamPriority p) override;
  std::unique_ptr<Event> create_event(EventUse use = EventUse::kTimed) override;
  void stream_wait_event(Stream& s, Event& e) override;
  double elapsed_ms(Event& start, Event& end) override;
  void copy_2d(Stream& s, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
               size_t height) override;
  // Each copy of the batch is a record (dims[2]: its place in the batch; the host issues
  // the batch once), measured as the batch: the wrapped device still gets one batch.
  void copy_2d_batch(Stream& s, const std::vector<Copy2DOp>& ops) override;
  void memset(Stream& s, void* dst, int byte, size_t bytes) override;
  void write_value64(Stream& s, uint64_t* addr, uint64_t v) override;
  void wait_value64_geq(Stream& s, const uint64_t* addr, uint64_t v, const WaitLabel& label) override;
  std::string ipc_ineligible_reason() override { return inner_->ipc_ineligible_reason(); }
  std::string vmm_ineligible_reason() override { return inner_->vmm_ineligible_reason(); }
  int ordinal() const override { return inner_->ordinal(); }
  std::string peer_ineligible_reason(int peer_ordinal) override { return inner_->peer_ineligible_reason(peer_ordinal); }
  void set_watchdog_seconds(double s) override {
    Device::set_watchdog_seconds(s);
    inner_->set_watchdog_seconds(s);
  }
  // Memory and mappings are made by the wrapped device and go back to it through here. A
  // free of memory from alloc() is, on a GPU, cudaFree: it waits for the whole device
  // (bench_kernels' alloc rows: the host takes the rest of a running 5 ms kernel); the
  // trace says so. Memory from alloc_fd_shareable (CUDA VMM) frees without waiting.
  void free_buffer(void* ptr, size_t bytes, void* impl) override;
  void close_mapping(void* ptr, size_t bytes, void* impl) override;
  std::string graph_ineligible_reason() override { return inner_->graph_ineligible_reason(); }

  // Called by this device's events (tracing_device.cpp).
  void on_event_record(Event& inner_event, Stream& s, int& last_op, uint64_t& generation);
  void on_event_sync(int last_op, uint64_t generation);
  void on_event_query() { note_host_call("an event query"); }
  void on_stream_sync(int stream_index);

 private:
  struct Region {
    uintptr_t end = 0;
    uint64_t id = 0;  // 0: private memory of this rank
    model::Via via = model::Via::kLocal;
    bool runtime_alloc = false;  // from alloc(): its free waits for the device
  };
  void note_region(const void* ptr, size_t bytes, uint64_t id, model::Via via, bool runtime_alloc = false);
  void on_device_sync();  // the host waits for every stream's last op
  const Region* region_of(const void* ptr, uintptr_t* start) const;
  void set_export_id(const void* ptr, uint64_t id);
  int append(Stream* s, model::Op op);  // returns the op's index, -1 when not recording
  // A memory-management call on the host's timeline (kHostCall), when recording: its host
  // time is modelled (docs/model.md), what it waits for (a runtime free's) traced apart.
  // Returns the op's index (-1 when not recording).
  int append_host_call(model::HostCall what, size_t bytes);
  // The host time from its making to its end, kept as op `index`'s measured_host_us when the
  // trace measures (-1: nothing kept): around the wrapped device's part of a call.
  class HostTime {
   public:
    HostTime(TracingDevice& dev, int index);
    ~HostTime();
    HostTime(const HostTime&) = delete;
    HostTime& operator=(const HostTime&) = delete;

   private:
    TracingDevice& dev_;
    int index_;
    std::chrono::steady_clock::time_point t0_;
  };
  model::Op copy_op(void* dst, const void* src, size_t width, size_t height) const;

  // A host call in a graph window: taints a watch or a capture, ends a replay's holding.
  void note_host_call(const char* what);
  void diverge(const std::string& why);

  enum class Window { kNone, kWatch, kCapture, kReplay };
  Window window_ = Window::kNone;
  std::string unsteady_;                  // watch/capture: the first call a graph cannot hold
  std::vector<uint64_t> keys_;            // capture: the keys so far
  const CapturedLayer* replay_ = nullptr; // replay: what is replayed
  Stream* capture_origin_ = nullptr;      // capture: the stream it began on
  size_t replay_pos_ = 0;
  bool diverged_ = false;
  std::string diverged_why_;
  std::vector<std::pair<Stream*, std::function<void(Stream&)>>> held_;  // on wrapped streams
  std::vector<GraphValueOp> held_values_;

  std::unique_ptr<Device> inner_;
  int rank_, world_;
  bool elide_;
  bool recording_ = false, measure_ = false;
  uint64_t generation_ = 0;  // of the current (or last) trace
  model::RankTrace trace_;
  std::vector<model::StreamInfo> streams_;
  std::vector<int> last_op_of_stream_;
  std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> brackets_;  // per op (measure)
  std::unique_ptr<Stream> ref_stream_;
  std::unique_ptr<Event> ref_event_;
  std::map<uintptr_t, Region> regions_;  // by start address
  std::vector<uint64_t> exported_;
  std::vector<std::vector<int>> groups_;
  std::map<int, int64_t> sequences_;
  const std::vector<model::OpTime>* modeled_ = nullptr;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> last_written_;  // (mem id, offset) -> value
};

}  // namespace uipc
