// The baseline transport: pack head slices into per-peer chunks, one all-to-all per
// group (NCCL on GPUs, MPI on the host device), unpack into the final layout. And nccl-ce,
// the same on buffers registered with a zero-CTA NCCL communicator, where NCCL 2.28 runs
// the all-to-all on copy engines: one per tensor, received straight into the result.
// Stream order is the completion: results are ready on the producer stream. A rank's own
// slice written by its producer (own_slice()) is neither packed nor unpacked; its chunk
// of the all-to-all still travels (to this rank itself) and goes unread.
#include <algorithm>
#include <map>
#include <tuple>

#include "base/error.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/transport/exchange_geometry.hpp"
#include "comm/transport/group_exchange.hpp"
#include "comm/transport/transport.hpp"

namespace uipc {
namespace {

struct ResultKey {
  Tag tag;
  Direction dir;
  int64_t batch, seq;
  int heads, head_dim;
  DType dtype;
  bool operator<(const ResultKey& o) const {
    return std::tie(tag, dir, batch, seq, heads, head_dim, dtype) <
           std::tie(o.tag, o.dir, o.batch, o.seq, o.heads, o.head_dim, o.dtype);
  }
};

class NcclTransport : public Transport {
 public:
  // registered: the nccl-ce transport (buffers registered with the collectives, one
  // all-to-all per tensor received straight into its result).
  NcclTransport(Device& dev, Collectives& coll, bool registered) : dev_(dev), coll_(coll), registered_(registered) {}
  std::string name() const override { return registered_ ? "nccl-ce" : "nccl"; }

  OwnSlice own_slice(Tag tag, const ExchangeShape& shape) override {
    // nccl-ce receives every rank's chunk, its own too, straight into the result: a slice
    // written there beforehand would be overwritten. The producer writes in place.
    if (registered_) return {};
    const std::string bad = exchange_shape_problem(shape, coll_.rank(), coll_.size());
    UIPC_CHECK(bad.empty(), "nccl: " + bad);
    Submission sub;
    sub.tag = tag;
    sub.dir = Direction::kScatter;
    sub.shape = shape;
    return own_slice_of(result_buffer(sub), shape, coll_.rank(), coll_.size());
  }

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    const std::string bad = exchange_shape_problem(sub.shape, coll_.rank(), coll_.size());
    UIPC_CHECK(bad.empty(), "nccl: " + bad);
    UIPC_CHECK(!(registered_ && sub.own_slice_written), "nccl-ce moves the own slice itself");
    if (!group_) {
      group_ = std::make_shared<GroupCompletion>();
      group_->done = group_events_.take();
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
  std::string graph_ineligible_reason() const override { return coll_.graph_ineligible_reason(); }

 private:
  struct Pending {
    Submission sub;
    void* result;
  };

  // A buffer of `bytes`: registered with the collectives for nccl-ce (collective: every
  // rank asks at the same point), plain device memory otherwise.
  std::unique_ptr<RegisteredBuffer> buffer(size_t bytes) {
    return registered_ ? coll_.alloc_registered(bytes) : plain_registered_buffer(dev_, bytes);
  }

  void* result_buffer(const Submission& sub) {
    const ExchangeShape& s = sub.shape;
    ResultKey key{sub.tag, sub.dir, s.batch, exchange_seq(s, coll_.size()), s.heads, s.head_dim, s.dtype};
    auto it = results_.find(key);
    if (it != results_.end()) {
      ++stats_.cache_hits;
      return it->second->get();
    }
    ++stats_.cache_misses;
    size_t bytes =
        static_cast<size_t>(exchange_result_elems(s, sub.dir, coll_.rank(), coll_.size())) * dtype_size(s.dtype);
    auto ins = results_.emplace(key, buffer(bytes));
    return ins.first->second->get();
  }

  // Staging buffers of at least `bytes` each (grown, never shrunk; growth is collective
  // like the submissions that need it).
  void ensure_staging(Stream& s, size_t bytes) {
    if (send_ && send_->bytes() >= bytes) return;
    s.synchronize();  // earlier groups' copies may still use the old buffers
    send_.reset();
    recv_.reset();
    send_ = buffer(bytes);
    recv_ = buffer(bytes);
  }

  // Packs `p`'s slice for each peer at send + at[peer] (its rows back to back, batch by
  // batch), and advances at[peer] past it.
  void pack(Stream& s, const Pending& p, unsigned char* send, std::vector<size_t>& at) {
    const int peers = coll_.size(), me = coll_.rank();
    for (int peer = 0; peer < peers; ++peer) {
      const size_t start = at[static_cast<size_t>(peer)];
      at[static_cast<size_t>(peer)] += exchange_slice_bytes(p.sub.shape, p.sub.dir, me, peer, peers);
      if (peer == me && p.sub.own_slice_written) continue;  // already in place: its part goes unread
      size_t pos = start;
      for (const Copy2D& c : exchange_copies(p.sub, me, peer, peers)) {
        dev_.copy_2d(s, send + pos, c.width, static_cast<const unsigned char*>(p.sub.src) + c.src_offset, c.src_pitch,
                     c.width, c.height);
        pos += c.width * c.height;
      }
    }
  }

  // Unpacks what each peer sent (at recv + at[from]) where it belongs in p's result, and
  // advances at[from] past it.
  void unpack(Stream& s, const Pending& p, const unsigned char* recv, std::vector<size_t>& at) {
    const int peers = coll_.size(), me = coll_.rank();
    for (int from = 0; from < peers; ++from) {
      const size_t start = at[static_cast<size_t>(from)];
      at[static_cast<size_t>(from)] += exchange_slice_bytes(p.sub.shape, p.sub.dir, from, me, peers);
      if (from == me && p.sub.own_slice_written) continue;
      // What `from` packed for us is where exchange_copies(from -> me) puts it.
      size_t pos = start;
      for (const Copy2D& c : exchange_copies(p.sub, from, me, peers)) {
        dev_.copy_2d(s, static_cast<unsigned char*>(p.result) + c.dst_offset, c.dst_pitch, recv + pos, c.width, c.width,
                     c.height);
        pos += c.width * c.height;
      }
    }
  }

  void run_group(Stream& s) {
    const int peers = coll_.size(), me = coll_.rank();
    if (registered_) {
      // nccl-ce: one all-to-all per tensor between registered buffers, every peer's chunk
      // the largest slice of any pair (uneven shards or heads pad it). With one batch and
      // even shards, a peer's chunk is exactly its tokens' block of the final layout, so
      // the result is the receive buffer: no unpack.
      for (auto& p : pending_) {
        size_t chunk = 0;
        for (int a = 0; a < peers; ++a)
          for (int b = 0; b < peers; ++b) chunk = std::max(chunk, exchange_slice_bytes(p.sub.shape, p.sub.dir, a, b, peers));
        ensure_staging(s, chunk * peers);
        std::vector<size_t> at(static_cast<size_t>(peers));
        for (int q = 0; q < peers; ++q) at[static_cast<size_t>(q)] = static_cast<size_t>(q) * chunk;
        std::vector<size_t> in = at;
        pack(s, p, static_cast<unsigned char*>(send_->get()), at);
        if (p.sub.shape.batch == 1 && p.sub.dir == Direction::kScatter && exchange_is_even(p.sub.shape, peers)) {
          coll_.all_to_all(s, send_->get(), p.result, chunk);
        } else {
          coll_.all_to_all(s, send_->get(), recv_->get(), chunk);
          unpack(s, p, static_cast<const unsigned char*>(recv_->get()), in);
        }
      }
    } else {
      // Every pending submission's slice for each peer packed into that peer's part, one
      // exchange, then each received slice unpacked where it belongs. Parts of one size
      // (even shards and heads) go in an all-to-all; uneven ones in point-to-point
      // transfers of their own sizes (an all-to-all-v).
      std::vector<size_t> out(static_cast<size_t>(peers), 0), in(static_cast<size_t>(peers), 0);
      for (auto& p : pending_)
        for (int q = 0; q < peers; ++q) {
          out[static_cast<size_t>(q)] += exchange_slice_bytes(p.sub.shape, p.sub.dir, me, q, peers);
          in[static_cast<size_t>(q)] += exchange_slice_bytes(p.sub.shape, p.sub.dir, q, me, peers);
        }
      bool uniform = true;
      for (int q = 0; q < peers; ++q) uniform = uniform && out[static_cast<size_t>(q)] == out[0] && in[static_cast<size_t>(q)] == out[0];
      std::vector<size_t> send_at(static_cast<size_t>(peers), 0), recv_at(static_cast<size_t>(peers), 0);
      for (int q = 1; q < peers; ++q) {
        send_at[static_cast<size_t>(q)] = send_at[static_cast<size_t>(q - 1)] + out[static_cast<size_t>(q - 1)];
        recv_at[static_cast<size_t>(q)] = recv_at[static_cast<size_t>(q - 1)] + in[static_cast<size_t>(q - 1)];
      }
      const size_t total = std::max(send_at.back() + out.back(), recv_at.back() + in.back());
      ensure_staging(s, total);
      auto* send = static_cast<unsigned char*>(send_->get());
      auto* recv = static_cast<unsigned char*>(recv_->get());
      std::vector<size_t> at = send_at;
      for (auto& p : pending_) pack(s, p, send, at);
      if (uniform) {
        coll_.all_to_all(s, send, recv, out[0]);
      } else {
        std::vector<PeerTransfer> xfers;
        for (int q = 0; q < peers; ++q)
          xfers.push_back(PeerTransfer{q, send + send_at[static_cast<size_t>(q)], out[static_cast<size_t>(q)],
                                       recv + recv_at[static_cast<size_t>(q)], in[static_cast<size_t>(q)]});
        coll_.send_recv(s, xfers);
      }
      at = recv_at;
      for (auto& p : pending_) unpack(s, p, recv, at);
    }
    group_->done->record(s);
    group_->closed = true;
    ++stats_.groups;
    ++stats_.handshakes;  // the exchange is this group's synchronisation
    group_.reset();
    pending_.clear();
  }

  Device& dev_;
  Collectives& coll_;
  bool registered_;
  std::map<ResultKey, std::unique_ptr<RegisteredBuffer>> results_;
  std::unique_ptr<RegisteredBuffer> send_, recv_;
  std::shared_ptr<GroupCompletion> group_;
  EventPool group_events_{dev_};
  std::vector<Pending> pending_;
  TransportStats stats_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(Device& dev, Collectives& coll) {
  return std::make_unique<NcclTransport>(dev, coll, false);
}

std::unique_ptr<Transport> make_nccl_ce_transport(Device& dev, Collectives& coll) {
  return std::make_unique<NcclTransport>(dev, coll, true);
}

}  // namespace uipc
