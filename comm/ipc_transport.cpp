// The IPC transports (`ipc` and `vmm`): every rank copies its slices straight from the
// (possibly strided) source view into each peer's cached final-layout target, on a
// high-priority copy stream, and a group of submissions (Q, K, V) pays one GPU-side
// epoch handshake. The two differ only in how targets and signal words are allocated,
// shared and mapped (the MappingPath below); the protocol is this one code:
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
// Epoch protocol (per communicator; group g has epoch e = g + 1):
//   copy stream, first submission of a group:
//     wait  my.release[p] >= e - 1   for every peer p   (p finished reading group e-1)
//   copy stream, each submission:      copies into every peer's target
//   copy stream, the barrier submission:
//     write peer[p].ready[me] = e     for every peer p
//     wait  my.ready[p] >= e          for every peer p  -> group done event
//   consumer stream, release():
//     write peer[p].release[me] = e   for every peer p   (my targets may be rewritten)
// Every wait is on this rank's own memory and bounded by the device watchdog.
#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/exchange_geometry.hpp"
#include "comm/fd_exchange.hpp"
#include "comm/group_exchange.hpp"
#include "comm/transport.hpp"

namespace uipc {
namespace {

// What identifies a cached target. Identical on every rank for the same submission (so
// nothing rank-local, such as the device ordinal, belongs in it).
struct TargetKey {
  int64_t tag, dir, batch, seq_local, heads, head_dim, dtype;
  bool operator==(const TargetKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  std::string describe() const {
    std::ostringstream s;
    s << "tag " << tag_name(static_cast<Tag>(tag)) << (dir == 0 ? " scatter" : " gather") << " (B" << batch
      << ", S/P " << seq_local << ", H " << heads << ", D " << head_dim << ", "
      << dtype_name(static_cast<DType>(dtype)) << ")";
    return s.str();
  }
};

struct Target {
  TargetKey key;
  DeviceBuffer mine;                 // my final-layout result; peers copy into it
  std::vector<PeerMapping> mapped;   // peers' targets mapped here (none for myself)
  std::vector<void*> peer_ptr;       // where to copy for each peer (mine for myself)
  uint64_t last_used = 0;
};

enum class MappingKind { kIpcHandle, kFileDescriptor };

// How a transport's shareable memory (targets and signal words) is allocated and made
// visible to every rank of the group. Collective where it talks to peers.
class MappingPath {
 public:
  virtual ~MappingPath() = default;
  virtual const char* transport_name() const = 0;
  virtual DeviceBuffer alloc(size_t bytes) = 0;
  // Shares `buf` with every rank of the group and maps every peer's into `maps`;
  // returns where to write for each rank (`buf` itself for this rank).
  virtual std::vector<void*> exchange(const DeviceBuffer& buf, size_t bytes, std::vector<PeerMapping>& maps,
                                      const std::string& what) = 0;
};

// IPC handles as bytes over MPI; every peer opens them, then the names are sealed.
class IpcHandlePath final : public MappingPath {
 public:
  IpcHandlePath(Device& dev, const MpiComm& comm) : dev_(dev), comm_(comm) {}
  const char* transport_name() const override { return "ipc"; }
  DeviceBuffer alloc(size_t bytes) override { return dev_.alloc(bytes, /*exportable=*/true); }
  std::vector<void*> exchange(const DeviceBuffer& buf, size_t bytes, std::vector<PeerMapping>& maps,
                              const std::string& what) override {
    const int me = comm_.rank(), peers = comm_.size();
    IpcHandle mine = dev_.export_handle(buf);
    std::vector<IpcHandle> all(peers);
    allgather_bounded(comm_.get(), mine.bytes.data(), static_cast<int>(mine.bytes.size()), all.data(),
                      dev_.watchdog_seconds(), what);
    std::vector<void*> ptrs(peers, nullptr);
    maps.clear();
    for (int p = 0; p < peers; ++p) {
      if (p == me) {
        ptrs[p] = buf.get();
        continue;
      }
      maps.push_back(dev_.open_handle(all[p], bytes));
      ptrs[p] = maps.back().get();
    }
    barrier_bounded(comm_.get(), dev_.watchdog_seconds(), what + " (opened)");
    dev_.seal_export(buf);
    return ptrs;
  }

 private:
  Device& dev_;
  const MpiComm& comm_;
};

// Library-owned memory shared as file descriptors over Unix sockets. A descriptor names
// nothing in the system, so there is nothing to seal and nothing a crash leaves behind;
// an exporter may free its buffer while a descriptor is in flight (the descriptor keeps
// the memory), so no barrier is needed after the imports.
class FileDescriptorPath final : public MappingPath {
 public:
  FileDescriptorPath(Device& dev, const MpiComm& comm)
      : dev_(dev), me_(comm.rank()), fdx_(comm.get(), dev.watchdog_seconds()) {}
  const char* transport_name() const override { return "vmm"; }
  DeviceBuffer alloc(size_t bytes) override { return dev_.alloc_fd_shareable(bytes); }
  std::vector<void*> exchange(const DeviceBuffer& buf, size_t bytes, std::vector<PeerMapping>& maps,
                              const std::string& what) override {
    UniqueFd mine(dev_.export_fd(buf));
    std::vector<UniqueFd> all = fdx_.allgather(mine.get(), dev_.watchdog_seconds(), what);
    std::vector<void*> ptrs(all.size(), nullptr);
    maps.clear();
    for (size_t p = 0; p < all.size(); ++p) {
      if (static_cast<int>(p) == me_) {
        ptrs[p] = buf.get();
        continue;
      }
      maps.push_back(dev_.import_fd(all[p].release(), bytes));
      ptrs[p] = maps.back().get();
    }
    return ptrs;
  }

 private:
  Device& dev_;
  int me_;
  FdExchange fdx_;
};

class IpcTransport : public Transport {
 public:
  IpcTransport(Device& dev, MPI_Comm group, int capacity, MappingKind kind)
      : dev_(dev), comm_(dup_comm(group)), capacity_(std::max(1, capacity)) {
    me_ = comm_.rank();
    peers_ = comm_.size();
    if (kind == MappingKind::kFileDescriptor)
      path_ = std::make_unique<FileDescriptorPath>(dev_, comm_);
    else
      path_ = std::make_unique<IpcHandlePath>(dev_, comm_);
    copy_ = dev_.create_stream(StreamPriority::kHigh);
    self_ = dev_.create_stream(StreamPriority::kHigh);
    ready_evt_ = dev_.create_event();
    self_done_ = dev_.create_event();
    released_ = dev_.create_event();
    // Signal words: ready[peers] then release[peers], zero (device memory starts zeroed
    // on the host device; set explicitly for CUDA).
    signals_ = path_->alloc(2 * peers_ * sizeof(uint64_t));
    std::vector<uint64_t> zeros(2 * peers_, 0);
    dev_.copy_to_device(signals_.get(), zeros.data(), zeros.size() * sizeof(uint64_t));
    peer_signals_ =
        path_->exchange(signals_, 2 * peers_ * sizeof(uint64_t), signal_maps_, "the signal-word exchange");
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

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    UIPC_CHECK(sub.shape.heads % peers_ == 0, "heads must divide by the group size");
    if (!group_) open_group();
    // Past this point a failure is raised, never turned into a fallback: peers may
    // already be copying into our targets for this group.
    Target& t = target_for(sub);
    group_->tags += std::string(group_->tags.empty() ? "" : ",") + tag_name(sub.tag);

    // The copy streams read the source only once the producer has written it. The peers'
    // slices go on the copy stream, my own slice on a second stream beside it, so that
    // the local copy runs while the link is busy instead of after it; the copy stream
    // waits for it before the tag's interval ends (and so before the group's handshake).
    ready_evt_->record(producer);
    dev_.stream_wait_event(*copy_, *ready_evt_);
    dev_.stream_wait_event(*self_, *ready_evt_);
    auto& iv = intervals_[sub.tag];
    if (!iv.first) iv = {dev_.create_event(), dev_.create_event()};
    iv.first->record(*copy_);
    for (int i = 0; i < peers_; ++i) {
      const int peer = (me_ + 1 + i) % peers_;  // start with the next rank: spreads the load
      Stream& s = peer == me_ ? *self_ : *copy_;
      for (const Copy2D& c : exchange_copies(sub, me_, peer, peers_)) {
        dev_.copy_2d(s, static_cast<unsigned char*>(t.peer_ptr[peer]) + c.dst_offset, c.dst_pitch,
                     static_cast<const unsigned char*>(sub.src) + c.src_offset, c.src_pitch, c.width, c.height);
      }
    }
    self_done_->record(*self_);
    dev_.stream_wait_event(*copy_, *self_done_);
    iv.second->record(*copy_);

    auto ex = std::make_unique<GroupExchange>(t.mine.get(), group_, dev_);
    if (sub.barrier) close_group();
    return ex;
  }

  void release(Stream& consumer) override {
    UIPC_CHECK(!group_, "release() while a group is still open");
    for (int p = 0; p < peers_; ++p) dev_.write_value64(consumer, release_slot(p, me_), epoch_);
    released_->record(consumer);
    released_epoch_ = epoch_;
  }

  std::pair<Event*, Event*> copy_interval(Tag tag) override {
    auto it = intervals_.find(tag);
    if (it == intervals_.end()) return {nullptr, nullptr};
    return {it->second.first.get(), it->second.second.get()};
  }

  TransportStats stats() const override { return stats_; }

  void close_peer_mappings() override {
    drain_copies();
    for (auto& t : cache_) t.mapped.clear();
    signal_maps_.clear();
  }

 private:
  // Waits for every copy this rank has submitted: to its peers and to itself.
  void drain_copies() {
    copy_->synchronize();
    self_->synchronize();
  }

  // my own signal words
  uint64_t* my_ready(int from) { return signals_.as<uint64_t>() + from; }
  uint64_t* my_release(int from) { return signals_.as<uint64_t>() + peers_ + from; }
  // peer p's slot for writer w
  uint64_t* ready_slot(int p, int w) { return static_cast<uint64_t*>(peer_signals_[p]) + w; }
  uint64_t* release_slot(int p, int w) { return static_cast<uint64_t*>(peer_signals_[p]) + peers_ + w; }

  void open_group() {
    group_ = std::make_shared<GroupCompletion>();
    group_->epoch = ++epoch_;
    group_->done = dev_.create_event();
    group_->finisher = copy_.get();
    // Write after read: peers must have released the previous group before we copy
    // into their targets again.
    const uint64_t need = epoch_ - 1;
    if (need > 0) {
      for (int p = 0; p < peers_; ++p) {
        dev_.wait_value64_geq(*copy_, my_release(p), need,
                              WaitLabel{p, "release of group epoch " + std::to_string(need) +
                                               " (peer still reading its targets)"});
      }
    }
    ++stats_.groups;
  }

  void close_group() {
    const uint64_t e = group_->epoch;
    for (int p = 0; p < peers_; ++p) dev_.write_value64(*copy_, ready_slot(p, me_), e);
    for (int p = 0; p < peers_; ++p)
      dev_.wait_value64_geq(*copy_, my_ready(p), e,
                            WaitLabel{p, "ready epoch " + std::to_string(e) + " of the group (tags " + group_->tags + ")"});
    group_->done->record(*copy_);
    group_->closed = true;
    ++stats_.handshakes;
    group_.reset();
  }

  Target& target_for(const Submission& sub) {
    TargetKey key{static_cast<int64_t>(sub.tag), static_cast<int64_t>(sub.dir), sub.shape.batch, sub.shape.seq_local,
                  sub.shape.heads, sub.shape.head_dim, static_cast<int64_t>(sub.shape.dtype)};
    ++use_clock_;
    for (auto& t : cache_) {
      if (t.key == key) {
        t.last_used = use_clock_;
        ++stats_.cache_hits;
        return t;
      }
    }
    // A miss is collective: every rank must miss on the same key at the same point.
    set_activity("in a target-cache miss (collective)");
    ++stats_.cache_misses;
    std::vector<TargetKey> keys(peers_);
    allgather_bounded(comm_.get(), &key, sizeof(key), keys.data(), dev_.watchdog_seconds(),
                      "the target-cache miss for " + key.describe());
    for (int r = 0; r < peers_; ++r) {
      if (!(keys[r] == key))
        throw RuntimeError("ranks disagree on a target-cache miss (rank " + std::to_string(me_) + ": " +
                           key.describe() + "; rank " + std::to_string(r) + ": " + keys[r].describe() +
                           "); submissions must be identical on every rank of the group");
    }
    if (static_cast<int>(cache_.size()) >= capacity_) evict_lru();
    Target t;
    t.key = key;
    size_t bytes = static_cast<size_t>(exchange_result_elems(sub.shape)) * dtype_size(sub.shape.dtype);
    set_activity("allocating and exchanging a scatter/gather target");
    t.mine = path_->alloc(bytes);
    t.peer_ptr = path_->exchange(t.mine, bytes, t.mapped, "the target exchange for " + key.describe());
    t.last_used = use_clock_;
    cache_.push_back(std::move(t));
    return cache_.back();
  }

  // Evicts the least recently used target. Collective like the miss that causes it;
  // memory is freed only when no peer can still write into it or read from it.
  void evict_lru() {
    auto victim = std::min_element(cache_.begin(), cache_.end(),
                                   [](const Target& a, const Target& b) { return a.last_used < b.last_used; });
    set_activity("evicting a target (collective)");
    drain_copies();            // none of our copies into peers' targets (or ours) in flight
    if (released_epoch_ > 0) released_->synchronize();  // our consumer is done reading
    barrier_bounded(comm_.get(), dev_.watchdog_seconds(), "the eviction of " + victim->key.describe());
    victim->mapped.clear();    // importers close ...
    barrier_bounded(comm_.get(), dev_.watchdog_seconds(), "the eviction of " + victim->key.describe() + " (closed)");
    cache_.erase(victim);      // ... before exporters free
    ++stats_.cache_evictions;
  }

  Device& dev_;
  MpiComm comm_;
  int capacity_;
  std::unique_ptr<MappingPath> path_;  // ipc or vmm: the only difference between them
  int me_ = 0, peers_ = 1;
  std::unique_ptr<Stream> copy_, self_;
  std::unique_ptr<Event> ready_evt_, self_done_, released_;
  DeviceBuffer signals_;
  std::vector<PeerMapping> signal_maps_;
  std::vector<void*> peer_signals_;
  std::vector<Target> cache_;
  uint64_t use_clock_ = 0;
  uint64_t epoch_ = 0, released_epoch_ = 0;
  std::shared_ptr<GroupCompletion> group_;
  std::map<Tag, std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> intervals_;
  TransportStats stats_;
};

}  // namespace

std::unique_ptr<Transport> make_ipc_transport(Device& dev, MPI_Comm group, int cache_capacity) {
  return std::make_unique<IpcTransport>(dev, group, cache_capacity, MappingKind::kIpcHandle);
}

std::unique_ptr<Transport> make_vmm_transport(Device& dev, MPI_Comm group, int cache_capacity) {
  return std::make_unique<IpcTransport>(dev, group, cache_capacity, MappingKind::kFileDescriptor);
}

}  // namespace uipc
