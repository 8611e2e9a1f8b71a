// Op traces: what the device layer did during one layer, as plain data. The device
// layer's recording decorators (comm/tracing_device.*, kernels/tracing_kernels.*) are
// the only writers; the simulator (model/simulator.*) replays them under a machine
// description, and the report stores them. Depends on nothing but the standard library.
//
// One RankTrace per rank: its streams, and every op in the order the host issued it,
// with what the op moves or computes and what it depends on (stream order is implied
// by the stream; event waits name the record they wait for; a wait on a memory word
// names the word, which the simulator matches to the writes of every rank).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace uipc::model {

enum class OpKind : int {
  kKernel = 0,
  kCopy = 1,             // 2-D copy, local or into/out of a peer's mapped memory
  kMemset = 2,
  kWriteValue = 3,       // 64-bit stream write (the epoch handshake)
  kWaitValue = 4,        // stream wait until a 64-bit word >= value
  kEventRecord = 5,
  kStreamWaitEvent = 6,
  kCollective = 7,       // all-to-all / all-reduce over a group of ranks
  kHostSync = 8,         // the host blocks until an op of this trace is done
  kHostCall = 9,         // a memory-management call on the host (HostCall in dims[0])
};
constexpr int kNumOpKinds = 10;  // OpKind's values are 0 .. kNumOpKinds - 1
// What a kHostCall op is (its dims[0]; bytes: the size allocated, exported, mapped or freed).
// Allocations, exports, mappings and frees cost the host real time (bench_kernels' alloc
// rows) and wait for no stream; a runtime free's wait for the device is traced apart, as
// host syncs before it.
enum class HostCall : int {
  kNone = 0,
  kAllocRuntime = 1,  // Device::alloc (cudaMalloc)
  kAllocVmm = 2,      // alloc_fd_shareable (cuMemCreate, reserve, map, set access)
  kExportHandle = 3,  // export_handle (cudaIpcGetMemHandle)
  kExportFd = 4,      // export_fd (cuMemExportToShareableHandle)
  kOpenHandle = 5,    // open_handle (cudaIpcOpenMemHandle)
  kImportFd = 6,      // import_fd (cuMemImportFromShareableHandle, reserve, map, set access)
  kFreeRuntime = 7,   // free of alloc()'s memory (cudaFree)
  kFreeVmm = 8,       // free of alloc_fd_shareable's memory (unmap, release)
  kCloseHandle = 9,   // close of an IPC handle's mapping (cudaIpcCloseMemHandle)
  kCloseFd = 10,      // close of an imported descriptor's mapping (unmap, release)
  kCloseExport = 11,  // close of the exporter's own descriptor (export_fd's), once its peers have theirs
};
constexpr int kLastHostCall = 11;
enum class KernelKind : int { kNone = 0, kGemm = 1, kNormRope = 2, kAttention = 3, kConvert = 4 };
// kSendRecv: grouped point-to-point (bytes = what this rank sends in all, dims[1] = to how many)
enum class CollectiveKind : int { kNone = 0, kAllToAll = 1, kAllReduce = 2, kSendRecv = 3 };
// How the memory an op touches is reached from this rank.
enum class Via : int { kLocal = 0, kIpcHandle = 1, kFileDescriptor = 2 };

const char* op_kind_name(OpKind k);          // "kernel", "copy", ...
const char* kernel_kind_name(KernelKind k);  // "gemm", "norm_rope", ...
const char* collective_kind_name(CollectiveKind k);
const char* host_call_name(HostCall k);      // "alloc_runtime", "import_fd", ...

// Ops of the host's own timeline (stream -1): they occupy the host, not a stream.
inline bool host_only(OpKind k) { return k == OpKind::kHostSync || k == OpKind::kHostCall; }

constexpr int kNoOp = -1;

// A norm+RoPE kernel's norm kind (uipc::NormKind) and dtype (uipc::DType) in one dims[3]
// value, so the simulator can take its rate from a profile by kind and type; 0 is
// "not recorded" (traces made before it was).
inline int64_t norm_rope_code(int norm_kind, int dtype) { return 1 + 4 * norm_kind + dtype; }
inline int norm_rope_kind(int64_t code) { return code > 0 ? static_cast<int>((code - 1) / 4) : -1; }
inline int norm_rope_dtype(int64_t code) { return code > 0 ? static_cast<int>((code - 1) % 4) : -1; }

struct Op {
  OpKind kind = OpKind::kKernel;
  int stream = -1;  // index into RankTrace::streams; -1 for host-only ops (kHostSync, kHostCall)
  KernelKind kernel = KernelKind::kNone;
  CollectiveKind collective = CollectiveKind::kNone;
  double flops = 0;
  double bytes = 0;  // copy: bytes moved; kernel: bytes read + written; collective: per peer
  // gemm: M N K (output element size); attention: B S H D; norm_rope: rows heads head_dim
  // and norm_rope_code(norm kind, dtype) (0: not recorded);
  // copy: width height (place in its batch, 0: first or alone); host_call: its HostCall;
  // event_record: 1 for an ordering event (EventUse::kOrdering: an edge of a graph, no
  // node), 0 for a timed one (older traces: every event was timed)
  int64_t dims[4] = {0, 0, 0, 0};
  // Memory: 0 is this rank's own private memory; any other id names a buffer that some
  // rank exported (RankTrace::exported says whose), as this rank reaches it (`via`).
  uint64_t src_mem = 0, dst_mem = 0;
  Via src_via = Via::kLocal, dst_via = Via::kLocal;
  // Write/wait value: the word (memory id and byte offset in it) and the value.
  uint64_t word_mem = 0, word_offset = 0, value = 0;
  int label_peer = -1;  // the group rank a wait waits for (WaitLabel::peer), for messages
  // kStreamWaitEvent: the kEventRecord op it waits for; kHostSync: the op the host waits
  // for. kNoOp: recorded before the trace began (already complete).
  int waits_for = kNoOp;
  // Collectives: index into RankTrace::groups and the call's number within that group.
  int group = -1;
  int64_t sequence = 0;
  // Measured on the device (ms from the trace's start), NaN when not measured.
  double measured_start_ms = std::nan("");
  double measured_end_ms = std::nan("");
  // Measured on the host (us): how long the call that issued the op held the host (a stream
  // op's enqueue, a host call's whole call, a free's wait for the device included); NaN when
  // not measured, for host syncs, and for the copies of a batch after its first (which holds
  // the batch's one call).
  double measured_host_us = std::nan("");
};

struct StreamInfo {
  bool high_priority = false;
};

// The last value this rank wrote into a word before the trace began (words start at 0):
// the waits of the traced layer on an earlier layer's epochs are satisfied by these.
struct WordValue {
  uint64_t mem = 0, offset = 0, value = 0;
};

struct RankTrace {
  int rank = 0, world = 1;
  std::vector<StreamInfo> streams;
  std::vector<Op> ops;                    // in the order the host issued them
  std::vector<uint64_t> exported;         // ids of the memory this rank exported to peers
  std::vector<std::vector<int>> groups;   // world ranks of each collective group used
  std::vector<WordValue> prior_writes;    // what this rank had written before the trace
};

// One op's start and end (ms from the start of the traced layer): what the simulator
// computes for every op, and what the device layer's modelled clock reads back.
struct OpTime {
  double start_ms = 0, end_ms = 0;
};

// A compact byte string of a trace (for the exchange between ranks) and back. The
// reader checks every count and index; a malformed string throws std::runtime_error.
std::string serialize(const RankTrace& t);
RankTrace deserialize(const std::string& bytes);

}  // namespace uipc::model
