// The IPC transports (`ipc` and `vmm`): every rank copies its slices straight from the
// (possibly strided) source view into each peer's cached final-layout target, on a
// high-priority copy stream, and a group of submissions (Q, K, V) pays one GPU-side
// epoch handshake. The two differ only in how targets and signal words are allocated,
// shared and mapped (the MappingPath of comm/transport/ipc_protocol.hpp, where the target cache
// and the epoch handshake live too); the protocol is this one code:
//  - ipc: device allocations, IPC handles exchanged over MPI (cudaIpc*; /dev/shm names
//    on the host device), sealed once every peer has opened them;
//  - vmm: library-owned memory (CUDA VMM: cuMemCreate with POSIX-descriptor handles;
//    memfd on the host device), descriptors passed over Unix sockets (comm/fd_exchange).
// Why VMM + descriptors and not NCCL 2.28 registered windows for the library-owned path:
// the protocol needs pitched copy-engine copies into its own final-layout targets and
// its own epoch words driven by stream memory operations. VMM gives exactly that memory
// and those mappings without tying the data path to a NCCL communicator (which cannot
// even be created for several ranks on one GPU), whereas windows would make the
// transport that is meant to be the alternative to NCCL depend on NCCL.
//
// Epoch protocol (per communicator; group g has epoch e = g + 1; R = the epoch of this
// rank's last release(); EpochHandshake):
//   copy stream, first submission of a group:
//     wait  my.release[p] >= R       for every peer p   (p finished reading what it had)
//   copy stream, each submission:      copies into every peer's target
//   copy stream, the barrier submission:
//     write peer[p].ready[me] = e     for every peer p
//     wait  my.ready[p] >= e          for every peer p  -> group done event
//   consumer stream, release():
//     write peer[p].release[me] = e   for every peer p   (my targets may be rewritten)
// Every wait is on this rank's own memory and bounded by the device watchdog. A rank's
// own slice is copied on a second stream beside the peers' copies, unless its producer
// wrote it into the target itself (own_slice()).
#include <algorithm>
#include <map>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/transport/exchange_geometry.hpp"
#include "comm/transport/group_exchange.hpp"
#include "comm/transport/ipc_protocol.hpp"
#include "comm/transport/transport.hpp"

namespace uipc {
namespace {

class IpcTransport : public Transport {
 public:
  IpcTransport(Device& dev, MPI_Comm group, const TransportOptions& opts, MappingKind kind)
      : dev_(dev),
        comm_(dup_comm(group)),
        path_(make_mapping_path(kind, dev, comm_)),
        cache_(dev, comm_, *path_, opts.cache_capacity, stats_, MPI_COMM_NULL, opts.cache_targets),
        handshake_(dev, comm_, *path_),
        time_v_copy_(opts.time_v_copy) {
    me_ = comm_.rank();
    peers_ = comm_.size();
    copy_ = dev_.create_stream(opts.copy_priority);
    self_ = dev_.create_stream(opts.copy_priority);
    // Joins of the copy streams to the producer and back, within a layer: edges of a
    // captured layer, no nodes (EventUse).
    ready_evt_ = dev_.create_event(EventUse::kOrdering);
    layer_start_ = dev_.create_event(EventUse::kOrdering);
    self_done_ = dev_.create_event(EventUse::kOrdering);
    released_ = dev_.create_event();
  }

  ~IpcTransport() override {
    // Local release only (no collective): drain our streams, then drop mappings and memory.
    try {
      drain_copies();
    } catch (...) {
      // Already failing; the error was reported where it happened.
    }
  }

  std::string name() const override { return path_->transport_name(); }

  OwnSlice own_slice(Tag tag, const ExchangeShape& shape) override {
    const std::string bad = exchange_shape_problem(shape, me_, peers_);
    UIPC_CHECK(bad.empty(), "ipc: " + bad);
    Submission sub;
    sub.tag = tag;
    sub.dir = Direction::kScatter;
    sub.shape = shape;
    return own_slice_of(target(sub).mine.get(), shape, me_, peers_);
  }

  // The copy stream follows the producer from the layer's start: a graph capture takes a
  // stream in only from such a wait, and the group's wait for the peers' release may then
  // come before the wait for the producer's data (as op by op, where it runs beside the
  // projection). A producer that calls this calls it every layer.
  void begin_layer(Stream& producer) override {
    layer_start_->record(producer);
    dev_.stream_wait_event(*copy_, *layer_start_);
    joined_ = true;
  }

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    const std::string bad = exchange_shape_problem(sub.shape, me_, peers_);
    UIPC_CHECK(bad.empty(), "ipc: " + bad);
    UIPC_CHECK(!sub.own_slice_written || sub.dir == Direction::kScatter, "only a scatter's own slice can be pre-written");
    // The copy streams read the source only once the producer has written it. The peers'
    // slices go on the copy stream, my own slice on a second stream beside it, so that
    // the local copy runs while the link is busy instead of after it; the copy stream
    // waits for it before the tag's interval ends (and so before the group's handshake).
    // Without begin_layer, the copy stream follows the producer's data before anything else
    // of a new group (its release wait too): a graph capture takes a stream in only from
    // there on.
    const bool copy_self = !sub.own_slice_written;
    auto follow_producer = [&] {
      ready_evt_->record(producer);
      dev_.stream_wait_event(*copy_, *ready_evt_);
      if (copy_self) dev_.stream_wait_event(*self_, *ready_evt_);
    };
    // The stream already follows the producer (an open group, or begin_layer): the group's
    // release wait first, then the data; else the data first.
    const bool following = group_ || joined_;
    if (!following) follow_producer();
    if (!group_) open_group();
    if (following) follow_producer();
    // Past this point a failure is raised, never turned into a fallback: peers may
    // already be copying into our targets for this group.
    SharedTarget& t = target(sub);
    group_->tags += std::string(group_->tags.empty() ? "" : ",") + tag_name(sub.tag);
    // Only V's copies are timed (the overlap the report gives): two event records less
    // per other tensor and layer, host time that the near-empty layer's floor is made of.
    const bool timed = sub.tag == Tag::kV && time_v_copy_;
    auto& iv = intervals_[sub.tag];
    if (timed && !iv.first) iv = {dev_.create_event(), dev_.create_event()};
    if (timed) iv.first->record(*copy_);
    // The peers' copies as one batch on the copy stream (one enqueue, not one per peer
    // and batch), my own slice on the second stream.
    std::vector<Copy2DOp> ops;
    for (int i = 0; i < peers_; ++i) {
      const int peer = (me_ + 1 + i) % peers_;  // start with the next rank: spreads the load
      if (peer == me_ && !copy_self) continue;
      for (const Copy2D& c : exchange_copies(sub, me_, peer, peers_)) {
        const Copy2DOp op{static_cast<unsigned char*>(t.peer_ptr[peer]) + c.dst_offset, c.dst_pitch,
                          static_cast<const unsigned char*>(sub.src) + c.src_offset, c.src_pitch, c.width, c.height};
        if (peer == me_)
          dev_.copy_2d(*self_, op.dst, op.dst_pitch, op.src, op.src_pitch, op.width, op.height);
        else
          ops.push_back(op);
      }
    }
    dev_.copy_2d_batch(*copy_, ops);
    if (copy_self) {
      self_done_->record(*self_);
      dev_.stream_wait_event(*copy_, *self_done_);
    }
    if (timed) iv.second->record(*copy_);

    auto ex = std::make_unique<GroupExchange>(t.mine.get(), group_, dev_);
    if (sub.barrier) close_group();
    return ex;
  }

  void release(Stream& consumer) override {
    UIPC_CHECK(!group_, "release() while a group is still open");
    handshake_.release(consumer, epoch_);
    released_->record(consumer);
    released_epoch_ = epoch_;
    cache_.unpin_all();
  }

  std::pair<Event*, Event*> copy_interval(Tag tag) override {
    auto it = intervals_.find(tag);
    if (it == intervals_.end() || !it->second.first) return {nullptr, nullptr};
    return {it->second.first.get(), it->second.second.get()};
  }

  TransportStats stats() const override { return stats_; }
  std::string graph_ineligible_reason() const override { return ""; }

  void close_peer_mappings() override {
    drain_copies();
    cache_.close_mappings();
    handshake_.close_mappings();
  }

 private:
  // Waits for every copy this rank has submitted: to its peers and to itself.
  void drain_copies() {
    copy_->synchronize();
    self_->synchronize();
  }

  SharedTarget& target(const Submission& sub) {
    // Every rank's target the size of the largest (uneven shards and heads differ by one).
    return cache_.get(target_key(sub),
                      static_cast<size_t>(exchange_max_result_elems(sub.shape, sub.dir, peers_)) *
                          dtype_size(sub.shape.dtype),
                      [this] { quiesce(); });
  }

  // Before an eviction: nothing of ours in flight into the victim, our consumer done.
  void quiesce() {
    drain_copies();
    if (released_epoch_ > 0) released_->synchronize();
  }

  void open_group() {
    group_ = std::make_shared<GroupCompletion>();
    group_->epoch = ++epoch_;
    group_->done = group_events_.take();
    group_->finisher = copy_.get();
    handshake_.wait_released(*copy_, released_epoch_);
    ++stats_.groups;
  }

  void close_group() {
    handshake_.ready(*copy_, group_->epoch, group_->tags);
    group_->done->record(*copy_);
    group_->closed = true;
    ++stats_.handshakes;
    group_.reset();
  }

  Device& dev_;
  MpiComm comm_;
  TransportStats stats_;
  std::unique_ptr<MappingPath> path_;  // ipc or vmm: the only difference between them
  TargetCache cache_;
  EpochHandshake handshake_;
  bool time_v_copy_;  // V's copies timed (TransportOptions::time_v_copy)
  int me_ = 0, peers_ = 1;
  std::unique_ptr<Stream> copy_, self_;
  std::unique_ptr<Event> ready_evt_, self_done_, released_, layer_start_;
  uint64_t epoch_ = 0, released_epoch_ = 0;
  bool joined_ = false;  // begin_layer made the copy stream follow the producer
  std::shared_ptr<GroupCompletion> group_;
  EventPool group_events_{dev_};
  std::map<Tag, std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> intervals_;
};

}  // namespace

std::unique_ptr<Transport> make_ipc_transport(Device& dev, MPI_Comm group, const TransportOptions& opts) {
  return std::make_unique<IpcTransport>(dev, group, opts, MappingKind::kIpcHandle);
}

std::unique_ptr<Transport> make_vmm_transport(Device& dev, MPI_Comm group, const TransportOptions& opts) {
  return std::make_unique<IpcTransport>(dev, group, opts, MappingKind::kFileDescriptor);
}

}  // namespace uipc
