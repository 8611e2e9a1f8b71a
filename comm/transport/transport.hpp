// The transports of the Ulysses exchange, behind one interface. A transport moves a
// (possibly strided) local view into its final layout on the peers:
//  - scatter: sequence-parallel (B, S/P, H, D) with any row pitch
//             -> head-parallel (B, S, H/P, D), contiguous
//  - gather:  head-parallel (B, S, H/P, D), contiguous
//             -> sequence-parallel (B, S/P, H, D), contiguous
// Submissions are tagged (Q, K, V, O); only the last submission of a group carries the
// barrier, so a group of several tensors pays one completion handshake. The returned
// Exchange makes a consumer stream wait only when it uses the result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <mpi.h>

#include "base/dtype.hpp"
#include "comm/device/device.hpp"

namespace uipc {

enum class Tag : int { kQ = 0, kK = 1, kV = 2, kO = 3 };
enum class Direction : int { kScatter = 0, kGather = 1 };
const char* tag_name(Tag t);

// The exchanged tensor, as seen on each rank of the group before the exchange.
// Shards and head slices may be uneven (comm/transport/exchange_geometry.hpp): the group's S tokens
// and H heads are split balanced over its P ranks, rank r holding S/P tokens and H/P
// heads, the first S%P (H%P) ranks one more.
struct ExchangeShape {
  int64_t batch = 0;
  int64_t seq_local = 0;  // this rank's tokens (its shard of the group's seq)
  int heads = 0;          // heads on this rank before a scatter (H); after a gather
  int head_dim = 0;
  DType dtype = DType::kBF16;
  int64_t seq = 0;        // the group's tokens; 0: seq_local * P (even shards)
};

struct Submission {
  Tag tag = Tag::kQ;
  Direction dir = Direction::kScatter;
  const void* src = nullptr;
  int64_t src_row_pitch = 0;  // elements between token rows of src (scatter only; 0 = dense)
  ExchangeShape shape;
  bool barrier = false;       // last submission of its group
  // The producer has already written this rank's own slice where own_slice() said (on
  // the producer stream, before this submission): the transport moves only the peers'.
  bool own_slice_written = false;
};

// Where a producer may write this rank's own slice of a scatter's result itself, so that
// no copy of it remains: heads [head_begin, head_begin + head_count) of the submitted
// tensor land at this rank's tokens of the final layout. `data` is element (b = 0, first
// of this rank's tokens, head_begin, 0) there; `row_pitch` elements lie between tokens,
// `batch_pitch` between batches. data == nullptr: this transport moves the own slice
// itself (submit with own_slice_written = false).
struct OwnSlice {
  void* data = nullptr;
  int head_begin = 0, head_count = 0;
  int64_t row_pitch = 0, batch_pitch = 0;
};

// The result of one submission. data() is valid once wait() has been enqueued on the
// consumer stream; the group's barrier must have been submitted before that.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void* data() const = 0;
  virtual void wait(Stream& consumer) = 0;
};

struct TransportStats {
  int64_t groups = 0;
  int64_t handshakes = 0;
  int64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
  // The inter-node phase (hier): bytes this rank sent, and what full communication sends
  // (they differ only where V-major selective communication skipped blocks).
  int64_t inter_bytes_sent = 0, inter_bytes_full = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // The own slice of the coming scatter submission of `tag` with `shape` (identical on
  // every rank of the group: it may be collective, like a target-cache miss). Valid until
  // the consumer's release() after that submission's group.
  virtual OwnSlice own_slice(Tag tag, const ExchangeShape& shape) {
    (void)tag;
    (void)shape;
    return {};
  }
  // A layer begins on `producer` (optional; the layer pipeline calls it first): what a
  // transport may issue before the layer's data exists goes here (the IPC protocol's wait
  // for the peers' release of their targets then runs beside the projection).
  virtual void begin_layer(Stream& producer) { (void)producer; }
  // producer: the stream on which src becomes ready.
  virtual std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) = 0;
  // The consumer stream is done reading the results of the last group: peers may write
  // into those targets again once `consumer` reaches this point.
  virtual void release(Stream& consumer) = 0;
  // Events around the copies of the last group's `tag` (for the measured V/QK overlap;
  // the IPC transports time V's only), or nullptrs when the transport has no separate
  // copy stream or does not time that tag.
  virtual std::pair<Event*, Event*> copy_interval(Tag tag) { (void)tag; return {nullptr, nullptr}; }
  virtual TransportStats stats() const = 0;
  // Whether the next groups may skip what barely changed since it was last sent (V-major
  // selective communication, hier-vmajor only: false in the first denoising steps, which
  // run with full communication). Exact transports ignore it.
  virtual void set_selective(bool allowed) { (void)allowed; }
  // Closes this rank's mappings of peers' memory. Every rank of the group calls it,
  // then the group synchronises, then transports are destroyed: importers close before
  // exporters free. Streams must be idle.
  virtual void close_peer_mappings() {}
  // Why a layer over this transport cannot be captured into a graph ("" = it can).
  virtual std::string graph_ineligible_reason() const = 0;
};

// --- the transports, and the selection that walks ipc -> nccl (vmm -> nccl)

class Collectives;
struct NodeLayout;  // comm/nodes.hpp
// Makes the collectives over a communicator (NCCL on GPUs where it can run, else MPI):
// for the groups a transport forms itself (hier's rails).
using CollectivesFactory = std::function<std::unique_ptr<Collectives>(MPI_Comm)>;

// How an IPC transport (ipc, vmm) runs; the non-default values are the ablations that
// measure what each part of the design buys.
struct TransportOptions {
  int cache_capacity = 12;     // final-layout targets cached (bounded, LRU)
  bool cache_targets = true;   // false: every layer allocates and exchanges its targets anew
  StreamPriority copy_priority = StreamPriority::kHigh;  // of the copy stream
  bool time_v_copy = true;     // V's copies timed by two events (copy_interval); false: not
};

// The NCCL baseline: pack head slices, all-to-all over `coll`, unpack. One all-to-all
// per group (its submissions are packed together at the barrier).
std::unique_ptr<Transport> make_nccl_transport(Device& dev, Collectives& coll);

// nccl-ce: the same protocol on buffers registered with `coll` (a zero-CTA NCCL
// communicator, where NCCL 2.28 runs the all-to-all on copy engines; plain buffers on
// MPI collectives), one all-to-all per tensor received straight into its result. Its
// name() is "nccl-ce".
std::unique_ptr<Transport> make_nccl_ce_transport(Device& dev, Collectives& coll);

// The IPC transport over the ranks of `group` (all on one node): copies from each
// rank straight into peers' cached final-layout targets on a high-priority copy
// stream, one grouped epoch handshake per group. `cache_capacity` bounds the targets.
std::unique_ptr<Transport> make_ipc_transport(Device& dev, MPI_Comm group, const TransportOptions& opts);

// The same protocol (same copies, same handshake) on library-owned memory: targets and
// signal words from Device::alloc_fd_shareable (CUDA VMM with POSIX-descriptor handles;
// memfd on the host device), shared as descriptors over node-local Unix sockets
// (comm/fd_exchange.hpp). Its name() is "vmm".
std::unique_ptr<Transport> make_vmm_transport(Device& dev, MPI_Comm group, const TransportOptions& opts);

// Why the IPC transport cannot serve `group` ("" = it can); `group_nodes` is the node
// layout of the group's ranks (NodeLayout::of). Collective over group: all ranks get the
// same answer.
std::string ipc_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes);
// Why the vmm transport cannot serve `group` ("" = it can): the IPC checks plus
// Device::vmm_ineligible_reason() on every rank. Collective over group.
std::string vmm_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes);

// V-major's comparison, per row of two contiguous (rows x row_elems) tensors of type t:
// out[2r] = sum (now - last)^2, out[2r+1] = sum last^2, into device memory, ordered on s.
// The layer kernels provide it (LayerKernels::row_change; lib wires it in), so comm/
// runs no kernel of its own.
using RowChangeFn = std::function<void(Stream& s, const void* now, const void* last, DType t, int64_t rows,
                                       int64_t row_elems, double* out)>;

// V-major selective communication (hier-vmajor): on the inter-node phase of V's scatter,
// each block (a chunk of tokens x the destination's head slice) is sent only if its
// relative change ||now - last sent|| / ||last sent|| is at least `threshold` (and while
// set_selective(true)); the receiver keeps the block it has in its cached target. Lossy.
struct VMajorOptions {
  bool enabled = false;
  double threshold = 0.1;
  RowChangeFn row_change;
};

// The hierarchical transport (comm/transport/hier_transport.cpp) over a group that spans N >= 2
// nodes of L consecutive ranks each (`group_nodes`, NodeLayout::equal_blocks): an
// intra-node IPC phase gathers on each rank what its same-index peers on the other
// nodes need, an inter-node phase over collectives between ranks of the same local
// index (made by `make_collectives`: one message per remote node) puts it straight into
// the final layout, pipelined in `chunks` token ranges per batch. Its name() is "hier".
// With vmajor.enabled its name() is "hier-vmajor". Of `opts` it takes the cache's
// capacity and whether V's copies are timed (the ablations of the copy stream and the
// cache are ipc's and vmm's).
std::unique_ptr<Transport> make_hier_transport(Device& dev, MPI_Comm group, const NodeLayout& group_nodes,
                                               const CollectivesFactory& make_collectives, const TransportOptions& opts,
                                               int chunks, const VMajorOptions& vmajor = {});
// Why the hierarchical transport cannot serve `group` ("" = it can): one node (where
// `ipc` serves), nodes that are not equal consecutive blocks, or the IPC checks inside a
// node. Collective over group.
std::string hier_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes);

struct SelectedTransport {
  std::unique_ptr<Transport> transport;
  std::string used;             // name of the transport that serves
  std::string fallback_reason;  // why it is not the requested one ("" = it is)
  std::string note;             // what else the report should say of it (nccl-ce: whether copy engines serve)
};

// What selecting a transport for a Ulysses group needs.
struct TransportSetup {
  Device& dev;
  MPI_Comm group;
  const NodeLayout& group_nodes;      // the group's ranks' nodes (NodeLayout::of)
  Collectives& coll;                  // over the group (the nccl transport's data path)
  CollectivesFactory make_collectives;  // for the sub-groups a transport forms (hier)
  TransportOptions options;           // IPC target cache and copy stream (ipc, vmm; hier: cache size, V's timing)
  int hier_chunks = 4;                // token chunks per batch of hier's pipeline
  Collectives* ce_coll = nullptr;     // nccl-ce's zero-CTA communicator (nullptr: none could be made ...)
  std::string ce_unavailable = "no copy-engine communicator was made";  // (... and why)
  double vmajor_threshold = 0.1;      // hier-vmajor (VMajorOptions)
  RowChangeFn row_change = nullptr;   // hier-vmajor's comparison (VMajorOptions)
};

// Walks the ordered list for `requested` and takes the first that can serve:
//   ipc: ipc, nccl;   vmm: vmm, nccl;   nccl-ce: nccl-ce (on ce_coll), nccl;   nccl: nccl;
//   hier: hier (a group over several nodes), ipc (a group on one node), nccl;
//   hier-vmajor: the same walk, with V-major selective communication on hier.
// Collective over the group. Throws InputError for an unknown name. Called before any
// group starts, so a fallback never happens mid-group.
SelectedTransport select_transport(const std::string& requested, const TransportSetup& setup);

}  // namespace uipc
