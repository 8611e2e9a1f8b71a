// Names of the trace's enums and the byte form of a trace (for the exchange between
// ranks): little-endian PODs, counts first, every count and index checked on reading.
// The layout is the same since TRC1: kHostCall ops came later in the same fields (their
// HostCall in dims[0]), so a stored trace from before them reads as it did (it has none);
// a reader from before them refuses a trace that has some ("bad op kind 9").
#include "model/trace/trace.hpp"

#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace uipc::model {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kKernel: return "kernel";
    case OpKind::kCopy: return "copy";
    case OpKind::kMemset: return "memset";
    case OpKind::kWriteValue: return "write_value";
    case OpKind::kWaitValue: return "wait_value";
    case OpKind::kEventRecord: return "event_record";
    case OpKind::kStreamWaitEvent: return "stream_wait_event";
    case OpKind::kCollective: return "collective";
    case OpKind::kHostSync: return "host_sync";
    case OpKind::kHostCall: return "host_call";
  }
  return "?";
}

const char* kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::kNone: return "none";
    case KernelKind::kGemm: return "gemm";
    case KernelKind::kNormRope: return "norm_rope";
    case KernelKind::kAttention: return "attention";
    case KernelKind::kConvert: return "convert";
  }
  return "?";
}

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kNone: return "none";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kSendRecv: return "send_recv";
  }
  return "?";
}

const char* host_call_name(HostCall k) {
  switch (k) {
    case HostCall::kNone: return "none";
    case HostCall::kAllocRuntime: return "alloc_runtime";
    case HostCall::kAllocVmm: return "alloc_vmm";
    case HostCall::kExportHandle: return "export_handle";
    case HostCall::kExportFd: return "export_fd";
    case HostCall::kOpenHandle: return "open_handle";
    case HostCall::kImportFd: return "import_fd";
    case HostCall::kFreeRuntime: return "free_runtime";
    case HostCall::kFreeVmm: return "free_vmm";
    case HostCall::kCloseHandle: return "close_handle";
    case HostCall::kCloseFd: return "close_fd";
    case HostCall::kCloseExport: return "close_export";
  }
  return "?";
}

namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value, "POD only");
    const auto* p = reinterpret_cast<const char*>(&v);
    out_.append(p, sizeof(T));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <typename T>
  T get() {
    if (pos_ + sizeof(T) > s_.size()) throw std::runtime_error("trace: truncated byte string");
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A count that the rest of the string can hold at `min_each` bytes per item.
  uint64_t count(size_t min_each) {
    const auto n = get<uint64_t>();
    if (min_each > 0 && n > (s_.size() - pos_) / min_each) throw std::runtime_error("trace: count past the end");
    return n;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

// The byte string's first word: "TRC1", the traces stored in reports before the ops' host times
// (read still, their host times NaN); "TRC2", with them.
constexpr uint32_t kTrace1 = 0x54524331u, kTrace2 = 0x54524332u;

template <typename E>
E enum_in(int v, int lo, int hi, const char* what) {
  if (v < lo || v > hi) throw std::runtime_error(std::string("trace: bad ") + what + " " + std::to_string(v));
  return static_cast<E>(v);
}

}  // namespace

std::string serialize(const RankTrace& t) {
  Writer w;
  w.put<uint32_t>(kTrace2);
  w.put<int32_t>(t.rank);
  w.put<int32_t>(t.world);
  w.put<uint64_t>(t.streams.size());
  for (const auto& s : t.streams) w.put<uint8_t>(s.high_priority ? 1 : 0);
  w.put<uint64_t>(t.exported.size());
  for (uint64_t e : t.exported) w.put(e);
  w.put<uint64_t>(t.groups.size());
  for (const auto& g : t.groups) {
    w.put<uint64_t>(g.size());
    for (int r : g) w.put<int32_t>(r);
  }
  w.put<uint64_t>(t.prior_writes.size());
  for (const auto& p : t.prior_writes) {
    w.put(p.mem);
    w.put(p.offset);
    w.put(p.value);
  }
  w.put<uint64_t>(t.ops.size());
  for (const Op& o : t.ops) {
    w.put<int32_t>(static_cast<int32_t>(o.kind));
    w.put<int32_t>(o.stream);
    w.put<int32_t>(static_cast<int32_t>(o.kernel));
    w.put<int32_t>(static_cast<int32_t>(o.collective));
    w.put(o.flops);
    w.put(o.bytes);
    for (int64_t d : o.dims) w.put(d);
    w.put(o.src_mem);
    w.put(o.dst_mem);
    w.put<int32_t>(static_cast<int32_t>(o.src_via));
    w.put<int32_t>(static_cast<int32_t>(o.dst_via));
    w.put(o.word_mem);
    w.put(o.word_offset);
    w.put(o.value);
    w.put<int32_t>(o.label_peer);
    w.put<int32_t>(o.waits_for);
    w.put<int32_t>(o.group);
    w.put(o.sequence);
    w.put(o.measured_start_ms);
    w.put(o.measured_end_ms);
    w.put(o.measured_host_us);
  }
  return w.take();
}

RankTrace deserialize(const std::string& bytes) {
  Reader r(bytes);
  const uint32_t magic = r.get<uint32_t>();
  if (magic != kTrace1 && magic != kTrace2) throw std::runtime_error("trace: not a trace byte string");
  const bool host_times = magic == kTrace2;
  RankTrace t;
  t.rank = r.get<int32_t>();
  t.world = r.get<int32_t>();
  if (t.world < 1 || t.rank < 0 || t.rank >= t.world) throw std::runtime_error("trace: bad rank or world");
  t.streams.resize(r.count(1));
  for (auto& s : t.streams) s.high_priority = r.get<uint8_t>() != 0;
  t.exported.resize(r.count(8));
  for (auto& e : t.exported) e = r.get<uint64_t>();
  t.groups.resize(r.count(8));
  for (auto& g : t.groups) {
    g.resize(r.count(4));
    for (auto& m : g) {
      m = r.get<int32_t>();
      if (m < 0 || m >= t.world) throw std::runtime_error("trace: group member out of range");
    }
  }
  t.prior_writes.resize(r.count(24));
  for (auto& p : t.prior_writes) {
    p.mem = r.get<uint64_t>();
    p.offset = r.get<uint64_t>();
    p.value = r.get<uint64_t>();
  }
  const uint64_t n = r.count(host_times ? 108 : 100);
  t.ops.resize(n);
  for (Op& o : t.ops) {
    o.kind = enum_in<OpKind>(r.get<int32_t>(), 0, kNumOpKinds - 1, "op kind");
    o.stream = r.get<int32_t>();
    o.kernel = enum_in<KernelKind>(r.get<int32_t>(), 0, 4, "kernel kind");
    o.collective = enum_in<CollectiveKind>(r.get<int32_t>(), 0, 3, "collective kind");
    o.flops = r.get<double>();
    o.bytes = r.get<double>();
    for (int64_t& d : o.dims) d = r.get<int64_t>();
    o.src_mem = r.get<uint64_t>();
    o.dst_mem = r.get<uint64_t>();
    o.src_via = enum_in<Via>(r.get<int32_t>(), 0, 2, "memory path");
    o.dst_via = enum_in<Via>(r.get<int32_t>(), 0, 2, "memory path");
    o.word_mem = r.get<uint64_t>();
    o.word_offset = r.get<uint64_t>();
    o.value = r.get<uint64_t>();
    o.label_peer = r.get<int32_t>();
    o.waits_for = r.get<int32_t>();
    o.group = r.get<int32_t>();
    o.sequence = r.get<int64_t>();
    o.measured_start_ms = r.get<double>();
    o.measured_end_ms = r.get<double>();
    if (host_times) o.measured_host_us = r.get<double>();
    if (host_only(o.kind) ? o.stream != -1 : (o.stream < 0 || o.stream >= static_cast<int>(t.streams.size())))
      throw std::runtime_error("trace: op on a stream that does not exist");
    if (o.waits_for < kNoOp || o.waits_for >= static_cast<int>(n)) throw std::runtime_error("trace: bad dependency");
    if (o.kind == OpKind::kCollective && (o.group < 0 || o.group >= static_cast<int>(t.groups.size())))
      throw std::runtime_error("trace: collective of an unknown group");
    if (o.kind == OpKind::kHostCall && (o.dims[0] < 1 || o.dims[0] > kLastHostCall))
      throw std::runtime_error("trace: bad host call " + std::to_string(o.dims[0]));
  }
  if (!r.done()) throw std::runtime_error("trace: trailing bytes");
  return t;
}

}  // namespace uipc::model
