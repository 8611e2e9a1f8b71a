// The pieces of the IPC protocol that a transport drives over the ranks of one node:
// how shareable memory is allocated and mapped (MappingPath: IPC handles or file
// descriptors), the cache of final-layout targets shared with every rank of the group
// (TargetCache), and the grouped epoch handshake on signal words in that memory
// (EpochHandshake). The ipc and vmm transports (comm/transport/ipc_transport.cpp) are these pieces
// over a Ulysses group on one node; the hierarchical transport (comm/transport/hier_transport.cpp)
// drives the same pieces over the node-local part of a group that spans nodes.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap.hpp"
#include "comm/device/device.hpp"
#include "comm/transport/transport.hpp"

namespace uipc {

enum class MappingKind { kIpcHandle, kFileDescriptor };

// How a transport's shareable memory (targets and signal words) is allocated and made
// visible to every rank of the group. Collective where it talks to peers.
class MappingPath {
 public:
  virtual ~MappingPath() = default;
  virtual const char* transport_name() const = 0;  // "ipc" or "vmm"
  virtual DeviceBuffer alloc(size_t bytes) = 0;
  // Shares `buf` with every rank of the group and maps every peer's into `maps`;
  // returns where to write for each rank (`buf` itself for this rank).
  virtual std::vector<void*> exchange(const DeviceBuffer& buf, size_t bytes, std::vector<PeerMapping>& maps,
                                      const std::string& what) = 0;
};

// ipc: device allocations, handles as bytes over MPI, sealed once every peer opened them;
// vmm: library-owned memory shared as descriptors over Unix sockets (comm/fd_exchange).
// `comm` must outlive the path.
std::unique_ptr<MappingPath> make_mapping_path(MappingKind kind, Device& dev, const MpiComm& comm);

// What identifies a cached target. Identical on every rank for the same submission (so
// nothing rank-local, such as the device ordinal, belongs in it).
struct TargetKey {
  int64_t tag, dir, batch, tokens, heads, head_dim, dtype;  // tokens: the group's (ExchangeShape::seq), or the shard's
  bool operator==(const TargetKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  std::string describe() const;
};
TargetKey target_key(const Submission& sub);

// A buffer of every rank of the group, mapped on every other: `mine`, and where to write
// for each rank (`mine` itself for this rank).
struct SharedTarget {
  TargetKey key;
  DeviceBuffer mine;
  std::vector<PeerMapping> mapped;  // peers' buffers mapped here (none for myself)
  std::vector<void*> peer_ptr;
  uint64_t last_used = 0;
  bool pinned = false;  // in use since the last release: not evictable
};

// Targets by key, bounded to `capacity` entries, reused across layers and steps. A miss
// is collective (every rank must miss on the same key at the same point, checked over
// `agree`: the group whose submissions must match, `comm` itself unless a transport
// spans more than the ranks that share the memory); an eviction drains what may still
// touch the victim (`quiesce`), then importers close before exporters free. A target
// looked up since the last unpin_all() (the consumer's release) is pinned: in use by
// this layer, never evicted; a layer that needs more targets than `capacity` is an
// error naming the cache size it needs. keep = false is the no-target-cache ablation:
// the first lookup after a release evicts every target, so each layer allocates and
// exchanges its own.
class TargetCache {
 public:
  TargetCache(Device& dev, const MpiComm& comm, MappingPath& path, int capacity, TransportStats& stats,
              MPI_Comm agree = MPI_COMM_NULL, bool keep = true)
      : dev_(dev), comm_(comm), path_(path), capacity_(capacity < 1 ? 1 : capacity), stats_(stats),
        agree_(agree == MPI_COMM_NULL ? comm.get() : agree), keep_(keep) {}
  // The target for `key`, `bytes` long on every rank, pinned. `quiesce` runs before an
  // eviction: no copy of this rank into a peer's target, nor its consumer's read, may be
  // in flight. A layer's repeated lookups of one key count as one hit.
  SharedTarget& get(const TargetKey& key, size_t bytes, const std::function<void()>& quiesce);
  void unpin_all();
  std::vector<SharedTarget>& entries() { return cache_; }
  void close_mappings();

 private:
  void evict_lru(const std::function<void()>& quiesce);
  void evict(std::vector<SharedTarget>::iterator victim, const std::function<void()>& quiesce);

  Device& dev_;
  const MpiComm& comm_;
  MappingPath& path_;
  int capacity_;
  TransportStats& stats_;
  MPI_Comm agree_;
  bool keep_;
  std::vector<SharedTarget> cache_;
  uint64_t use_clock_ = 0;
};

// The grouped epoch handshake over signal words shared by every rank of the group
// (group g has epoch e = g + 1; R = the epoch of this rank's last release, the same on
// every rank at the same point of the program):
//   wait_released (copy stream, first submission):  my.release[p] >= R for every p
//     (R, not e - 1: with one group per tensor several groups pass between releases, and
//     waiting for the release of a group still to be consumed would deadlock)
//   ready (copy stream, the barrier):  peer[p].ready[me] = e, then my.ready[p] >= e
//   release (consumer stream):  peer[p].release[me] = e  (my targets may be rewritten)
// Every wait is on this rank's own memory and bounded by the device watchdog. A driver
// may ask for `extra_words` more words per writer for signals of its own (peer_word /
// my_word), zero at the start like the others.
class EpochHandshake {
 public:
  EpochHandshake(Device& dev, const MpiComm& comm, MappingPath& path, int extra_words = 0);
  void wait_released(Stream& s, uint64_t released_epoch);
  void ready(Stream& s, uint64_t epoch, const std::string& tags);
  void release(Stream& consumer, uint64_t epoch);
  // My extra word `word` at `peer` (I am its writer), and the one `from` writes here.
  uint64_t* peer_word(int peer, int word);
  const uint64_t* my_word(int from, int word);
  void close_mappings() { maps_.clear(); }
  int world_rank(int p) const { return world_rank_[static_cast<size_t>(p)]; }

 private:
  int words_per_writer() const { return 2 + extra_; }
  uint64_t* mine(int from, int slot) { return signals_.as<uint64_t>() + static_cast<size_t>(slot) * peers_ + from; }
  uint64_t* at(int peer, int slot) {
    return static_cast<uint64_t*>(peer_signals_[static_cast<size_t>(peer)]) + static_cast<size_t>(slot) * peers_ + me_;
  }

  Device& dev_;
  int me_ = 0, peers_ = 1, extra_ = 0;
  DeviceBuffer signals_;  // [slot][writer]: slot 0 ready, 1 release, 2.. extra
  std::vector<PeerMapping> maps_;
  std::vector<void*> peer_signals_;
  std::vector<int> world_rank_;  // of each rank of the group: what wait labels name
};

}  // namespace uipc
