// The device layer: the one interface that the transports, the layer pipeline and the
// kernels run on. Two implementations: CUDA (comm/cuda_device.*, the real GPU) and
// host (comm/host_device.*, simulation mode: shared memory, worker-thread streams,
// atomic epoch words). Everything above this header is written once for both.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace uipc {

class Device;

enum class DeviceKind { kHost, kCuda };
enum class StreamPriority { kNormal, kHigh };

// An in-order queue of device work. Work is enqueued asynchronously.
class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks until all enqueued work is done. Bounded by the device's watchdog timeout:
  // a stream that does not drain in time throws PeerTimeout describing what it waits
  // for; a stream on which an operation failed throws that error.
  virtual void synchronize() = 0;
  // cudaStream_t for CUDA streams, nullptr for host streams.
  virtual void* native() = 0;
};

// What an event is for (Device::create_event).
//  kTimed     timed, queried, synchronized, waited on at any time. Recorded inside a graph
//             capture, it is a node of the graph (a CUDA external event record: ~2.2 us of
//             GPU time on an H200, bench_kernels' graph rows), so that it holds the time of
//             each launch.
//  kOrdering  only joins streams: recorded, then waited on by other streams of the same
//             layer. Inside a capture it is an edge of the graph, no node. It is never timed,
//             queried or synchronized (an error on every device); on the GPU, one last
//             recorded inside a capture cannot be waited on outside it (its record there is
//             only the edge).
enum class EventUse { kTimed, kOrdering };

// A marker in a stream; its completion time can be compared with other events'.
class Event {
 public:
  explicit Event(EventUse use = EventUse::kTimed) : use_(use) {}
  virtual ~Event() = default;
  EventUse use() const { return use_; }
  virtual void record(Stream& s) = 0;
  // True once the work before the last record() has completed.
  virtual bool query() = 0;
  virtual void synchronize() = 0;

 private:
  EventUse use_;
};

// Throws unless `e` may be read (timed, queried, synchronized): not a kOrdering event.
void require_timed(const Event& e, const char* what);

// Memory reached through a device and given back through it when the owner goes:
// `Release` says how (free a buffer, close a mapping). Movable, not copyable.
template <typename Release>
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Device* owner, void* ptr, size_t bytes, void* impl) : owner_(owner), ptr_(ptr), bytes_(bytes), impl_(impl) {}
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = o.owner_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      impl_ = o.impl_;
      o.owner_ = nullptr;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
      o.impl_ = nullptr;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { reset(); }
  void reset() {
    if (owner_ && (ptr_ || impl_)) Release::release(*owner_, ptr_, bytes_, impl_);
    owner_ = nullptr;
    ptr_ = nullptr;
    bytes_ = 0;
    impl_ = nullptr;
  }

  // The same memory, given back through `owner` from now on (a decorating device that
  // wants to see it go); this one is left empty.
  DeviceMemory rehome(Device* owner) {
    DeviceMemory m(owner, ptr_, bytes_, impl_);
    owner_ = nullptr;
    ptr_ = nullptr;
    bytes_ = 0;
    impl_ = nullptr;
    return m;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void* impl() const { return impl_; }  // implementation data (e.g. the shm segment)
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  Device* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  void* impl_ = nullptr;
};

struct FreeBuffer {
  static void release(Device& d, void* ptr, size_t bytes, void* impl);
};
struct CloseMapping {
  static void release(Device& d, void* ptr, size_t bytes, void* impl);
};

// Device memory owned by this process; freed in the destructor.
using DeviceBuffer = DeviceMemory<FreeBuffer>;
// A peer's exported buffer mapped into this process; closed in the destructor. Close
// every mapping of a buffer before its exporter frees it.
using PeerMapping = DeviceMemory<CloseMapping>;

// An exported memory handle, sent as plain bytes (over MPI) to peers of the same node.
struct IpcHandle {
  std::array<unsigned char, 128> bytes{};
};

// One 2-D copy of a batch (Device::copy_2d_batch): `height` rows of `width` bytes.
struct Copy2DOp {
  void* dst = nullptr;
  size_t dst_pitch = 0;
  const void* src = nullptr;
  size_t src_pitch = 0;
  size_t width = 0, height = 0;
};

// What a GPU-side wait is for, so that a watchdog message can name it.
struct WaitLabel {
  int peer = -1;          // the rank whose write we wait for
  std::string what;       // e.g. "ready epoch of group 7 (tags V,Q,K)"
};

// A 64-bit write or wait of a captured graph (Device::begin_capture), with the value it
// takes at one launch: the epoch handshake's values change every layer, so a graph is
// never launched with the values it was captured with unless they are the same.
struct GraphValueOp {
  bool wait = false;             // wait_value64_geq (else write_value64)
  const uint64_t* addr = nullptr;
  uint64_t value = 0;
  WaitLabel label;               // waits: what the watchdog names
};

// A layer's stream work captured once (CUDA graphs on the GPU; the op list on the host
// device) and launched again and again: one host call instead of one per operation.
class Graph {
 public:
  virtual ~Graph() = default;
  // The captured writes and waits, in the order they were issued.
  virtual const std::vector<GraphValueOp>& value_ops() const = 0;
  // Launches the graph on `origin` (the stream its capture began on), every write and
  // wait taking values[i] (same order and addresses as value_ops(); checked). Every wait
  // stays bounded by the watchdog: a stream held by one fails its synchronize() with a
  // PeerTimeout naming it.
  virtual void launch(Stream& origin, const std::vector<GraphValueOp>& values) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // e.g. "NVIDIA H200 (0)" or "simulated GPU (host)"

  // --- memory
  // Device memory; exportable buffers can be shared with other processes of the node.
  virtual DeviceBuffer alloc(size_t bytes, bool exportable = false) = 0;
  virtual IpcHandle export_handle(const DeviceBuffer& buf) = 0;
  virtual PeerMapping open_handle(const IpcHandle& h, size_t bytes) = 0;
  // Every peer has opened `buf`: drop whatever names it in the system (the host
  // device's /dev/shm entry), so that nothing outlives the run. Mappings stay valid.
  virtual void seal_export(const DeviceBuffer& buf) { (void)buf; }
  // Library-owned memory shared as POSIX file descriptors (the vmm transport): CUDA
  // VMM allocations with POSIX-fd handles, memfd on the host device. Descriptors carry
  // no name, so nothing is left in the system when a process dies. The defaults throw
  // "not supported on this device"; vmm_ineligible_reason() says so up front.
  virtual DeviceBuffer alloc_fd_shareable(size_t bytes);
  // A new descriptor for `buf` (allocated with alloc_fd_shareable); the caller closes it
  // with close_export.
  virtual int export_fd(const DeviceBuffer& buf);
  // Closes a descriptor export_fd made for `bytes` (once the peers have their copies). On a
  // GPU the close of an export no peer imported takes about as long as the export (bench_kernels'
  // alloc rows), so the trace holds it as a call of its own.
  virtual void close_export(int fd, size_t bytes);
  // Maps the first `bytes` of the memory behind `fd` (from a peer's export_fd). Takes
  // ownership of fd: it is closed here, on success and on failure.
  virtual PeerMapping import_fd(int fd, size_t bytes);
  // Synchronous host <-> device transfers (setup and checking, not the data path).
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Bytes of device memory this process may still allocate (an estimate).
  virtual size_t free_memory() const = 0;

  // --- streams and events
  virtual std::unique_ptr<Stream> create_stream(StreamPriority p) = 0;
  virtual std::unique_ptr<Event> create_event(EventUse use = EventUse::kTimed) = 0;
  // Makes `s` wait until `e` (recorded on another stream) completes.
  virtual void stream_wait_event(Stream& s, Event& e) = 0;
  // Milliseconds between two completed events (of any streams of this device).
  virtual double elapsed_ms(Event& start, Event& end) = 0;

  // --- asynchronous data movement on a stream
  // 2-D pitched copy: `height` rows of `width_bytes`, any source/destination pitch;
  // src and dst may be local or mapped peer memory.
  virtual void copy_2d(Stream& s, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                       size_t width_bytes, size_t height) = 0;
  virtual void memset(Stream& s, void* dst, int byte, size_t bytes) = 0;
  // Several 2-D copies on s, after its earlier work and before its later, in no order
  // among themselves (they must not overlap). The default issues them one by one; the
  // CUDA device as one batched call (cudaMemcpy3DBatchAsync: one enqueue, not one each).
  virtual void copy_2d_batch(Stream& s, const std::vector<Copy2DOp>& ops);

  // --- stream memory operations (the epoch handshake)
  // Stores v into the 64-bit word at addr (local or mapped peer memory) once the
  // preceding work of s is done.
  virtual void write_value64(Stream& s, uint64_t* addr, uint64_t v) = 0;
  // Holds s until the 64-bit word at addr (local memory) is >= v. Bounded by the
  // watchdog: if it does not happen within the timeout, the stream fails with a
  // PeerTimeout naming `label`.
  virtual void wait_value64_geq(Stream& s, const uint64_t* addr, uint64_t v, const WaitLabel& label) = 0;

  // --- graphs
  // Why this device cannot capture graphs ("" = it can).
  virtual std::string graph_ineligible_reason() { return "not supported on this device"; }
  // From here to end_capture(), the stream work issued on `origin`, and on every stream
  // that joins it through stream_wait_event, is recorded, not run. The work must join
  // back into `origin` before end_capture; no host synchronization may happen in between.
  virtual void begin_capture(Stream& origin);
  // The captured work as a graph, ready to launch. Throws RuntimeError naming what broke
  // the capture (the device is out of capture mode either way).
  virtual std::unique_ptr<Graph> end_capture(Stream& origin);

  // --- IPC eligibility
  // Why this device cannot take part in the IPC transport ("" = it can).
  virtual std::string ipc_ineligible_reason() { return ""; }
  // Why this device cannot take part in the vmm transport beyond the IPC checks ("" =
  // it can): file-descriptor shareable memory that takes stream memory operations.
  virtual std::string vmm_ineligible_reason() { return "not supported"; }
  // The device's ordinal on its node: the CUDA ordinal; on the host device the rank, as
  // every rank is a simulated GPU of its own (ranks normally differ in it, so nothing
  // that must be identical on every rank may hold it).
  virtual int ordinal() const = 0;
  // Why this device cannot copy into a peer device's memory ("" = it can).
  virtual std::string peer_ineligible_reason(int peer_ordinal) { (void)peer_ordinal; return ""; }

  // --- watchdog
  // Virtual so that a decorator (comm/device/tracing_device.hpp) passes it on to what it wraps.
  virtual void set_watchdog_seconds(double s) { watchdog_s_ = s; }
  double watchdog_seconds() const { return watchdog_s_; }

  // Implementation hooks for the RAII types.
  virtual void free_buffer(void* ptr, size_t bytes, void* impl) = 0;
  virtual void close_mapping(void* ptr, size_t bytes, void* impl) = 0;

 protected:
  double watchdog_s_ = 60.0;
};

// The host (simulation) device of this process. `rank` names shared-memory segments.
// With untouched_memory, memory is mapped but neither reserved nor zeroed up front
// (--mode model: full-size layers whose data is never written).
std::unique_ptr<Device> make_host_device(int rank, bool untouched_memory = false);

}  // namespace uipc
