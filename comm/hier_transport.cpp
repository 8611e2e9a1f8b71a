// The hierarchical transport (`hier`, TAPA-style) for Ulysses groups that span nodes.
// The group's P ranks form N nodes of L consecutive ranks (group rank g = n*L + l: node
// n, local index l). What rank (n, l) sends to a rank (m, j) of another node travels in
// two phases:
//  1. intra-node, on the IPC protocol (comm/ipc_protocol.hpp): (n, l) copies its slice
//     for (m, j) into the relay buffer that its node-mate (n, j) keeps for node m. A
//     relay is laid out exactly as node n's token block of (m, j)'s final layout (the
//     node's L shards one after another, (m, j)'s heads), so ...
//  2. inter-node, over Collectives between ranks of the same local index (the rail,
//     one communicator per l): (n, j) sends its relay for node m to (m, j) in one
//     message, received straight into (m, j)'s final target at node n's token block.
// Slices for ranks of the own node are copied straight into their targets as in `ipc`.
// The node block is cut into chunks (per batch, `chunks` token ranges): every rank
// copies chunk by chunk and raises a per-writer chunk word on the relay's owner after
// each, and the owner's inter-node stream waits for a chunk's words, then sends that
// chunk, so the inter-node phase of one chunk runs while the next chunk is copied.
//
// The output gather runs the same path backwards: (m, j) sends the rows of node n's
// token block of its attention output to (n, j) (one message per remote node, straight
// from the source), which copies each row on to the node-mate that owns the token, at
// (m, j)'s heads; rows of the own node's heads go straight, as in `ipc`. Chunks again:
// a chunk's copies start once that chunk has arrived.
//
// Completion and reuse:
//  - scatter: the node's epoch handshake (copies into targets and relays of node-mates)
//    on the copy stream, then the inter stream waits for it after its last chunk: the
//    group is done on the inter stream. The inter stream writes into this rank's own
//    target only after this rank's consumer released the previous group (an event).
//  - gather: the inter stream receives into this rank's own relays only once its copy
//    stream has finished reading the previous group's relays (an event); the copies
//    into node-mates' targets end with the node's epoch handshake: done on the copy
//    stream.
//  - node-mates write into this rank's targets and relays only after its release word
//    (EpochHandshake), which the consumer writes after it waited for the group.
// Every device-side wait is bounded by the watchdog and names the world rank it waits
// for; every inter-node message goes through the collectives' bounded waits.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives.hpp"
#include "comm/exchange_geometry.hpp"
#include "comm/group_exchange.hpp"
#include "comm/ipc_protocol.hpp"
#include "comm/nodes.hpp"
#include "comm/transport.hpp"

namespace uipc {
namespace {

// Sizes of one submission in the hierarchical layout (even shards and head slices).
struct HierShape {
  int64_t B, Sl, H, D, S, Hl, LS;  // LS: tokens of one node's block
  size_t es;
  int64_t slice, full;  // elements of a token's head slice and of a whole token row
  size_t target_bytes, relay_bytes;
  HierShape(const ExchangeShape& s, int P, int L)
      : B(s.batch), Sl(s.seq_local), H(s.heads), D(s.head_dim), S(s.seq_local * P), Hl(s.heads / P),
        LS(s.seq_local * L), es(dtype_size(s.dtype)) {
    slice = Hl * D;
    full = H * D;
    target_bytes = static_cast<size_t>(B * S * Hl * D) * es;  // == B*Sl*H*D*es: same for the gather
    relay_bytes = static_cast<size_t>(B * LS * Hl * D) * es;
  }
};

class HierTransport : public Transport {
 public:
  HierTransport(Device& dev, MPI_Comm group, const NodeLayout& nodes, const CollectivesFactory& make_coll,
                int capacity, int chunks, const VMajorOptions& vmajor)
      : dev_(dev), chunks_(std::max(1, chunks)), vmajor_(vmajor) {
    int g = 0;
    UIPC_MPI_CHECK(MPI_Comm_rank(group, &g));
    UIPC_MPI_CHECK(MPI_Comm_size(group, &P_));
    UIPC_CHECK(nodes.size() == P_ && nodes.equal_blocks() && nodes.nodes() >= 2,
               "hier transport: the group must be N >= 2 nodes of equal consecutive blocks (" + nodes.describe() + ")");
    N_ = nodes.nodes();
    L_ = nodes.ranks_per_node();
    n_ = g / L_;
    l_ = g % L_;
    std::vector<int> node_ranks, rail_ranks;
    for (int j = 0; j < L_; ++j) node_ranks.push_back(n_ * L_ + j);
    for (int m = 0; m < N_; ++m) rail_ranks.push_back(m * L_ + l_);
    // Every rank calls both splits (colours = first member), so each lands in its own.
    node_comm_ = split_comm(group, node_ranks, g);
    rail_comm_ = split_comm(group, rail_ranks, g);
    rail_ = make_coll(rail_comm_.get());
    path_ = make_mapping_path(MappingKind::kIpcHandle, dev_, node_comm_);
    group_comm_ = dup_comm(group);
    // Misses are agreed over the whole group: every rank's inter-node messages depend on them.
    cache_ = std::make_unique<TargetCache>(dev_, node_comm_, *path_, capacity, stats_, group_comm_.get());
    handshake_ = std::make_unique<EpochHandshake>(dev_, node_comm_, *path_, /*extra_words=*/1);
    copy_ = dev_.create_stream(StreamPriority::kHigh);
    self_ = dev_.create_stream(StreamPriority::kHigh);
    inter_ = dev_.create_stream(StreamPriority::kHigh);
    for (auto* e : {&ready_evt_, &self_done_, &released_, &intra_done_, &copy_idle_}) *e = dev_.create_event();
  }

  ~HierTransport() override {
    try {
      drain();
    } catch (...) {
      // Already failing; the error was reported where it happened.
    }
  }

  std::string name() const override { return vmajor_.enabled ? "hier-vmajor" : "hier"; }

  void set_selective(bool allowed) override { selective_ = allowed; }

  // My own slice of a scatter lies in my target like ipc's (the relays follow the final
  // layout in the same buffer): a producer may write it there.
  OwnSlice own_slice(Tag tag, const ExchangeShape& shape) override {
    UIPC_CHECK(shape.heads % P_ == 0, "heads must divide by the group size");
    Submission sub;
    sub.tag = tag;
    sub.dir = Direction::kScatter;
    sub.shape = shape;
    return own_slice_of(target_of(sub).mine.get(), shape, n_ * L_ + l_, P_);
  }

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    UIPC_CHECK(sub.shape.heads % P_ == 0, "heads must divide by the group size");
    UIPC_CHECK(!sub.own_slice_written || sub.dir == Direction::kScatter, "only a scatter's own slice can be pre-written");
    if (!group_) open_group(sub.dir);
    UIPC_CHECK(sub.dir == group_dir_, "hier: a group is all scatter or all gather");
    const HierShape h(sub.shape, P_, L_);
    SharedTarget& t = target_of(sub);
    group_->tags += std::string(group_->tags.empty() ? "" : ",") + tag_name(sub.tag);
    ready_evt_->record(producer);
    if (sub.dir == Direction::kScatter)
      scatter(sub, h, t);
    else
      gather(sub, h, t);
    auto ex = std::make_unique<GroupExchange>(t.mine.get(), group_, dev_);
    if (sub.barrier) close_group();
    return ex;
  }

  void release(Stream& consumer) override {
    UIPC_CHECK(!group_, "release() while a group is still open");
    handshake_->release(consumer, epoch_);
    released_->record(consumer);
    released_epoch_ = epoch_;
    cache_->unpin_all();
  }

  std::pair<Event*, Event*> copy_interval(Tag tag) override {
    auto it = intervals_.find(tag);
    if (it == intervals_.end()) return {nullptr, nullptr};
    return {it->second.first.get(), it->second.second.get()};
  }

  TransportStats stats() const override { return stats_; }

  void close_peer_mappings() override {
    drain();
    cache_->close_mappings();
    handshake_->close_mappings();
  }

 private:
  // Node-block chunk k of one batch: tokens [lo, hi) of the node's L*Sl.
  int chunks_per_batch(const HierShape& h) const { return static_cast<int>(std::min<int64_t>(chunks_, h.LS)); }
  static int64_t chunk_lo(const HierShape& h, int k, int K) { return h.LS * k / K; }

  // Relay of rank j of my node for remote node m (its index skips my node).
  unsigned char* relay(const SharedTarget& t, int j, int m, const HierShape& h) const {
    const int idx = m < n_ ? m : m - 1;
    return static_cast<unsigned char*>(t.peer_ptr[static_cast<size_t>(j)]) + h.target_bytes +
           static_cast<size_t>(idx) * h.relay_bytes;
  }
  unsigned char* target(const SharedTarget& t, int j) const {
    return static_cast<unsigned char*>(t.peer_ptr[static_cast<size_t>(j)]);
  }
  Stream& stream_to(int j) { return j == l_ ? *self_ : *copy_; }

  void interval_start(Tag tag) {
    auto& iv = intervals_[tag];
    if (!iv.first) iv = {dev_.create_event(), dev_.create_event()};
    iv.first->record(*copy_);
  }
  void interval_end(Tag tag) {
    self_done_->record(*self_);
    dev_.stream_wait_event(*copy_, *self_done_);
    intervals_[tag].second->record(*copy_);
  }

  SharedTarget& target_of(const Submission& sub) {
    const HierShape h(sub.shape, P_, L_);
    const int64_t misses = stats_.cache_misses;
    SharedTarget& t = cache_->get(target_key(sub), h.target_bytes + static_cast<size_t>(N_ - 1) * h.relay_bytes,
                                  [this] { quiesce(); });
    // A fresh target (a miss, on every rank of the group alike) holds nothing V-major
    // could keep: everything is sent again.
    if (stats_.cache_misses != misses) vstate_.erase(target_key(sub).describe());
    return t;
  }

  // My slices for the ranks of my node, straight into their targets (as `ipc` does);
  // my own one only if its producer did not write it there.
  void copy_to_node(const Submission& sub, const SharedTarget& t) {
    const int g = n_ * L_ + l_;
    for (int i = 0; i < L_; ++i) {
      const int j = (l_ + 1 + i) % L_;
      if (j == l_ && sub.own_slice_written) continue;
      for (const Copy2D& c : exchange_copies(sub, g, n_ * L_ + j, P_))
        dev_.copy_2d(stream_to(j), target(t, j) + c.dst_offset, c.dst_pitch,
                     static_cast<const unsigned char*>(sub.src) + c.src_offset, c.src_pitch, c.width, c.height);
    }
  }

  void scatter(const Submission& sub, const HierShape& h, const SharedTarget& t) {
    const int K = chunks_per_batch(h);
    const int64_t pitch = sub.src_row_pitch > 0 ? sub.src_row_pitch : h.full;
    const int64_t mine_lo = l_ * h.Sl, mine_hi = mine_lo + h.Sl;  // my shard in the node block
    const auto* src = static_cast<const unsigned char*>(sub.src);
    dev_.stream_wait_event(*copy_, *ready_evt_);
    dev_.stream_wait_event(*self_, *ready_evt_);
    interval_start(sub.tag);
    // Phase 1: relays first (they feed the slower link), chunk by chunk, each chunk
    // announced to every node-mate with its sequence number.
    const uint64_t seq0 = chunk_seq_;
    for (int64_t b = 0; b < h.B; ++b) {
      for (int k = 0; k < K; ++k) {
        const int64_t lo = std::max(chunk_lo(h, k, K), mine_lo), hi = std::min(chunk_lo(h, k + 1, K), mine_hi);
        for (int i = 0; lo < hi && i < L_; ++i) {
          const int j = (l_ + 1 + i) % L_;
          for (int m = 0; m < N_; ++m) {
            if (m == n_) continue;
            const int64_t dest = static_cast<int64_t>(m) * L_ + j;  // the group rank the slice is for
            dev_.copy_2d(stream_to(j), relay(t, j, m, h) + static_cast<size_t>((b * h.LS + lo) * h.slice) * h.es,
                         static_cast<size_t>(h.slice) * h.es,
                         src + static_cast<size_t>((b * h.Sl + lo - mine_lo) * pitch + dest * h.slice) * h.es,
                         static_cast<size_t>(pitch) * h.es, static_cast<size_t>(h.slice) * h.es,
                         static_cast<size_t>(hi - lo));
          }
        }
        ++chunk_seq_;
        for (int j = 0; j < L_; ++j) dev_.write_value64(stream_to(j), handshake_->peer_word(j, 0), chunk_seq_);
      }
    }
    copy_to_node(sub, t);
    interval_end(sub.tag);

    // Phase 2 on the inter stream: chunk by chunk, once every node-mate announced it.
    if (!inter_opened_) {
      if (released_epoch_ > 0) dev_.stream_wait_event(*inter_, *released_);  // my target is free
      inter_opened_ = true;
    }
    if (vmajor_.enabled && sub.tag == Tag::kV) {
      vmajor_phase2(sub, h, t, seq0);
      return;
    }
    uint64_t seq = seq0;
    for (int64_t b = 0; b < h.B; ++b) {
      for (int k = 0; k < K; ++k) {
        ++seq;
        for (int j = 0; j < L_; ++j)
          dev_.wait_value64_geq(*inter_, handshake_->my_word(j, 0), seq,
                                WaitLabel{handshake_->world_rank(j), "chunk " + std::to_string(seq) + " of the relays (tag " +
                                                                         tag_name(sub.tag) + ", intra-node phase)"});
        const int64_t lo = chunk_lo(h, k, K), hi = chunk_lo(h, k + 1, K);
        const size_t bytes = static_cast<size_t>((hi - lo) * h.slice) * h.es;
        std::vector<PeerTransfer> xfers;
        for (int m = 0; m < N_; ++m) {
          if (m == n_) continue;
          PeerTransfer x;
          x.peer = m;
          x.send = relay(t, l_, m, h) + static_cast<size_t>((b * h.LS + lo) * h.slice) * h.es;
          x.send_bytes = bytes;
          x.recv = target(t, l_) + static_cast<size_t>((b * h.S + m * h.LS + lo) * h.slice) * h.es;
          x.recv_bytes = bytes;
          xfers.push_back(x);
        }
        set_activity("in the inter-node phase of the hier scatter");
        rail_->send_recv(*inter_, xfers);
        count_bytes(xfers);
      }
    }
  }

  void gather(const Submission& sub, const HierShape& h, const SharedTarget& t) {
    const int K = chunks_per_batch(h);
    const auto* src = static_cast<const unsigned char*>(sub.src);  // (B, S, Hl, D), contiguous
    // Phase A on the inter stream: node m's token block of my heads to (m, l), node n's
    // block of (m, l)'s heads into my relay for m, chunk by chunk.
    dev_.stream_wait_event(*inter_, *ready_evt_);
    if (!inter_opened_) {
      dev_.stream_wait_event(*inter_, *copy_idle_);  // my relays are no longer read
      inter_opened_ = true;
    }
    const size_t nchunks = static_cast<size_t>(h.B) * static_cast<size_t>(K);
    while (chunk_evt_.size() < nchunks) chunk_evt_.push_back(dev_.create_event());
    // My own node's heads go straight, on the copy streams, while the first chunks fly.
    dev_.stream_wait_event(*copy_, *ready_evt_);
    dev_.stream_wait_event(*self_, *ready_evt_);
    interval_start(sub.tag);
    copy_to_node(sub, t);
    for (int64_t b = 0; b < h.B; ++b) {
      for (int k = 0; k < K; ++k) {
        const int64_t lo = chunk_lo(h, k, K), hi = chunk_lo(h, k + 1, K);
        const size_t bytes = static_cast<size_t>((hi - lo) * h.slice) * h.es;
        std::vector<PeerTransfer> xfers;
        for (int m = 0; m < N_; ++m) {
          if (m == n_) continue;
          PeerTransfer x;
          x.peer = m;
          x.send = src + static_cast<size_t>((b * h.S + m * h.LS + lo) * h.slice) * h.es;
          x.send_bytes = bytes;
          x.recv = relay(t, l_, m, h) + static_cast<size_t>((b * h.LS + lo) * h.slice) * h.es;
          x.recv_bytes = bytes;
          xfers.push_back(x);
        }
        set_activity("in the inter-node phase of the hier gather");
        rail_->send_recv(*inter_, xfers);
        count_bytes(xfers);
        Event& arrived = *chunk_evt_[static_cast<size_t>(b * K + k)];
        arrived.record(*inter_);
        // Phase B: the chunk's rows on to the node-mates that own them, at (m, l)'s heads.
        dev_.stream_wait_event(*copy_, arrived);
        for (int i = 0; i < L_; ++i) {
          const int j = (l_ + 1 + i) % L_;
          const int64_t jlo = std::max(lo, j * h.Sl), jhi = std::min(hi, (j + 1) * h.Sl);
          if (jlo >= jhi) continue;
          for (int m = 0; m < N_; ++m) {
            if (m == n_) continue;
            const int64_t from = static_cast<int64_t>(m) * L_ + l_;  // whose heads the relay holds
            dev_.copy_2d(*copy_,
                         target(t, j) + static_cast<size_t>((b * h.Sl + jlo - j * h.Sl) * h.full + from * h.slice) * h.es,
                         static_cast<size_t>(h.full) * h.es,
                         relay(t, l_, m, h) + static_cast<size_t>((b * h.LS + jlo) * h.slice) * h.es,
                         static_cast<size_t>(h.slice) * h.es, static_cast<size_t>(h.slice) * h.es,
                         static_cast<size_t>(jhi - jlo));
          }
        }
      }
    }
    interval_end(sub.tag);
  }

  void count_bytes(const std::vector<PeerTransfer>& xfers) {
    for (const PeerTransfer& x : xfers) {
      stats_.inter_bytes_sent += static_cast<int64_t>(x.send_bytes);
      stats_.inter_bytes_full += static_cast<int64_t>(x.send_bytes);
    }
  }

  // What V-major keeps per V target: what this rank last sent of each block (its relays'
  // shape), which blocks it ever sent, and staging for the packed messages.
  struct VState {
    DeviceBuffer last, rows, send_stage, recv_stage, masks;  // masks: mine, then the peers'
    std::vector<char> sent;
  };

  // V's inter-node phase with V-major selective communication: once the whole relay is
  // in (every chunk of every node-mate), compare each block (chunk k of batch b, for
  // remote node m) with what was last sent, agree with each remote node on which blocks
  // come (a mask), and send the chosen blocks packed into one message per remote node;
  // the receiver unpacks them into its target and keeps the rest as they were. The
  // decision is made on the host, so this phase is not pipelined in chunks and holds
  // the host until V's intra-node phase is done (the V-first overlap of the Q/K norm is
  // given up for the bytes).
  void vmajor_phase2(const Submission& sub, const HierShape& h, const SharedTarget& t, uint64_t seq0) {
    const int K = chunks_per_batch(h), R = N_ - 1;
    const int64_t nblocks = h.B * K;
    const uint64_t seq_end = seq0 + static_cast<uint64_t>(nblocks);
    for (int j = 0; j < L_; ++j)
      dev_.wait_value64_geq(*inter_, handshake_->my_word(j, 0), seq_end,
                            WaitLabel{handshake_->world_rank(j), "chunk " + std::to_string(seq_end) +
                                                                     " of the relays (tag V, intra-node phase, V-major)"});
    VState& vs = vstate_[target_key(sub).describe()];
    const size_t relays = static_cast<size_t>(R) * h.relay_bytes;
    unsigned char* mine = target(t, l_) + h.target_bytes;  // my R relays, one after another
    if (!vs.last) {
      vs.last = dev_.alloc(relays);
      vs.rows = dev_.alloc(static_cast<size_t>(R * h.B * h.LS) * 2 * sizeof(double));
      vs.send_stage = dev_.alloc(relays);
      vs.recv_stage = dev_.alloc(relays);
      vs.masks = dev_.alloc(static_cast<size_t>(2 * R * nblocks));
      vs.sent.assign(static_cast<size_t>(R * nblocks), 0);
    }
    // Which of my blocks go: never sent, not selective now, or changed enough.
    std::vector<double> rows;
    if (selective_) {
      vmajor_.row_change(*inter_, mine, vs.last.get(), sub.shape.dtype, R * h.B * h.LS, h.slice,
                         vs.rows.as<double>());
      rows.resize(static_cast<size_t>(R * h.B * h.LS) * 2);
      set_activity("in V-major's comparison (waiting for V's relays)");
      inter_->synchronize();
      dev_.copy_to_host(rows.data(), vs.rows.get(), rows.size() * sizeof(double));
    }
    std::vector<unsigned char> masks(static_cast<size_t>(2 * R * nblocks), 0);
    for (int r = 0; r < R; ++r)
      for (int64_t b = 0; b < h.B; ++b)
        for (int k = 0; k < K; ++k) {
          const size_t blk = static_cast<size_t>(r * nblocks + b * K + k);
          bool send = !selective_ || !vs.sent[blk];
          if (!send) {
            double d2 = 0, l2 = 0;
            for (int64_t tok = chunk_lo(h, k, K); tok < chunk_lo(h, k + 1, K); ++tok) {
              const size_t row = static_cast<size_t>((r * h.B + b) * h.LS + tok);
              d2 += rows[2 * row];
              l2 += rows[2 * row + 1];
            }
            send = l2 > 0 ? std::sqrt(d2) >= vmajor_.threshold * std::sqrt(l2) : d2 > 0;
          }
          masks[blk] = send ? 1 : 0;
        }
    // The masks: one small message each way per remote node.
    dev_.copy_to_device(vs.masks.get(), masks.data(), masks.size());
    std::vector<PeerTransfer> xm;
    for (int m = 0, r = 0; m < N_; ++m) {
      if (m == n_) continue;
      xm.push_back(PeerTransfer{m, vs.masks.as<unsigned char>() + r * nblocks, static_cast<size_t>(nblocks),
                                vs.masks.as<unsigned char>() + (R + r) * nblocks, static_cast<size_t>(nblocks)});
      ++r;
    }
    set_activity("in V-major's mask exchange");
    rail_->send_recv(*inter_, xm);
    inter_->synchronize();
    dev_.copy_to_host(masks.data(), vs.masks.get(), masks.size());
    // Pack the chosen blocks (and remember them as sent), exchange, unpack.
    std::vector<PeerTransfer> xd;
    std::vector<std::vector<std::pair<size_t, size_t>>> unpack(static_cast<size_t>(R));  // (target offset, bytes)
    size_t full = 0;
    for (int m = 0, r = 0; m < N_; ++m) {
      if (m == n_) continue;
      size_t out = 0, in = 0;
      auto* send_base = vs.send_stage.as<unsigned char>() + static_cast<size_t>(r) * h.relay_bytes;
      auto* recv_base = vs.recv_stage.as<unsigned char>() + static_cast<size_t>(r) * h.relay_bytes;
      for (int64_t b = 0; b < h.B; ++b)
        for (int k = 0; k < K; ++k) {
          const int64_t lo = chunk_lo(h, k, K), hi = chunk_lo(h, k + 1, K);
          const size_t bytes = static_cast<size_t>((hi - lo) * h.slice) * h.es;
          const size_t at = static_cast<size_t>((b * h.LS + lo) * h.slice) * h.es;  // in a relay
          const size_t blk = static_cast<size_t>(r * nblocks + b * K + k);
          full += bytes;
          if (masks[blk]) {
            unsigned char* src = mine + static_cast<size_t>(r) * h.relay_bytes + at;
            dev_.copy_2d(*inter_, send_base + out, bytes, src, bytes, bytes, 1);
            dev_.copy_2d(*inter_, vs.last.as<unsigned char>() + static_cast<size_t>(r) * h.relay_bytes + at, bytes,
                         src, bytes, bytes, 1);
            vs.sent[blk] = 1;
            out += bytes;
          }
          if (masks[static_cast<size_t>(R * nblocks) + blk]) {
            unpack[static_cast<size_t>(r)].push_back(
                {static_cast<size_t>((b * h.S + m * h.LS + lo) * h.slice) * h.es, bytes});
            in += bytes;
          }
        }
      xd.push_back(PeerTransfer{m, send_base, out, recv_base, in});
      stats_.inter_bytes_sent += static_cast<int64_t>(out) + nblocks;  // the mask too
      ++r;
    }
    stats_.inter_bytes_full += static_cast<int64_t>(full);
    set_activity("in V-major's inter-node phase");
    rail_->send_recv(*inter_, xd);
    for (int r = 0; r < R; ++r) {
      size_t at = 0;
      for (const auto& [offset, bytes] : unpack[static_cast<size_t>(r)]) {
        dev_.copy_2d(*inter_, target(t, l_) + offset, bytes,
                     vs.recv_stage.as<unsigned char>() + static_cast<size_t>(r) * h.relay_bytes + at, bytes, bytes, 1);
        at += bytes;
      }
    }
  }

  void drain() {
    copy_->synchronize();
    self_->synchronize();
    inter_->synchronize();
  }

  // Before an eviction: nothing of ours in flight into the victim, our consumer done.
  void quiesce() {
    drain();
    if (released_epoch_ > 0) released_->synchronize();
  }

  void open_group(Direction dir) {
    group_ = std::make_shared<GroupCompletion>();
    group_->epoch = ++epoch_;
    group_->done = dev_.create_event();
    group_dir_ = dir;
    group_->finisher = dir == Direction::kScatter ? inter_.get() : copy_.get();
    inter_opened_ = false;
    handshake_->wait_released(*copy_, released_epoch_);
    // My own slices land in my target: after my consumer released it, like the peers'.
    if (released_epoch_ > 0) dev_.stream_wait_event(*self_, *released_);
    ++stats_.groups;
  }

  void close_group() {
    handshake_->ready(*copy_, group_->epoch, group_->tags);
    if (group_dir_ == Direction::kScatter) {
      intra_done_->record(*copy_);
      dev_.stream_wait_event(*inter_, *intra_done_);
      group_->done->record(*inter_);
    } else {
      copy_idle_->record(*copy_);
      group_->done->record(*copy_);
    }
    group_->closed = true;
    ++stats_.handshakes;
    group_.reset();
  }

  Device& dev_;
  int chunks_;
  VMajorOptions vmajor_;
  bool selective_ = false;
  std::map<std::string, VState> vstate_;  // by target key
  int P_ = 1, N_ = 1, L_ = 1, n_ = 0, l_ = 0;
  MpiComm group_comm_, node_comm_, rail_comm_;
  std::unique_ptr<Collectives> rail_;
  TransportStats stats_;
  std::unique_ptr<MappingPath> path_;
  std::unique_ptr<TargetCache> cache_;
  std::unique_ptr<EpochHandshake> handshake_;
  std::unique_ptr<Stream> copy_, self_, inter_;
  std::unique_ptr<Event> ready_evt_, self_done_, released_, intra_done_, copy_idle_;
  std::vector<std::unique_ptr<Event>> chunk_evt_;
  uint64_t epoch_ = 0, released_epoch_ = 0, chunk_seq_ = 0;
  bool inter_opened_ = false;
  Direction group_dir_ = Direction::kScatter;
  std::shared_ptr<GroupCompletion> group_;
  std::map<Tag, std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> intervals_;
};

}  // namespace

std::string hier_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes) {
  // The layout is the same on every rank: a reason from it is agreed without messages.
  if (group_nodes.one_node()) return "the Ulysses group is on one node";
  if (!group_nodes.equal_blocks())
    return "the group's ranks are not " + std::to_string(group_nodes.nodes()) +
           " equal blocks of consecutive ranks, one per node (" + group_nodes.describe() + ")";
  // IPC inside each node: the checks of `ipc` over the node's part of the group, then
  // every rank of the group learns the first reason of any node.
  int g = 0;
  UIPC_MPI_CHECK(MPI_Comm_rank(group, &g));
  const int L = group_nodes.ranks_per_node();
  std::vector<int> node_ranks;
  for (int j = 0; j < L; ++j) node_ranks.push_back(g / L * L + j);
  MpiComm node = split_comm(group, node_ranks, g);
  NodeLayout one;
  one.node_of.assign(static_cast<size_t>(L), 0);
  for (int j = 0; j < L; ++j) one.local_index.push_back(j);
  const std::string mine = ipc_ineligible_reason(dev, node.get(), one);
  std::vector<std::string> all = allgather_strings(group, mine, dev.watchdog_seconds(), "the hier eligibility check");
  for (size_t i = 0; i < all.size(); ++i)
    if (!all[i].empty()) return "IPC inside node " + std::to_string(static_cast<int>(i) / L) + ": " + all[i];
  return "";
}

std::unique_ptr<Transport> make_hier_transport(Device& dev, MPI_Comm group, const NodeLayout& group_nodes,
                                               const CollectivesFactory& make_collectives, int cache_capacity,
                                               int chunks, const VMajorOptions& vmajor) {
  return std::make_unique<HierTransport>(dev, group, group_nodes, make_collectives, cache_capacity, chunks, vmajor);
}

}  // namespace uipc
