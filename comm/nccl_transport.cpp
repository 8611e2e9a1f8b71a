// The baseline transport: pack head slices into per-peer chunks, one all-to-all per
// group (NCCL on GPUs, MPI on the host device), unpack into the final layout.
// Stream order is the completion: results are ready on the producer stream. A rank's own
// slice written by its producer (own_slice()) is neither packed nor unpacked; its chunk
// of the all-to-all still travels (to this rank itself) and goes unread.
#include <map>
#include <tuple>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "comm/exchange_geometry.hpp"
#include "comm/group_exchange.hpp"
#include "comm/transport.hpp"

namespace uipc {
namespace {

struct ResultKey {
  Tag tag;
  Direction dir;
  int64_t batch, seq_local;
  int heads, head_dim;
  DType dtype;
  bool operator<(const ResultKey& o) const {
    return std::tie(tag, dir, batch, seq_local, heads, head_dim, dtype) <
           std::tie(o.tag, o.dir, o.batch, o.seq_local, o.heads, o.head_dim, o.dtype);
  }
};

class NcclTransport : public Transport {
 public:
  NcclTransport(Device& dev, Collectives& coll) : dev_(dev), coll_(coll) {}
  std::string name() const override { return "nccl"; }

  OwnSlice own_slice(Tag tag, const ExchangeShape& shape) override {
    UIPC_CHECK(shape.heads % coll_.size() == 0, "heads must divide by the group size");
    Submission sub;
    sub.tag = tag;
    sub.dir = Direction::kScatter;
    sub.shape = shape;
    return own_slice_of(result_buffer(sub), shape, coll_.rank(), coll_.size());
  }

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    const int peers = coll_.size();
    UIPC_CHECK(sub.shape.heads % peers == 0, "heads must divide by the group size");
    if (!group_) {
      group_ = std::make_shared<GroupCompletion>();
      group_->done = dev_.create_event();
      group_->finisher = &producer;
      pending_.clear();
    }
    UIPC_CHECK(group_->finisher == &producer, "all submissions of a group must come from one stream");
    void* result = result_buffer(sub);
    pending_.push_back(Pending{sub, result});
    auto ex = std::make_unique<GroupExchange>(result, group_, dev_);
    if (sub.barrier) run_group(producer);
    return ex;
  }

  void release(Stream& consumer) override { (void)consumer; }  // stream order protects the buffers

  TransportStats stats() const override { return stats_; }

 private:
  struct Pending {
    Submission sub;
    void* result;
  };

  void* result_buffer(const Submission& sub) {
    const ExchangeShape& s = sub.shape;
    ResultKey key{sub.tag, sub.dir, s.batch, s.seq_local, s.heads, s.head_dim, s.dtype};
    auto it = results_.find(key);
    if (it != results_.end()) {
      ++stats_.cache_hits;
      return it->second.get();
    }
    ++stats_.cache_misses;
    size_t bytes = static_cast<size_t>(exchange_result_elems(s)) * dtype_size(s.dtype);
    auto ins = results_.emplace(key, dev_.alloc(bytes));
    return ins.first->second.get();
  }

  // Pack every pending submission's slice for each peer into that peer's chunk, one
  // all-to-all, then unpack each received slice where it belongs in the final layout.
  void run_group(Stream& s) {
    const int peers = coll_.size(), me = coll_.rank();
    size_t chunk = 0;
    for (auto& p : pending_) chunk += exchange_slice_bytes(p.sub.shape, peers);
    if (send_.bytes() < chunk * peers) {
      s.synchronize();  // earlier groups' copies may still use the old buffers
      send_ = dev_.alloc(chunk * peers);
      recv_ = dev_.alloc(chunk * peers);
    }
    auto* send = send_.as<unsigned char>();
    auto* recv = recv_.as<unsigned char>();
    size_t offset = 0;
    for (auto& p : pending_) {
      const size_t slice = exchange_slice_bytes(p.sub.shape, peers);
      const size_t per_batch = slice / static_cast<size_t>(p.sub.shape.batch);
      for (int peer = 0; peer < peers; ++peer) {
        if (peer == me && p.sub.own_slice_written) continue;  // already in place: its chunk goes unread
        auto copies = exchange_copies(p.sub, me, peer, peers);
        for (size_t b = 0; b < copies.size(); ++b) {
          const Copy2D& c = copies[b];
          // pack: the slice's rows, back to back
          dev_.copy_2d(s, send + peer * chunk + offset + b * per_batch, c.width,
                       static_cast<const unsigned char*>(p.sub.src) + c.src_offset, c.src_pitch, c.width, c.height);
        }
      }
      offset += slice;
    }
    coll_.all_to_all(s, send, recv, chunk);
    offset = 0;
    for (auto& p : pending_) {
      const size_t slice = exchange_slice_bytes(p.sub.shape, peers);
      const size_t per_batch = slice / static_cast<size_t>(p.sub.shape.batch);
      for (int from = 0; from < peers; ++from) {
        if (from == me && p.sub.own_slice_written) continue;
        // What `from` packed for us is where exchange_copies(from -> me) puts it.
        auto copies = exchange_copies(p.sub, from, me, peers);
        for (size_t b = 0; b < copies.size(); ++b) {
          const Copy2D& c = copies[b];
          dev_.copy_2d(s, static_cast<unsigned char*>(p.result) + c.dst_offset, c.dst_pitch,
                       recv + from * chunk + offset + b * per_batch, c.width, c.width, c.height);
        }
      }
      offset += slice;
    }
    group_->done->record(s);
    group_->closed = true;
    ++stats_.groups;
    ++stats_.handshakes;  // the all-to-all is this group's one synchronisation
    group_.reset();
    pending_.clear();
  }

  Device& dev_;
  Collectives& coll_;
  std::map<ResultKey, DeviceBuffer> results_;
  DeviceBuffer send_, recv_;
  std::shared_ptr<GroupCompletion> group_;
  std::vector<Pending> pending_;
  TransportStats stats_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(Device& dev, Collectives& coll) {
  return std::make_unique<NcclTransport>(dev, coll);
}

}  // namespace uipc
