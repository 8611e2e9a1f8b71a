// The IPC protocol's pieces: mapping paths (handles over MPI, descriptors over Unix
// sockets), the shared target cache and the grouped epoch handshake.
#include "comm/transport/ipc_protocol.hpp"

#include <algorithm>
#include <sstream>

#include "base/error.hpp"
#include "comm/transport/exchange_geometry.hpp"
#include "comm/fd_exchange.hpp"

namespace uipc {
namespace {

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
    dev_.close_export(mine.release(), bytes);  // the peers hold theirs (at one rank nobody imports it)
    return ptrs;
  }

 private:
  Device& dev_;
  int me_;
  FdExchange fdx_;
};

}  // namespace

std::unique_ptr<MappingPath> make_mapping_path(MappingKind kind, Device& dev, const MpiComm& comm) {
  if (kind == MappingKind::kFileDescriptor) return std::make_unique<FileDescriptorPath>(dev, comm);
  return std::make_unique<IpcHandlePath>(dev, comm);
}

std::string TargetKey::describe() const {
  std::ostringstream s;
  s << "tag " << tag_name(static_cast<Tag>(tag)) << (dir == 0 ? " scatter" : " gather") << " (B" << batch
    << ", tokens " << tokens << ", H " << heads << ", D " << head_dim << ", " << dtype_name(static_cast<DType>(dtype))
    << ")";
  return s.str();
}

TargetKey target_key(const Submission& sub) {
  return TargetKey{static_cast<int64_t>(sub.tag), static_cast<int64_t>(sub.dir), sub.shape.batch,
                   sub.shape.seq > 0 ? sub.shape.seq : sub.shape.seq_local, sub.shape.heads, sub.shape.head_dim,
                   static_cast<int64_t>(sub.shape.dtype)};
}

// --- target cache

SharedTarget& TargetCache::get(const TargetKey& key, size_t bytes, const std::function<void()>& quiesce) {
  if (!keep_ && std::none_of(cache_.begin(), cache_.end(), [](const SharedTarget& t) { return t.pinned; }))
    while (!cache_.empty()) evict(cache_.begin(), quiesce);
  ++use_clock_;
  for (auto& t : cache_) {
    if (t.key == key) {
      t.last_used = use_clock_;
      if (!t.pinned) ++stats_.cache_hits;  // one use per layer: a producer's own_slice() and the submission
      t.pinned = true;
      return t;
    }
  }
  // A miss is collective: every rank must miss on the same key at the same point.
  set_activity("in a target-cache miss (collective)");
  ++stats_.cache_misses;
  int me = 0, peers = 1;
  UIPC_MPI_CHECK(MPI_Comm_rank(agree_, &me));
  UIPC_MPI_CHECK(MPI_Comm_size(agree_, &peers));
  std::vector<TargetKey> keys(peers);
  allgather_bounded(agree_, &key, sizeof(key), keys.data(), dev_.watchdog_seconds(),
                    "the target-cache miss for " + key.describe());
  for (int r = 0; r < peers; ++r) {
    if (!(keys[r] == key))
      throw RuntimeError("ranks disagree on a target-cache miss (rank " + std::to_string(me) + ": " + key.describe() +
                         "; rank " + std::to_string(r) + ": " + keys[r].describe() +
                         "); submissions must be identical on every rank of the group");
  }
  if (static_cast<int>(cache_.size()) >= capacity_) evict_lru(quiesce);
  SharedTarget t;
  t.key = key;
  set_activity("allocating and exchanging a scatter/gather target");
  t.mine = path_.alloc(bytes);
  t.peer_ptr = path_.exchange(t.mine, bytes, t.mapped, "the target exchange for " + key.describe());
  t.last_used = use_clock_;
  t.pinned = true;
  cache_.push_back(std::move(t));
  return cache_.back();
}

void TargetCache::unpin_all() {
  for (auto& t : cache_) t.pinned = false;
}

// Evicts the least recently used target not in use. Collective like the miss that
// causes it (pins are the same on every rank).
void TargetCache::evict_lru(const std::function<void()>& quiesce) {
  auto victim = cache_.end();
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (!it->pinned && (victim == cache_.end() || it->last_used < victim->last_used)) victim = it;
  if (victim == cache_.end())
    throw InputError("the IPC target cache (" + std::to_string(capacity_) +
                     " entries) cannot hold the tensors one layer uses at once; use --cache-entries " +
                     std::to_string(cache_.size() + 1) + " or more");
  evict(victim, quiesce);
}

// Memory is freed only when no peer can still write into it or read from it.
void TargetCache::evict(std::vector<SharedTarget>::iterator victim, const std::function<void()>& quiesce) {
  set_activity("evicting a target (collective)");
  quiesce();  // none of our copies into peers' targets (or ours) in flight, our consumer done reading
  barrier_bounded(comm_.get(), dev_.watchdog_seconds(), "the eviction of " + victim->key.describe());
  victim->mapped.clear();  // importers close ...
  barrier_bounded(comm_.get(), dev_.watchdog_seconds(), "the eviction of " + victim->key.describe() + " (closed)");
  cache_.erase(victim);  // ... before exporters free
  ++stats_.cache_evictions;
}

void TargetCache::close_mappings() {
  for (auto& t : cache_) t.mapped.clear();
}

// --- epoch handshake

EpochHandshake::EpochHandshake(Device& dev, const MpiComm& comm, MappingPath& path, int extra_words)
    : dev_(dev), me_(comm.rank()), peers_(comm.size()), extra_(extra_words) {
  // Zero at the start (device memory starts zeroed on the host device; set explicitly
  // for CUDA).
  const size_t words = static_cast<size_t>(words_per_writer()) * peers_;
  signals_ = path.alloc(words * sizeof(uint64_t));
  std::vector<uint64_t> zeros(words, 0);
  dev_.copy_to_device(signals_.get(), zeros.data(), zeros.size() * sizeof(uint64_t));
  peer_signals_ = path.exchange(signals_, words * sizeof(uint64_t), maps_, "the signal-word exchange");
  world_rank_ = world_ranks(comm.get());
}

void EpochHandshake::wait_released(Stream& s, uint64_t released_epoch) {
  // Write after read: peers must have released what they were reading before we copy
  // into their targets again.
  const uint64_t need = released_epoch;
  if (need == 0) return;
  for (int p = 0; p < peers_; ++p)
    dev_.wait_value64_geq(s, mine(p, 1), need,
                          WaitLabel{world_rank(p), "release of group epoch " + std::to_string(need) +
                                                        " (peer still reading its targets)"});
}

void EpochHandshake::ready(Stream& s, uint64_t epoch, const std::string& tags) {
  for (int p = 0; p < peers_; ++p) dev_.write_value64(s, at(p, 0), epoch);
  for (int p = 0; p < peers_; ++p)
    dev_.wait_value64_geq(s, mine(p, 0), epoch,
                          WaitLabel{world_rank(p), "ready epoch " + std::to_string(epoch) + " of the group (tags " + tags + ")"});
}

void EpochHandshake::release(Stream& consumer, uint64_t epoch) {
  for (int p = 0; p < peers_; ++p) dev_.write_value64(consumer, at(p, 1), epoch);
}

uint64_t* EpochHandshake::peer_word(int peer, int word) {
  UIPC_CHECK(word >= 0 && word < extra_, "EpochHandshake: no extra word " + std::to_string(word));
  return at(peer, 2 + word);
}

const uint64_t* EpochHandshake::my_word(int from, int word) {
  UIPC_CHECK(word >= 0 && word < extra_, "EpochHandshake: no extra word " + std::to_string(word));
  return mine(from, 2 + word);
}

}  // namespace uipc
