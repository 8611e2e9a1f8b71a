// The CUDA device layer: memory, IPC export/open, VMM allocations shared as POSIX file
// descriptors, prioritized streams, timing events, pitched copies and the 64-bit stream
// memory operations of the epoch handshake, with host waits bounded by the watchdog. The driver library is never linked: its entry
// points come through cudaGetDriverEntryPointByVersion, so the binary also starts on a
// machine without a driver (and then reports no usable device).
#include "comm/device/cuda_device.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/error.hpp"
#include "base/poll.hpp"
#include "comm/device/cuda_check.hpp"
#include "comm/device/memory_reach.hpp"

namespace uipc {
namespace {

// ---------------------------------------------------------------- driver entry points

using PfnStreamValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using PfnGetErrorText = CUresult (*)(CUresult, const char**);
using PfnDeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using PfnDeviceGet = CUresult (*)(CUdevice*, int);

// The virtual memory management entry points of the vmm path. decltype of the
// declarations in cuda.h: the types only, nothing is linked.
struct VmmApi {
  decltype(&::cuMemGetAllocationGranularity) get_granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) get_properties = nullptr;
};

// The graph entry points that find and update the write/wait nodes of a captured layer.
struct GraphApi {
  decltype(&::cuGraphGetNodes) get_nodes = nullptr;
  decltype(&::cuGraphNodeGetType) node_type = nullptr;
  decltype(&::cuGraphBatchMemOpNodeGetParams) memop_params = nullptr;
  decltype(&::cuGraphExecBatchMemOpNodeSetParams) exec_set_memop = nullptr;
};

struct DriverApi {
  PfnStreamValue64 write_value64 = nullptr;
  PfnStreamValue64 wait_value64 = nullptr;
  PfnGetErrorText get_error_string = nullptr;
  PfnGetErrorText get_error_name = nullptr;
  PfnDeviceGetAttribute device_get_attribute = nullptr;
  PfnDeviceGet device_get = nullptr;
  std::string missing;  // names of entry points not found (empty: all there)
  VmmApi vmm;
  // Missing VMM entry points, kept apart: they disqualify the vmm path only, not ipc.
  std::string vmm_missing;
  GraphApi graph;
  std::string graph_missing;  // they disqualify graphs only
};

// The ABI version we ask for: the CUDA 12.0 signatures (the v2 memops), which the
// 13.0 headers above describe and every driver since 12.0 offers.
constexpr unsigned kDriverAbiVersion = 12000;

template <typename Fn>
void load_entry(const char* symbol, Fn& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbiVersion, cudaEnableDefault, &status);
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    if (e != cudaSuccess) cudaGetLastError();  // do not leave a sticky-looking error behind
    missing += (missing.empty() ? "" : ", ") + std::string(symbol);
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

const DriverApi& driver_api() {
  static DriverApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    load_entry("cuStreamWriteValue64", api.write_value64, api.missing);
    load_entry("cuStreamWaitValue64", api.wait_value64, api.missing);
    load_entry("cuGetErrorString", api.get_error_string, api.missing);
    load_entry("cuGetErrorName", api.get_error_name, api.missing);
    load_entry("cuDeviceGetAttribute", api.device_get_attribute, api.missing);
    load_entry("cuDeviceGet", api.device_get, api.missing);
    load_entry("cuMemGetAllocationGranularity", api.vmm.get_granularity, api.vmm_missing);
    load_entry("cuMemCreate", api.vmm.create, api.vmm_missing);
    load_entry("cuMemRelease", api.vmm.release, api.vmm_missing);
    load_entry("cuMemAddressReserve", api.vmm.address_reserve, api.vmm_missing);
    load_entry("cuMemAddressFree", api.vmm.address_free, api.vmm_missing);
    load_entry("cuMemMap", api.vmm.map, api.vmm_missing);
    load_entry("cuMemUnmap", api.vmm.unmap, api.vmm_missing);
    load_entry("cuMemSetAccess", api.vmm.set_access, api.vmm_missing);
    load_entry("cuMemExportToShareableHandle", api.vmm.export_handle, api.vmm_missing);
    load_entry("cuMemImportFromShareableHandle", api.vmm.import_handle, api.vmm_missing);
    load_entry("cuMemGetAllocationPropertiesFromHandle", api.vmm.get_properties, api.vmm_missing);
    load_entry("cuGraphGetNodes", api.graph.get_nodes, api.graph_missing);
    load_entry("cuGraphNodeGetType", api.graph.node_type, api.graph_missing);
    load_entry("cuGraphBatchMemOpNodeGetParams", api.graph.memop_params, api.graph_missing);
    load_entry("cuGraphExecBatchMemOpNodeSetParams", api.graph.exec_set_memop, api.graph_missing);
  });
  return api;
}

// ---------------------------------------------------------------- bounded host waits

// True when cudaStreamQuery/cudaEventQuery says complete, false when not ready; any
// other result is an error of work on that stream, thrown.
bool query_done(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  cudaGetLastError();
  throw_library_error("CUDA", std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")", what,
                      __FILE__, __LINE__);
}

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s << "s";
  return os.str();
}

// ---------------------------------------------------------------- wait bookkeeping

// Every wait_value64_geq enqueued on a stream and not yet known to be passed: what the
// watchdog names when the stream does not drain. Each entry carries an event recorded
// right after the wait, so passed entries are dropped cheaply.
struct PendingWait {
  const uint64_t* addr = nullptr;
  uint64_t value = 0;
  WaitLabel label;
  cudaEvent_t passed = nullptr;
};

struct WaitLog {
  std::mutex m;
  std::deque<PendingWait> waits;
  // Events of passed entries, kept for the next waits: creating and destroying an event
  // per wait cost more host time than the wait itself (bench_kernels' latency rows).
  std::vector<cudaEvent_t> spare;

  // Drops the leading entries whose wait has passed (the stream is in order).
  void prune_locked() {
    while (!waits.empty() && cudaEventQuery(waits.front().passed) == cudaSuccess) {
      spare.push_back(waits.front().passed);
      waits.pop_front();
    }
    cudaGetLastError();
  }
  // An event for a new entry (a spare one, or a new one).
  cudaEvent_t take_locked() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    UIPC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  // Every entry passed (the stream drained): their events become spare.
  void passed_all() {
    std::lock_guard<std::mutex> lock(m);
    for (auto& w : waits) spare.push_back(w.passed);
    waits.clear();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(m);
    for (auto& w : waits) cudaEventDestroy(w.passed);
    waits.clear();
    for (cudaEvent_t e : spare) cudaEventDestroy(e);
    spare.clear();
  }
  ~WaitLog() { clear(); }
};

class CudaDevice;

std::string describe_timeout(CudaDevice& dev, double seconds, const char* what);

// ---------------------------------------------------------------- streams and events

class CudaStream : public Stream {
 public:
  CudaStream(CudaDevice* dev, cudaStream_t s) : dev_(dev), stream_(s), log_(std::make_shared<WaitLog>()) {}
  ~CudaStream() override {
    log_->clear();
    cudaStreamDestroy(stream_);
  }
  void synchronize() override;
  void* native() override { return stream_; }
  cudaStream_t get() const { return stream_; }
  const std::shared_ptr<WaitLog>& log() const { return log_; }

 private:
  CudaDevice* dev_;
  cudaStream_t stream_;
  std::shared_ptr<WaitLog> log_;
};

CudaStream& cuda_stream(Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  UIPC_CHECK(cs != nullptr, "a stream of another device was passed to the CUDA device");
  return *cs;
}

bool device_capturing(const CudaDevice* dev);

// Recorded inside a graph capture, a timed event is two: the plain record orders the
// capture's streams (stream_wait_event within the capture), and an event-record node
// (external) records `graph_event_` at every launch, which timing, queries and later waits
// read. An ordering event (EventUse::kOrdering) is the plain record alone: an edge of the
// graph, no node (each node costs ~2.2 us of GPU time on an H200), and nothing to read.
class CudaEvent : public Event {
 public:
  CudaEvent(CudaDevice* dev, cudaEvent_t e, EventUse use) : Event(use), dev_(dev), event_(e) {}
  ~CudaEvent() override {
    cudaEventDestroy(event_);
    if (graph_event_) cudaEventDestroy(graph_event_);
  }
  void record(Stream& s) override {
    cudaStream_t cs = cuda_stream(s).get();
    recorded_in_graph_ = device_capturing(dev_);
    if (recorded_in_graph_ && use() == EventUse::kTimed) {
      // The node first: a stream that joins through event_ then joins after it too (else
      // the capture ends with the node unjoined).
      if (!graph_event_) UIPC_CUDA_CHECK(cudaEventCreate(&graph_event_));
      UIPC_CUDA_CHECK(cudaEventRecordWithFlags(graph_event_, cs, cudaEventRecordExternal));
    }
    UIPC_CUDA_CHECK(cudaEventRecord(event_, cs));
  }
  bool query() override {
    require_timed(*this, "cudaEventQuery");
    return query_done(cudaEventQuery(get()), "cudaEventQuery(event)");
  }
  void synchronize() override;
  // The event that holds the last record's time: the graph's node when it was captured.
  cudaEvent_t get() const {
    require_timed(*this, "the time of an event");
    return last_record();
  }
  // What a stream waits on: inside a capture, the capture's own record.
  cudaEvent_t for_wait(bool capturing) const {
    if (capturing) return event_;
    UIPC_CHECK(!(recorded_in_graph_ && use() == EventUse::kOrdering),
               "a stream waits, outside a graph, on an ordering event last recorded inside one (its record there is "
               "only an edge of the graph)");
    return last_record();
  }

 private:
  // The CUDA event of the last record: the graph's node when it was captured.
  cudaEvent_t last_record() const { return recorded_in_graph_ ? graph_event_ : event_; }

  CudaDevice* dev_;
  cudaEvent_t event_;
  cudaEvent_t graph_event_ = nullptr;
  bool recorded_in_graph_ = false;
};

// ---------------------------------------------------------------- IPC bookkeeping

using IpcKey = std::array<unsigned char, sizeof(cudaIpcMemHandle_t)>;

// Process-wide: a handle exported by this very process must not be opened with
// cudaIpcOpenMemHandle (it fails); and a handle opened twice shares one mapping.
struct IpcRegistry {
  std::mutex m;
  std::map<IpcKey, void*> exported;  // handles this process exported -> local pointer
  struct Opened {
    void* ptr = nullptr;
    int refs = 0;
  };
  std::map<IpcKey, Opened> opened;
};

IpcRegistry& ipc_registry() {
  static IpcRegistry r;
  return r;
}

// impl of a PeerMapping onto this process's own buffer: nothing to close.
char g_self_mapping_tag = 0;

IpcKey key_of(const IpcHandle& h) {
  IpcKey k{};
  std::memcpy(k.data(), h.bytes.data(), k.size());
  return k;
}

// ---------------------------------------------------------------- VMM bookkeeping

// The impl of a buffer made by alloc_fd_shareable and of a mapping made by import_fd:
// the physical allocation's handle and the size of the mapped (and reserved) range,
// a whole number of granules. Told apart from the other impls by its magic.
constexpr uint64_t kVmmRangeMagic = 0x75697063'766d6d31ull;  // "uipcvmm1"

struct VmmRange {
  uint64_t magic = kVmmRangeMagic;
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;
};

bool is_vmm_range(const void* impl) {
  return impl != nullptr && static_cast<const VmmRange*>(impl)->magic == kVmmRangeMagic;
}

size_t round_up(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

// For the release paths, which run in destructors: report a failed call, never throw.
void report_release_failure(const char* what, const char* error) {
  std::fprintf(stderr, "ulysses-ipc: %s failed: %s (%s)\n", what, error, error_where(__FILE__, __LINE__).c_str());
}

// Gives back what a VMM buffer or mapping holds, in the reverse order of making it;
// any step may be absent (a half-made range on an error path). Called from destructors:
// reports failures, never throws.
void release_vmm(CUdeviceptr ptr, const VmmRange& r, bool mapped) {
  const VmmApi& vmm = driver_api().vmm;
  auto report = [](const char* what, CUresult rc) {
    if (rc != CUDA_SUCCESS) report_release_failure(what, cu_error_string(rc).c_str());
  };
  if (mapped) report("cuMemUnmap", vmm.unmap(ptr, r.size));  // synchronous: no copy still uses it
  if (ptr) report("cuMemAddressFree", vmm.address_free(ptr, r.size));
  if (r.handle) report("cuMemRelease", vmm.release(r.handle));
}

// A VMM buffer or mapping (impl is its VmmRange) is released here: true. Anything else:
// false, nothing done.
bool release_if_vmm(void* ptr, void* impl) {
  if (!is_vmm_range(impl)) return false;
  std::unique_ptr<VmmRange> r(static_cast<VmmRange*>(impl));
  release_vmm(reinterpret_cast<CUdeviceptr>(ptr), *r, true);
  return true;
}

// A VMM range under construction: released unless the caller takes it.
class VmmRangeGuard {
 public:
  VmmRangeGuard() : range_(std::make_unique<VmmRange>()) {}
  ~VmmRangeGuard() {
    if (range_) release_vmm(ptr_, *range_, mapped_);
  }
  VmmRangeGuard(const VmmRangeGuard&) = delete;
  VmmRangeGuard& operator=(const VmmRangeGuard&) = delete;
  VmmRange& range() { return *range_; }
  CUdeviceptr& ptr() { return ptr_; }
  void set_mapped() { mapped_ = true; }
  VmmRange* take() { return range_.release(); }

 private:
  std::unique_ptr<VmmRange> range_;
  CUdeviceptr ptr_ = 0;
  bool mapped_ = false;
};

// A descriptor owned until it is handed over (close on every early exit).
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// ---------------------------------------------------------------- the device

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    int count = 0;
    UIPC_CUDA_CHECK(cudaGetDeviceCount(&count));
    UIPC_CHECK(ordinal >= 0 && ordinal < count,
               "CUDA device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) + " visible)");
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    UIPC_CUDA_CHECK(cudaFree(nullptr));  // create the primary context now, not inside a timed region
    cudaDeviceProp prop{};
    UIPC_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = std::string(prop.name) + " (" + std::to_string(ordinal_) + ")";
    UIPC_CUDA_CHECK(cudaStreamCreateWithFlags(&probe_, cudaStreamNonBlocking));
    ipc_reason_ = compute_ipc_reason();
    vmm_reason_ = compute_vmm_reason();
  }
  ~CudaDevice() override { cudaStreamDestroy(probe_); }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  int ordinal() const override { return ordinal_; }
  const std::string& ipc_reason() const { return ipc_reason_; }
  bool capturing() const { return capturing_; }

  // --- graphs
  std::string graph_ineligible_reason() override {
    const auto& api = driver_api();
    if (!api.graph_missing.empty()) return "CUDA driver graph entry points not found: " + api.graph_missing;
    return {};
  }
  void begin_capture(Stream& origin) override {
    UIPC_CHECK(!capturing_, "begin_capture: a graph is already being captured");
    const std::string why = graph_ineligible_reason();
    UIPC_CHECK(why.empty(), "begin_capture: " + why);
    // Thread-local: an unsafe call of this thread (an allocation, a synchronization)
    // fails and breaks the capture instead of passing unnoticed.
    UIPC_CUDA_CHECK(cudaStreamBeginCapture(cuda_stream(origin).get(), cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    capture_values_.clear();
  }
  std::unique_ptr<Graph> end_capture(Stream& origin) override;
  std::string ipc_ineligible_reason() override { return ipc_reason_; }
  std::string vmm_ineligible_reason() override { return vmm_reason_; }
  std::string peer_ineligible_reason(int peer_ordinal) override {
    if (cuda_can_access_peer(ordinal_, peer_ordinal)) return {};
    return "GPU " + std::to_string(ordinal_) + " cannot access the memory of GPU " + std::to_string(peer_ordinal) +
           " (no peer access)";
  }

  DeviceBuffer alloc(size_t bytes, bool exportable) override {
    (void)exportable;  // cudaMalloc memory is exportable with cudaIpcGetMemHandle as it is
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    void* p = nullptr;
    UIPC_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
    record_region(p, bytes, "buffer");
    return DeviceBuffer(this, p, bytes, nullptr);
  }

  IpcHandle export_handle(const DeviceBuffer& buf) override {
    UIPC_CHECK(buf.get() != nullptr, "export of an empty buffer");
    cudaIpcMemHandle_t h;
    UIPC_CUDA_CHECK(cudaIpcGetMemHandle(&h, buf.get()));
    IpcHandle out;
    static_assert(sizeof(h) <= sizeof(out.bytes), "cudaIpcMemHandle_t does not fit IpcHandle");
    std::memcpy(out.bytes.data(), &h, sizeof(h));
    auto& reg = ipc_registry();
    std::lock_guard<std::mutex> lock(reg.m);
    reg.exported[key_of(out)] = buf.get();
    return out;
  }

  PeerMapping open_handle(const IpcHandle& h, size_t bytes) override {
    const IpcKey key = key_of(h);
    UIPC_CHECK(key != IpcKey{}, "open of an empty IPC handle");
    auto& reg = ipc_registry();
    std::lock_guard<std::mutex> lock(reg.m);
    auto self = reg.exported.find(key);
    if (self != reg.exported.end()) return PeerMapping(this, self->second, bytes, &g_self_mapping_tag);
    auto& entry = reg.opened[key];
    if (entry.refs == 0) {
      UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
      cudaIpcMemHandle_t ch;
      std::memcpy(&ch, key.data(), sizeof(ch));
      void* p = nullptr;
      cudaError_t e = cudaIpcOpenMemHandle(&p, ch, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) reg.opened.erase(key);
      UIPC_CUDA_CHECK(e);
      entry.ptr = p;
    }
    ++entry.refs;
    record_region(entry.ptr, bytes, "peer mapping (IPC handle)");
    return PeerMapping(this, entry.ptr, bytes, nullptr);
  }

  // Pinned device memory from cuMemCreate, requested shareable as a POSIX descriptor,
  // mapped at a reserved address with read/write access for this device.
  DeviceBuffer alloc_fd_shareable(size_t bytes) override {
    const VmmApi& vmm = require_vmm();
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));  // the driver calls below act on the current context
    CUmemAllocationProp prop = allocation_prop();
    size_t granule = 0;
    UIPC_CU_CHECK(vmm.get_granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    VmmRangeGuard g;
    g.range().size = round_up(std::max<size_t>(bytes, 1), granule);
    UIPC_CU_CHECK(vmm.create(&g.range().handle, g.range().size, &prop, 0));
    map_range(g, granule);
    const CUdeviceptr ptr = g.ptr();
    record_region(reinterpret_cast<void*>(ptr), bytes, "descriptor-shared buffer");
    return DeviceBuffer(this, reinterpret_cast<void*>(ptr), bytes, g.take());
  }

  int export_fd(const DeviceBuffer& buf) override {
    UIPC_CHECK(is_vmm_range(buf.impl()), "export_fd: the buffer was not allocated with alloc_fd_shareable");
    const VmmApi& vmm = require_vmm();
    int fd = -1;
    UIPC_CU_CHECK(vmm.export_handle(&fd, static_cast<const VmmRange*>(buf.impl())->handle,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    return fd;
  }

  PeerMapping import_fd(int fd, size_t bytes) override {
    FdGuard owned(fd);  // ours from here on; the imported handle keeps the memory
    UIPC_CHECK(fd >= 0, "import_fd: invalid descriptor " + std::to_string(fd));
    const VmmApi& vmm = require_vmm();
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    VmmRangeGuard g;
    // The driver reads the descriptor from the pointer-sized argument itself.
    UIPC_CU_CHECK(vmm.import_handle(&g.range().handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    // The granule of the memory's own device (the exporter's GPU), which its size is a
    // whole number of.
    CUmemAllocationProp prop{};
    UIPC_CU_CHECK(vmm.get_properties(&prop, g.range().handle));
    size_t granule = 0;
    UIPC_CU_CHECK(vmm.get_granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    g.range().size = round_up(std::max<size_t>(bytes, 1), granule);
    map_range(g, granule);
    const CUdeviceptr ptr = g.ptr();
    record_region(reinterpret_cast<void*>(ptr), bytes, "peer mapping (descriptor)");
    return PeerMapping(this, reinterpret_cast<void*>(ptr), bytes, g.take());
  }

  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    check_reach("copy_to_device", "destination", dst, bytes);
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    UIPC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy returns once the data is staged, before the DMA
    // has landed; and our streams do not wait for the legacy stream. Wait for it here:
    // otherwise a kernel on another stream, or a peer writing an epoch word that was
    // just zeroed, can race the copy (a peer's epoch overwritten by late zeros is a
    // wait that never ends).
    UIPC_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    check_reach("copy_to_host", "source", src, bytes);
    UIPC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  size_t free_memory() const override {
    size_t free_b = 0, total_b = 0;
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    UIPC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
  }

  std::unique_ptr<Stream> create_stream(StreamPriority p) override {
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    int least = 0, greatest = 0;
    UIPC_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s = nullptr;
    UIPC_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, p == StreamPriority::kHigh ? greatest : least));
    auto stream = std::make_unique<CudaStream>(this, s);
    std::lock_guard<std::mutex> lock(logs_m_);
    logs_.erase(std::remove_if(logs_.begin(), logs_.end(), [](const auto& w) { return w.expired(); }), logs_.end());
    logs_.push_back(stream->log());
    return stream;
  }
  std::unique_ptr<Event> create_event(EventUse use = EventUse::kTimed) override {
    UIPC_CUDA_CHECK(cudaSetDevice(ordinal_));
    cudaEvent_t e = nullptr;
    // An ordering event is never timed: no timestamp to take.
    UIPC_CUDA_CHECK(use == EventUse::kOrdering ? cudaEventCreateWithFlags(&e, cudaEventDisableTiming)
                                               : cudaEventCreate(&e));
    return std::make_unique<CudaEvent>(this, e, use);
  }
  void stream_wait_event(Stream& s, Event& e) override {
    auto* ce = dynamic_cast<CudaEvent*>(&e);
    UIPC_CHECK(ce != nullptr, "an event of another device was passed to the CUDA device");
    UIPC_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(s).get(), ce->for_wait(capturing_), 0));
  }
  double elapsed_ms(Event& start, Event& end) override {
    auto* a = dynamic_cast<CudaEvent*>(&start);
    auto* b = dynamic_cast<CudaEvent*>(&end);
    UIPC_CHECK(a && b, "events of another device were passed to the CUDA device");
    float ms = 0.0f;
    UIPC_CUDA_CHECK(cudaEventElapsedTime(&ms, a->get(), b->get()));
    return ms;
  }

  void copy_2d(Stream& s, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
               size_t height) override {
    if (width_bytes == 0 || height == 0) return;
    check_reach_2d("copy_2d", "destination", dst, height, dst_pitch, width_bytes);
    check_reach_2d("copy_2d", "source", src, height, src_pitch, width_bytes);
    UIPC_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width_bytes, height, cudaMemcpyDefault,
                                      cuda_stream(s).get()));
  }
  void copy_2d_batch(Stream& s, const std::vector<Copy2DOp>& ops) override {
    std::vector<cudaMemcpy3DBatchOp> batch;
    batch.reserve(ops.size());
    for (const Copy2DOp& o : ops) {
      if (o.width == 0 || o.height == 0) continue;
      UIPC_CHECK(o.width <= o.src_pitch && o.width <= o.dst_pitch, "copy_2d_batch: width above a pitch");
      check_reach_2d("copy_2d_batch", "destination", o.dst, o.height, o.dst_pitch, o.width);
      check_reach_2d("copy_2d_batch", "source", o.src, o.height, o.src_pitch, o.width);
      cudaMemcpy3DBatchOp b{};
      b.src.type = cudaMemcpyOperandTypePointer;
      b.src.op.ptr.ptr = const_cast<void*>(o.src);
      b.src.op.ptr.rowLength = o.src_pitch;  // bytes: pointer operands count bytes
      b.src.op.ptr.layerHeight = o.height;
      b.dst.type = cudaMemcpyOperandTypePointer;
      b.dst.op.ptr.ptr = o.dst;
      b.dst.op.ptr.rowLength = o.dst_pitch;
      b.dst.op.ptr.layerHeight = o.height;
      b.extent = cudaExtent{o.width, o.height, 1};
      b.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      batch.push_back(b);
    }
    if (batch.empty()) return;
    if (batch.size() == 1 || capturing_) {  // one copy, or a graph (a node each): plain calls
      if (capturing_) {
        for (const Copy2DOp& c : ops) copy_2d(s, c.dst, c.dst_pitch, c.src, c.src_pitch, c.width, c.height);
        return;
      }
      const Copy2DOp* o = nullptr;
      for (const Copy2DOp& c : ops)
        if (c.width != 0 && c.height != 0) o = &c;
      copy_2d(s, o->dst, o->dst_pitch, o->src, o->src_pitch, o->width, o->height);
      return;
    }
    UIPC_CUDA_CHECK(cudaMemcpy3DBatchAsync(batch.size(), batch.data(), 0, cuda_stream(s).get()));
  }
  void memset(Stream& s, void* dst, int byte, size_t bytes) override {
    check_reach("memset", "destination", dst, bytes);
    UIPC_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, cuda_stream(s).get()));
  }

  void write_value64(Stream& s, uint64_t* addr, uint64_t v) override {
    const auto& api = require_memops();
    // Flags 0: ordered after the stream's preceding work, with a memory barrier, so a
    // peer that sees the value also sees the copies before it.
    UIPC_CU_CHECK(api.write_value64(static_cast<CUstream>(cuda_stream(s).get()), reinterpret_cast<CUdeviceptr>(addr),
                                    v, 0));
    if (capturing_) capture_values_.push_back(GraphValueOp{false, addr, v, {}});
  }
  void wait_value64_geq(Stream& s, const uint64_t* addr, uint64_t v, const WaitLabel& label) override {
    const auto& api = require_memops();
    auto& cs = cuda_stream(s);
    UIPC_CU_CHECK(api.wait_value64(static_cast<CUstream>(cs.get()), reinterpret_cast<CUdeviceptr>(addr), v,
                                   CU_STREAM_WAIT_VALUE_GEQ));
    if (capturing_) {  // the watchdog learns of it at each launch (CudaGraph::launch)
      capture_values_.push_back(GraphValueOp{true, addr, v, label});
      return;
    }
    auto& log = *cs.log();
    std::lock_guard<std::mutex> lock(log.m);
    log.prune_locked();
    cudaEvent_t passed = log.take_locked();
    UIPC_CUDA_CHECK(cudaEventRecord(passed, cs.get()));
    log.waits.push_back(PendingWait{addr, v, label, passed});
  }

  void free_buffer(void* ptr, size_t bytes, void* impl) override {
    (void)bytes;
    forget_region(ptr);
    if (release_if_vmm(ptr, impl)) return;
    {
      auto& reg = ipc_registry();
      std::lock_guard<std::mutex> lock(reg.m);
      for (auto it = reg.exported.begin(); it != reg.exported.end();) {
        it = it->second == ptr ? reg.exported.erase(it) : std::next(it);
      }
    }
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) report_release_failure("cudaFree", cudaGetErrorString(e));
  }
  void close_mapping(void* ptr, size_t bytes, void* impl) override {
    (void)bytes;
    if (impl == &g_self_mapping_tag) return;  // our own buffer: freed by its DeviceBuffer
    if (release_if_vmm(ptr, impl)) {
      forget_region(ptr);
      return;
    }
    auto& reg = ipc_registry();
    std::lock_guard<std::mutex> lock(reg.m);
    for (auto it = reg.opened.begin(); it != reg.opened.end(); ++it) {
      if (it->second.ptr != ptr) continue;
      if (--it->second.refs == 0) {
        forget_region(ptr);
        cudaError_t e = cudaIpcCloseMemHandle(ptr);
        if (e != cudaSuccess) report_release_failure("cudaIpcCloseMemHandle", cudaGetErrorString(e));
        reg.opened.erase(it);
      }
      return;
    }
  }

  // The epoch-wait logs of every live stream of this device: a stream stuck behind
  // another (the compute stream waiting on the copy stream's handshake) is explained by
  // the other's unsatisfied wait.
  std::vector<std::shared_ptr<WaitLog>> wait_logs() {
    std::lock_guard<std::mutex> lock(logs_m_);
    std::vector<std::shared_ptr<WaitLog>> out;
    for (const auto& w : logs_)
      if (auto l = w.lock()) out.push_back(std::move(l));
    return out;
  }

  // Reads the 64-bit word at addr (device memory, local or mapped) without joining the
  // stuck streams: a separate non-blocking stream.
  bool read_word(const uint64_t* addr, uint64_t* out) {
    if (cudaMemcpyAsync(out, addr, sizeof(uint64_t), cudaMemcpyDeviceToHost, probe_) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (cudaStreamSynchronize(probe_) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return true;
  }

 private:
  const DriverApi& require_memops() {
    UIPC_CHECK(ipc_reason_.empty(), "stream memory operations are not available on " + name_ + ": " + ipc_reason_);
    return driver_api();
  }

  const VmmApi& require_vmm() {
    UIPC_CHECK(vmm_reason_.empty(), "VMM file-descriptor memory is not available on " + name_ + ": " + vmm_reason_);
    return driver_api().vmm;
  }

  // Pinned memory on this GPU whose handle can be exported as a POSIX descriptor.
  CUmemAllocationProp allocation_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }

  // Reserves an address range for g's allocation, maps it and grants this device
  // read/write access (peers' memory too: that is what copies into it need).
  void map_range(VmmRangeGuard& g, size_t granule) {
    const VmmApi& vmm = driver_api().vmm;
    UIPC_CU_CHECK(vmm.address_reserve(&g.ptr(), g.range().size, granule, 0, 0));
    UIPC_CU_CHECK(vmm.map(g.ptr(), g.range().size, 0, g.range().handle, 0));
    g.set_mapped();
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = ordinal_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    UIPC_CU_CHECK(vmm.set_access(g.ptr(), g.range().size, &access, 1));
  }

  // Why the vmm path cannot run here: everything the IPC path needs (the epoch words
  // take the same 64-bit stream memory operations, now on VMM-mapped memory), plus
  // virtual memory management and POSIX-descriptor handles.
  std::string compute_vmm_reason() const {
    if (!ipc_reason_.empty()) return ipc_reason_;
    const auto& api = driver_api();
    if (!api.vmm_missing.empty()) return "CUDA driver VMM entry points not found: " + api.vmm_missing;
    CUdevice cu_dev = 0;
    if (api.device_get(&cu_dev, ordinal_) != CUDA_SUCCESS) return "cuDeviceGet failed";
    int v = 0;
    if (api.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_dev) != CUDA_SUCCESS)
      return "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) failed";
    if (v != 1) return "the driver does not offer virtual memory management on " + name_;
    v = 0;
    if (api.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, cu_dev) !=
        CUDA_SUCCESS)
      return "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) failed";
    if (v != 1) return "the driver cannot share VMM memory as POSIX file descriptors on " + name_;
    return {};
  }

  std::string compute_ipc_reason() const {
    const auto& api = driver_api();
    if (!api.missing.empty()) return "CUDA driver entry points not found: " + api.missing;
    CUdevice cu_dev = 0;
    if (api.device_get(&cu_dev, ordinal_) != CUDA_SUCCESS) return "cuDeviceGet failed";
    int v = 0;
    // The 64-bit attribute, not the deprecated V1 one (which reads 0 on the H200 driver
    // although the v2 memops work there).
    if (api.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, cu_dev) != CUDA_SUCCESS)
      return "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS) failed";
    if (v != 1) return "the driver does not offer 64-bit stream memory operations on " + name_;
    return {};
  }

  bool capturing_ = false;                  // between begin_capture and end_capture (host thread)
  std::vector<GraphValueOp> capture_values_; // the capture's writes and waits, in order
  int ordinal_;
  std::string name_;
  std::string ipc_reason_;
  std::string vmm_reason_;
  cudaStream_t probe_ = nullptr;
  std::mutex logs_m_;
  std::vector<std::weak_ptr<WaitLog>> logs_;
};

// Names every unsatisfied epoch wait on any stream of the device (the stream that timed
// out may only be waiting behind another's handshake).
std::string describe_timeout(CudaDevice& dev, double seconds, const char* what) {
  const int rank = error_rank();
  std::ostringstream os;
  int stuck = 0;
  for (const auto& log : dev.wait_logs()) {
    std::lock_guard<std::mutex> lock(log->m);
    for (const auto& w : log->waits) {
      if (cudaEventQuery(w.passed) == cudaSuccess) continue;
      uint64_t word = 0;
      const bool read = dev.read_word(w.addr, &word);
      if (read && word >= w.value) continue;
      os << (stuck ? "; " : "") << "rank " << rank << ": peer " << w.label.peer << " did not arrive within "
         << seconds_text(seconds) << ": " << w.label.what << " (word holds "
         << (read ? std::to_string(word) : std::string("<unreadable>")) << ", needs >= " << w.value << ")";
      ++stuck;
    }
    cudaGetLastError();
  }
  if (stuck == 0) {
    os << "rank " << rank << ": " << what << " did not complete within " << seconds_text(seconds)
       << " (no epoch wait of this device is unsatisfied: a kernel or copy is still running)";
  }
  return os.str();
}

bool device_capturing(const CudaDevice* dev) { return dev->capturing(); }

// A captured layer: the CUDA graph, its executable, and its write/wait nodes in the
// order of the capture's writes and waits, updated before a launch whose values differ.
class CudaGraph final : public Graph {
 public:
  struct ValueNode {
    CUgraphNode node = nullptr;
    std::vector<CUstreamBatchMemOpParams> params;  // the node's operations
    size_t index = 0;                              // which of them is this value
    unsigned flags = 0;
    CUcontext ctx = nullptr;
  };
  CudaGraph(cudaGraph_t g, cudaGraphExec_t exec, cudaStream_t origin, std::shared_ptr<WaitLog> log,
            std::vector<GraphValueOp> values, std::vector<ValueNode> nodes)
      : graph_(g), exec_(exec), origin_(origin), log_(std::move(log)), values_(std::move(values)),
        nodes_(std::move(nodes)), current_(values_) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  const std::vector<GraphValueOp>& value_ops() const override { return values_; }

  void launch(Stream& origin, const std::vector<GraphValueOp>& values) override {
    cudaStream_t cs = cuda_stream(origin).get();
    UIPC_CHECK(cs == origin_, "graph launch: not the stream the graph was captured on");
    UIPC_CHECK(values.size() == values_.size(), "graph launch: " + std::to_string(values.size()) + " values for " +
                                                    std::to_string(values_.size()) + " captured writes and waits");
    const auto& api = driver_api().graph;
    for (size_t i = 0; i < values.size(); ++i) {
      UIPC_CHECK(values[i].wait == values_[i].wait && values[i].addr == values_[i].addr,
                 "graph launch: value " + std::to_string(i) + " is not for the captured word");
      if (values[i].value == current_[i].value) continue;
      ValueNode& n = nodes_[i];
      CUstreamBatchMemOpParams& p = n.params[n.index];
      if (values[i].wait)
        p.waitValue.value64 = values[i].value;
      else
        p.writeValue.value64 = values[i].value;
      CUDA_BATCH_MEM_OP_NODE_PARAMS np{};
      np.ctx = n.ctx;
      np.count = static_cast<unsigned>(n.params.size());
      np.paramArray = n.params.data();
      np.flags = n.flags;
      UIPC_CU_CHECK(api.exec_set_memop(reinterpret_cast<CUgraphExec>(exec_), n.node, &np));
      current_[i].value = values[i].value;
    }
    UIPC_CUDA_CHECK(cudaGraphLaunch(exec_, cs));
    // The watchdog names the graph's waits that have not passed when a stream stalls:
    // each is passed once the launch is done.
    std::lock_guard<std::mutex> lock(log_->m);
    log_->prune_locked();
    for (const GraphValueOp& v : values) {
      if (!v.wait) continue;
      cudaEvent_t passed = log_->take_locked();
      UIPC_CUDA_CHECK(cudaEventRecord(passed, cs));
      log_->waits.push_back(PendingWait{v.addr, v.value, v.label, passed});
    }
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t origin_;
  std::shared_ptr<WaitLog> log_;
  std::vector<GraphValueOp> values_;
  std::vector<ValueNode> nodes_;  // [value]
  std::vector<GraphValueOp> current_;
};

std::unique_ptr<Graph> CudaDevice::end_capture(Stream& origin) {
  UIPC_CHECK(capturing_, "end_capture: no graph is being captured");
  capturing_ = false;
  std::vector<GraphValueOp> values = std::move(capture_values_);
  capture_values_.clear();
  CudaStream& cs = cuda_stream(origin);
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(cs.get(), &g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (g) cudaGraphDestroy(g);
    throw RuntimeError(std::string("the CUDA graph capture of a layer failed: ") + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + "); run with --graphs off");
  }
  struct GraphGuard {
    cudaGraph_t g;
    ~GraphGuard() {
      if (g) cudaGraphDestroy(g);
    }
  } guard{g};
  // The write/wait nodes, matched to the capture's values by operation, word and value.
  const auto& api = driver_api().graph;
  size_t count = 0;
  UIPC_CU_CHECK(api.get_nodes(reinterpret_cast<CUgraph>(g), nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  UIPC_CU_CHECK(api.get_nodes(reinterpret_cast<CUgraph>(g), nodes.data(), &count));
  std::vector<CudaGraph::ValueNode> found(values.size());
  std::vector<bool> matched(values.size(), false);
  size_t memops = 0;
  for (CUgraphNode n : nodes) {
    CUgraphNodeType type{};
    UIPC_CU_CHECK(api.node_type(n, &type));
    if (type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) continue;
    CUDA_BATCH_MEM_OP_NODE_PARAMS np{};
    UIPC_CU_CHECK(api.memop_params(n, &np));
    std::vector<CUstreamBatchMemOpParams> params(np.paramArray, np.paramArray + np.count);
    for (size_t j = 0; j < params.size(); ++j) {
      ++memops;
      const auto op = params[j].operation;
      const bool wait = op == CU_STREAM_MEM_OP_WAIT_VALUE_64;
      UIPC_CHECK(wait || op == CU_STREAM_MEM_OP_WRITE_VALUE_64,
                 "the CUDA graph of a layer holds a memory operation of kind " + std::to_string(op) +
                     ", which the layer never issues");
      const CUdeviceptr addr = wait ? params[j].waitValue.address : params[j].writeValue.address;
      const uint64_t value = wait ? params[j].waitValue.value64 : params[j].writeValue.value64;
      size_t i = 0;
      while (i < values.size() && (matched[i] || values[i].wait != wait ||
                                   reinterpret_cast<CUdeviceptr>(values[i].addr) != addr || values[i].value != value))
        ++i;
      UIPC_CHECK(i < values.size(), "the CUDA graph of a layer holds a write or wait that the capture did not issue");
      matched[i] = true;
      found[i] = CudaGraph::ValueNode{n, params, j, np.flags, np.ctx};
    }
  }
  UIPC_CHECK(memops == values.size(), "the CUDA graph of a layer holds " + std::to_string(memops) +
                                          " memory operations for the " + std::to_string(values.size()) +
                                          " writes and waits captured");
  cudaGraphExec_t exec = nullptr;
  UIPC_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  guard.g = nullptr;
  return std::make_unique<CudaGraph>(g, exec, cs.get(), cs.log(), std::move(values), std::move(found));
}

void CudaStream::synchronize() {
  const double limit = dev_->watchdog_seconds();
  if (!poll_until([&] { return query_done(cudaStreamQuery(stream_), "cudaStreamQuery(stream)"); }, limit)) {
    throw PeerTimeout(describe_timeout(*dev_, limit, "stream") + " (" + error_where(__FILE__, __LINE__) + ")");
  }
  log_->passed_all();
}

void CudaEvent::synchronize() {
  const double limit = dev_->watchdog_seconds();
  if (!poll_until([&] { return query_done(cudaEventQuery(get()), "cudaEventQuery(event)"); }, limit)) {
    throw PeerTimeout(describe_timeout(*dev_, limit, "event") + " (" + error_where(__FILE__, __LINE__) + ")");
  }
}

}  // namespace

std::string cu_error_string(int result) {
  const auto& api = driver_api();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name) api.get_error_name(static_cast<CUresult>(result), &name);
  if (api.get_error_string) api.get_error_string(static_cast<CUresult>(result), &text);
  std::string out = name ? name : ("CUresult " + std::to_string(result));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

std::unique_ptr<Device> make_cuda_device(int ordinal) { return std::make_unique<CudaDevice>(ordinal); }

int cuda_usable_device_count(std::string* reason) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (n <= 0) {
    if (reason) *reason = "the CUDA driver sees no device";
    return 0;
  }
  return n;
}

std::string cuda_ipc_ineligible_reason(Device& dev) {
  if (dev.kind() != DeviceKind::kCuda) return "not a CUDA device (" + dev.name() + ")";
  auto* cd = dynamic_cast<CudaDevice*>(&dev);
  if (cd == nullptr) return "not a device of comm/cuda_device (" + dev.name() + ")";
  return cd->ipc_reason();
}

bool cuda_can_access_peer(int dev_a, int dev_b) {
  if (dev_a == dev_b) return true;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, dev_a, dev_b) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return can != 0;
}

std::string cuda_version_string() {
  int rt = 0, drv = 0;
  std::string s;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess)
    s = "runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
    s += ", driver " + std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10);
  return s;
}

}  // namespace uipc
