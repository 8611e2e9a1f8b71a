// The recording decorator of the device layer (comm/device/tracing_device.hpp).
#include "comm/device/tracing_device.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstring>

#include "base/error.hpp"

namespace uipc {
namespace {

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h == 0 ? 1 : h;  // 0 means "private memory"
}

// A descriptor's identity: the open file it refers to (the same on both ends of a
// descriptor passed over a Unix socket). 0 when it cannot be told.
uint64_t fd_identity(int fd, size_t bytes) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return 0;
  uint64_t parts[3] = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), bytes};
  return fnv1a(parts, sizeof(parts));
}

class TracingStream final : public Stream {
 public:
  TracingStream(TracingDevice& dev, std::unique_ptr<Stream> inner, int index)
      : dev_(dev), inner_(std::move(inner)), index_(index) {}
  void synchronize() override {
    dev_.on_stream_sync(index_);
    inner_->synchronize();
  }
  void* native() override { return inner_->native(); }
  Stream& inner() { return *inner_; }
  int index() const { return index_; }

 private:
  TracingDevice& dev_;
  std::unique_ptr<Stream> inner_;
  int index_;
};

class TracingEvent final : public Event {
 public:
  TracingEvent(TracingDevice& dev, std::unique_ptr<Event> inner)
      : Event(inner->use()), dev_(dev), inner_(std::move(inner)) {}
  void record(Stream& s) override { dev_.on_event_record(*inner_, s, last_op_, generation_); }
  bool query() override {
    dev_.on_event_query();
    return inner_->query();
  }
  void synchronize() override {
    dev_.on_event_sync(last_op_, generation_);
    inner_->synchronize();
  }
  Event& inner() { return *inner_; }
  int last_op() const { return last_op_; }
  uint64_t generation() const { return generation_; }

 private:
  TracingDevice& dev_;
  std::unique_ptr<Event> inner_;
  int last_op_ = model::kNoOp;  // the kEventRecord op of its last record in a trace
  uint64_t generation_ = 0;     // the trace that op belongs to (0: none)
};

TracingStream& tracing_stream(Stream& s) {
  auto* t = dynamic_cast<TracingStream*>(&s);
  UIPC_CHECK(t != nullptr, "a stream of another device was passed to the tracing device");
  return *t;
}

TracingEvent& tracing_event(Event& e) {
  auto* t = dynamic_cast<TracingEvent*>(&e);
  UIPC_CHECK(t != nullptr, "an event of another device was passed to the tracing device");
  return *t;
}

}  // namespace

TracingDevice::TracingDevice(std::unique_ptr<Device> inner, int world_rank, int world_size, bool elide_data)
    : inner_(std::move(inner)), rank_(world_rank), world_(world_size), elide_(elide_data) {
  UIPC_CHECK(inner_ != nullptr, "TracingDevice: nothing to wrap");
  Device::set_watchdog_seconds(inner_->watchdog_seconds());
}

TracingDevice::~TracingDevice() = default;

Stream& TracingDevice::inner_stream(Stream& s) { return tracing_stream(s).inner(); }

// --- memory identity

void TracingDevice::note_region(const void* ptr, size_t bytes, uint64_t id, model::Via via, bool runtime_alloc) {
  if (!ptr) return;
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t end = start + std::max<size_t>(bytes, 1);
  // Addresses are reused after a free the decorator does not see: drop what overlaps.
  auto it = regions_.lower_bound(start);
  if (it != regions_.begin() && std::prev(it)->second.end > start) --it;
  while (it != regions_.end() && it->first < end) it = regions_.erase(it);
  regions_[start] = Region{end, id, via, runtime_alloc};
}

void TracingDevice::free_buffer(void* ptr, size_t bytes, void* impl) {
  note_host_call("a free");
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  auto it = regions_.find(start);
  bool runtime = false;
  if (it != regions_.end()) {
    runtime = it->second.runtime_alloc;
    if (runtime) on_device_sync();
    regions_.erase(it);
  }
  const HostTime timed(*this,
                       append_host_call(runtime ? model::HostCall::kFreeRuntime : model::HostCall::kFreeVmm, bytes));
  inner_->free_buffer(ptr, bytes, impl);
}

void TracingDevice::close_mapping(void* ptr, size_t bytes, void* impl) {
  note_host_call("the closing of a mapping");
  auto it = regions_.find(reinterpret_cast<uintptr_t>(ptr));
  const bool handle = it != regions_.end() && it->second.via == model::Via::kIpcHandle;
  if (it != regions_.end()) regions_.erase(it);
  const HostTime timed(*this,
                       append_host_call(handle ? model::HostCall::kCloseHandle : model::HostCall::kCloseFd, bytes));
  inner_->close_mapping(ptr, bytes, impl);
}

const TracingDevice::Region* TracingDevice::region_of(const void* ptr, uintptr_t* start) const {
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  auto it = regions_.upper_bound(a);
  if (it == regions_.begin()) return nullptr;
  --it;
  if (a >= it->second.end) return nullptr;
  if (start) *start = it->first;
  return &it->second;
}

void TracingDevice::set_export_id(const void* ptr, uint64_t id) {
  uintptr_t start = 0;
  const Region* r = region_of(ptr, &start);
  if (!r || id == 0) return;
  regions_[start].id = id;
  if (std::find(exported_.begin(), exported_.end(), id) == exported_.end()) exported_.push_back(id);
}

DeviceBuffer TracingDevice::alloc(size_t bytes, bool exportable) {
  note_host_call("an allocation");
  DeviceBuffer b;
  {
    const HostTime timed(*this, append_host_call(model::HostCall::kAllocRuntime, bytes));
    b = inner_->alloc(bytes, exportable).rehome(this);  // its free comes through here
  }
  note_region(b.get(), bytes, 0, model::Via::kLocal, true);
  return b;
}

DeviceBuffer TracingDevice::alloc_fd_shareable(size_t bytes) {
  note_host_call("an allocation");
  DeviceBuffer b;
  {
    const HostTime timed(*this, append_host_call(model::HostCall::kAllocVmm, bytes));
    b = inner_->alloc_fd_shareable(bytes).rehome(this);
  }
  note_region(b.get(), bytes, 0, model::Via::kLocal);
  return b;
}

IpcHandle TracingDevice::export_handle(const DeviceBuffer& buf) {
  note_host_call("an export");
  IpcHandle h;
  {
    const HostTime timed(*this, append_host_call(model::HostCall::kExportHandle, buf.bytes()));
    h = inner_->export_handle(buf);
  }
  set_export_id(buf.get(), fnv1a(h.bytes.data(), h.bytes.size()));
  return h;
}

PeerMapping TracingDevice::open_handle(const IpcHandle& h, size_t bytes) {
  note_host_call("a mapping");
  PeerMapping m;
  {
    const HostTime timed(*this, append_host_call(model::HostCall::kOpenHandle, bytes));
    m = inner_->open_handle(h, bytes).rehome(this);  // its close comes through here
  }
  note_region(m.get(), bytes, fnv1a(h.bytes.data(), h.bytes.size()), model::Via::kIpcHandle);
  return m;
}

int TracingDevice::export_fd(const DeviceBuffer& buf) {
  note_host_call("an export");
  int fd = -1;
  {
    const HostTime timed(*this, append_host_call(model::HostCall::kExportFd, buf.bytes()));
    fd = inner_->export_fd(buf);
  }
  set_export_id(buf.get(), fd_identity(fd, buf.bytes()));
  return fd;
}

void TracingDevice::close_export(int fd, size_t bytes) {
  note_host_call("the close of an export");
  const HostTime timed(*this, append_host_call(model::HostCall::kCloseExport, bytes));
  inner_->close_export(fd, bytes);
}

PeerMapping TracingDevice::import_fd(int fd, size_t bytes) {
  note_host_call("a mapping");
  const int index = append_host_call(model::HostCall::kImportFd, bytes);
  const uint64_t id = fd_identity(fd, bytes);  // before the wrapped device takes (and closes) it
  PeerMapping m;
  {
    const HostTime timed(*this, index);
    m = inner_->import_fd(fd, bytes).rehome(this);
  }
  note_region(m.get(), bytes, id, model::Via::kFileDescriptor);
  return m;
}

// --- streams and events

std::unique_ptr<Stream> TracingDevice::create_stream(StreamPriority p) {
  note_host_call("the creation of a stream");
  const int index = static_cast<int>(streams_.size());
  streams_.push_back(model::StreamInfo{p == StreamPriority::kHigh});
  last_op_of_stream_.push_back(model::kNoOp);
  return std::make_unique<TracingStream>(*this, inner_->create_stream(p), index);
}

std::unique_ptr<Event> TracingDevice::create_event(EventUse use) {
  note_host_call("the creation of an event");
  return std::make_unique<TracingEvent>(*this, inner_->create_event(use));
}

int TracingDevice::append(Stream* s, model::Op op) {
  if (!recording_) return model::kNoOp;
  const int index = static_cast<int>(trace_.ops.size());
  if (s) {
    op.stream = tracing_stream(*s).index();
    last_op_of_stream_[op.stream] = index;
  }
  trace_.ops.push_back(op);
  brackets_.emplace_back();
  return index;
}

int TracingDevice::append_host_call(model::HostCall what, size_t bytes) {
  model::Op op;
  op.kind = model::OpKind::kHostCall;
  op.dims[0] = static_cast<int64_t>(what);
  op.bytes = static_cast<double>(bytes);
  return append(nullptr, op);
}

TracingDevice::HostTime::HostTime(TracingDevice& dev, int index)
    : dev_(dev), index_(dev.measure_ && dev.recording_ ? index : model::kNoOp) {
  if (index_ != model::kNoOp) t0_ = std::chrono::steady_clock::now();  // a measured trace only
}

TracingDevice::HostTime::~HostTime() {
  if (index_ == model::kNoOp || !dev_.recording_) return;
  dev_.trace_.ops[static_cast<size_t>(index_)].measured_host_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
}

void TracingDevice::record_op(Stream& s, model::Op op, bool data_work, std::function<void(Stream&)> run, uint64_t key,
                              const GraphValueOp* value) {
  Stream& in = inner_stream(s);
  if (window_ == Window::kCapture || window_ == Window::kReplay) {
    key = op_key(key, tracing_stream(s).index(), op.kind, op.kernel, op.collective);
    if (window_ == Window::kCapture) {
      keys_.push_back(key);
    } else if (!diverged_) {
      if (replay_pos_ < replay_->keys.size() && replay_->keys[replay_pos_] == key) {
        ++replay_pos_;
        if (value) held_values_.push_back(*value);
        held_.emplace_back(&in, std::move(run));
        return;
      }
      diverge(replay_pos_ < replay_->keys.size()
                  ? "operation " + std::to_string(replay_pos_) + " differs from the captured one"
                  : "the layer issued more operations than the " + std::to_string(replay_->keys.size()) + " captured");
    }
  }
  const int index = append(&s, op);
  const bool bracket = index != model::kNoOp && measure_;
  if (bracket) {
    brackets_[index] = {inner_->create_event(), inner_->create_event()};
    brackets_[index].first->record(in);
  }
  {
    const HostTime timed(*this, index);
    if (!(data_work && elide_)) run(in);
  }
  if (bracket) brackets_[index].second->record(in);
}

void TracingDevice::on_event_record(Event& inner_event, Stream& s, int& last_op, uint64_t& generation) {
  model::Op op;
  op.kind = model::OpKind::kEventRecord;
  op.dims[0] = inner_event.use() == EventUse::kOrdering ? 1 : 0;
  int index = model::kNoOp;
  record_op(s, op, false, [ev = &inner_event](Stream& in) { ev->record(in); }, op_key(&inner_event));
  if (recording_) index = static_cast<int>(trace_.ops.size()) - 1;
  last_op = index;
  generation = recording_ ? generation_ : 0;
}

void TracingDevice::on_event_sync(int last_op, uint64_t generation) {
  note_host_call("a host wait for an event");
  model::Op op;
  op.kind = model::OpKind::kHostSync;
  op.waits_for = generation == generation_ ? last_op : model::kNoOp;
  append(nullptr, op);
}

void TracingDevice::on_device_sync() {
  for (int last : last_op_of_stream_) {
    if (last == model::kNoOp) continue;
    model::Op op;
    op.kind = model::OpKind::kHostSync;
    op.waits_for = last;
    append(nullptr, op);
  }
}

void TracingDevice::on_stream_sync(int stream_index) {
  note_host_call("a stream synchronization");
  model::Op op;
  op.kind = model::OpKind::kHostSync;
  op.waits_for = last_op_of_stream_[stream_index];
  append(nullptr, op);
}

void TracingDevice::stream_wait_event(Stream& s, Event& e) {
  TracingEvent& te = tracing_event(e);
  model::Op op;
  op.kind = model::OpKind::kStreamWaitEvent;
  op.waits_for = te.generation() == generation_ && recording_ ? te.last_op() : model::kNoOp;
  Event* inner_event = &te.inner();
  record_op(s, op, false, [this, inner_event](Stream& in) { inner_->stream_wait_event(in, *inner_event); },
            op_key(inner_event));
}

double TracingDevice::elapsed_ms(Event& start, Event& end) {
  TracingEvent& a = tracing_event(start);
  TracingEvent& b = tracing_event(end);
  require_timed(a, "elapsed_ms");
  require_timed(b, "elapsed_ms");
  if (!modeled_) return inner_->elapsed_ms(a.inner(), b.inner());
  UIPC_CHECK(a.generation() == generation_ && b.generation() == generation_ && a.last_op() >= 0 && b.last_op() >= 0 &&
                 static_cast<size_t>(std::max(a.last_op(), b.last_op())) < modeled_->size(),
             "elapsed_ms: modelled times asked for an event that the last trace did not record");
  return (*modeled_)[b.last_op()].end_ms - (*modeled_)[a.last_op()].end_ms;
}

// --- data movement and the handshake

model::Op TracingDevice::copy_op(void* dst, const void* src, size_t width, size_t height) const {
  model::Op op;
  op.kind = model::OpKind::kCopy;
  op.bytes = static_cast<double>(width) * static_cast<double>(height);
  op.dims[0] = static_cast<int64_t>(width);
  op.dims[1] = static_cast<int64_t>(height);
  if (const Region* r = region_of(src, nullptr)) op.src_mem = r->id, op.src_via = r->via;
  if (const Region* r = region_of(dst, nullptr)) op.dst_mem = r->id, op.dst_via = r->via;
  return op;
}

void TracingDevice::copy_2d(Stream& s, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                            size_t width_bytes, size_t height) {
  record_op(s, copy_op(dst, src, width_bytes, height), true,
            [=, this](Stream& in) { inner_->copy_2d(in, dst, dst_pitch, src, src_pitch, width_bytes, height); },
            op_key(dst, dst_pitch, src, src_pitch, width_bytes, height));
}

void TracingDevice::copy_2d_batch(Stream& s, const std::vector<Copy2DOp>& ops) {
  if (ops.empty()) return;
  // The batch's first copy is recorded (and bracketed) around the one wrapped call; the
  // others follow it in the trace, and take its measured times in end_trace().
  uint64_t key = op_key(ops.size());
  for (const Copy2DOp& o : ops) key = op_key(key, o.dst, o.dst_pitch, o.src, o.src_pitch, o.width, o.height);
  record_op(s, copy_op(ops[0].dst, ops[0].src, ops[0].width, ops[0].height), true,
            [this, ops](Stream& in) { inner_->copy_2d_batch(in, ops); }, key);
  for (size_t i = 1; i < ops.size(); ++i) {
    model::Op op = copy_op(ops[i].dst, ops[i].src, ops[i].width, ops[i].height);
    op.dims[2] = static_cast<int64_t>(i);
    append(&s, op);
  }
}

void TracingDevice::memset(Stream& s, void* dst, int byte, size_t bytes) {
  model::Op op;
  op.kind = model::OpKind::kMemset;
  op.bytes = static_cast<double>(bytes);
  record_op(s, op, true, [=, this](Stream& in) { inner_->memset(in, dst, byte, bytes); }, op_key(dst, byte, bytes));
}

namespace {
// The word's memory id and offset in it (private memory: id 0 and the address).
void locate_word(const void* addr, uint64_t id, uintptr_t start, bool found, model::Op& op) {
  op.word_mem = found ? id : 0;
  op.word_offset = found && id != 0 ? reinterpret_cast<uintptr_t>(addr) - start : reinterpret_cast<uintptr_t>(addr);
}
}  // namespace

void TracingDevice::write_value64(Stream& s, uint64_t* addr, uint64_t v) {
  model::Op op;
  op.kind = model::OpKind::kWriteValue;
  op.value = v;
  uintptr_t start = 0;
  const Region* r = region_of(addr, &start);
  locate_word(addr, r ? r->id : 0, start, r != nullptr, op);
  if (r) op.dst_via = r->via;
  last_written_[{op.word_mem, op.word_offset}] = v;
  const GraphValueOp value{false, addr, v, {}};
  record_op(s, op, false, [=, this](Stream& in) { inner_->write_value64(in, addr, v); }, op_key(addr), &value);
}

void TracingDevice::wait_value64_geq(Stream& s, const uint64_t* addr, uint64_t v, const WaitLabel& label) {
  model::Op op;
  op.kind = model::OpKind::kWaitValue;
  op.value = v;
  op.label_peer = label.peer;
  uintptr_t start = 0;
  const Region* r = region_of(addr, &start);
  locate_word(addr, r ? r->id : 0, start, r != nullptr, op);
  const GraphValueOp value{true, addr, v, label};
  record_op(s, op, false, [=, this](Stream& in) { inner_->wait_value64_geq(in, addr, v, label); }, op_key(addr),
            &value);
}

int TracingDevice::group_index(const std::vector<int>& world_ranks) {
  for (size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i] == world_ranks) return static_cast<int>(i);
  groups_.push_back(world_ranks);
  return static_cast<int>(groups_.size()) - 1;
}

// --- graphs

void TracingDevice::note_host_call(const char* what) {
  switch (window_) {
    case Window::kNone: return;
    case Window::kWatch:
    case Window::kCapture:
      if (unsteady_.empty()) unsteady_ = what;
      return;
    case Window::kReplay:
      if (!diverged_) diverge(std::string(what) + " after operation " + std::to_string(replay_pos_));
      return;
  }
}

void TracingDevice::diverge(const std::string& why) {
  diverged_ = true;
  diverged_why_ = why;
  auto held = std::move(held_);
  held_.clear();
  held_values_.clear();
  for (auto& [stream, run] : held) run(*stream);
}

void TracingDevice::begin_watch() {
  UIPC_CHECK(window_ == Window::kNone && !recording_, "begin_watch: a graph window or a trace is open");
  window_ = Window::kWatch;
  unsteady_.clear();
}

std::string TracingDevice::end_watch() {
  UIPC_CHECK(window_ == Window::kWatch, "end_watch: no layer is watched");
  window_ = Window::kNone;
  return unsteady_;
}

void TracingDevice::begin_capture_layer(Stream& origin) {
  UIPC_CHECK(window_ == Window::kNone && !recording_, "begin_capture_layer: a graph window or a trace is open");
  inner_->begin_capture(inner_stream(origin));
  window_ = Window::kCapture;
  capture_origin_ = &origin;
  unsteady_.clear();
  keys_.clear();
}

CapturedLayer TracingDevice::end_capture_layer(Stream& origin) {
  UIPC_CHECK(window_ == Window::kCapture, "end_capture_layer: no layer is captured");
  window_ = Window::kNone;
  CapturedLayer c;
  c.graph = inner_->end_capture(inner_stream(origin));
  c.keys = std::move(keys_);
  keys_.clear();
  if (!unsteady_.empty())
    throw RuntimeError("the graph capture of a layer met " + unsteady_ +
                       ", which a graph cannot hold (the layer before it was steady); run with --graphs off");
  return c;
}

void TracingDevice::begin_replay(const CapturedLayer& c) {
  UIPC_CHECK(window_ == Window::kNone && !recording_, "begin_replay: a graph window or a trace is open");
  UIPC_CHECK(c.graph != nullptr, "begin_replay: no graph");
  window_ = Window::kReplay;
  replay_ = &c;
  replay_pos_ = 0;
  diverged_ = false;
  diverged_why_.clear();
  held_.clear();
  held_values_.clear();
}

bool TracingDevice::end_replay(Stream& origin, std::string* why) {
  UIPC_CHECK(window_ == Window::kReplay, "end_replay: no layer is replayed");
  if (!diverged_ && replay_pos_ != replay_->keys.size())
    diverge("the layer issued " + std::to_string(replay_pos_) + " of the " + std::to_string(replay_->keys.size()) +
            " captured operations");
  window_ = Window::kNone;
  const CapturedLayer* c = replay_;
  replay_ = nullptr;
  if (diverged_) {
    if (why) *why = diverged_why_;
    return false;
  }
  std::vector<GraphValueOp> values = std::move(held_values_);
  held_.clear();
  held_values_.clear();
  c->graph->launch(inner_stream(origin), values);
  return true;
}

void TracingDevice::launch(const CapturedLayer& c, Stream& origin) {
  c.graph->launch(inner_stream(origin), c.graph->value_ops());
}

void TracingDevice::abandon_window() noexcept {
  const Window w = window_;
  window_ = Window::kNone;
  replay_ = nullptr;
  held_.clear();
  held_values_.clear();
  keys_.clear();
  if (w == Window::kCapture && capture_origin_) {
    try {
      inner_->end_capture(inner_stream(*capture_origin_));
    } catch (...) {
      // The layer failed already; its capture is dropped whatever state it is in.
    }
  }
  capture_origin_ = nullptr;
}

// --- begin and end

void TracingDevice::begin_trace(bool measure) {
  UIPC_CHECK(!recording_, "begin_trace: a trace is already being recorded");
  ++generation_;
  trace_ = model::RankTrace{};
  for (const auto& [word, value] : last_written_) trace_.prior_writes.push_back({word.first, word.second, value});
  brackets_.clear();
  std::fill(last_op_of_stream_.begin(), last_op_of_stream_.end(), model::kNoOp);
  measure_ = measure;
  if (measure_) {
    if (!ref_stream_) {
      ref_stream_ = inner_->create_stream(StreamPriority::kNormal);
      ref_event_ = inner_->create_event();
    }
    ref_event_->record(*ref_stream_);  // an idle stream: it completes at once
  }
  recording_ = true;
}

model::RankTrace TracingDevice::end_trace() {
  UIPC_CHECK(recording_, "end_trace: no trace is being recorded");
  recording_ = false;
  trace_.rank = rank_;
  trace_.world = world_;
  trace_.streams = streams_;
  trace_.exported = exported_;
  trace_.groups = groups_;
  if (measure_) {
    ref_event_->synchronize();
    for (size_t i = 0; i < brackets_.size(); ++i) {
      auto& [b, e] = brackets_[i];
      if (!b) continue;
      e->synchronize();
      trace_.ops[i].measured_start_ms = inner_->elapsed_ms(*ref_event_, *b);
      trace_.ops[i].measured_end_ms = inner_->elapsed_ms(*ref_event_, *e);
    }
    for (size_t i = 1; i < trace_.ops.size(); ++i) {  // the rest of a copy batch: the batch's times
      model::Op& op = trace_.ops[i];
      if (op.kind == model::OpKind::kCopy && op.dims[2] > 0) {
        op.measured_start_ms = trace_.ops[i - 1].measured_start_ms;
        op.measured_end_ms = trace_.ops[i - 1].measured_end_ms;
      }
    }
  }
  brackets_.clear();
  return trace_;
}

}  // namespace uipc
