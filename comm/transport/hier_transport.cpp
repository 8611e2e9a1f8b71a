// The hierarchical transport (`hier`, TAPA-style) for Ulysses groups that span nodes.
// The group's P ranks form N nodes of L consecutive ranks (group rank g = n*L + l: node
// n, local index l). What rank (n, l) sends to a rank (m, j) of another node travels in
// two phases:
//  1. intra-node, on the IPC protocol (comm/transport/ipc_protocol.hpp): (n, l) copies its slice
//     for (m, j) into the relay buffer that its node-mate (n, j) keeps for node m. A
//     relay is laid out exactly as node n's token block of (m, j)'s final layout (the
//     node's L shards one after another, (m, j)'s heads), so that
//  2. inter-node, over Collectives between ranks of the same local index (the rail,
//     one communicator per l), (n, j) sends its relay for node m to (m, j) in one
//     message, received straight into (m, j)'s final target at node n's token block.
// With V-major (hier-vmajor), V's inter-node phase sends only the blocks that changed
// enough since they were last sent (vmajor_phase2 below).
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
#include "comm/collectives/collectives.hpp"
#include "comm/transport/exchange_geometry.hpp"
#include "comm/transport/group_exchange.hpp"
#include "comm/transport/ipc_protocol.hpp"
#include "comm/nodes.hpp"
#include "comm/transport/transport.hpp"

namespace uipc {
namespace {

// Where everything of one submission lies in the hierarchical layout. Shards and head
// slices may be uneven (exchange_geometry.hpp): node n's block is its L ranks' shards one
// after another, node_len(n) tokens long. On the rank g = (n, j), the buffer holds its
// final result (the target) and then, for each other node m in order, its relay for m:
// node n's block of the heads of (m, j), B x node_len(n) rows of hd(m*L + j) heads.
// Every rank's buffer is as large as the largest (buffer_bytes), so mappings agree.
struct HierShape {
  const ExchangeShape& s;
  Direction dir;
  int P, N, L;
  int64_t B, D, S, H;
  size_t es;
  HierShape(const ExchangeShape& shape, Direction d, int p, int n, int l)
      : s(shape), dir(d), P(p), N(n), L(l), B(shape.batch), D(shape.head_dim), S(exchange_seq(shape, p)),
        H(shape.heads), es(dtype_size(shape.dtype)) {}
  Span tok(int g) const { return token_shard(s, P, g); }
  Span hd(int g) const { return head_slice(s, P, g); }
  int64_t slice(int g) const { return hd(g).count * D; }  // elements of a token row of g's heads
  int64_t node_begin(int n) const { return tok(n * L).begin; }
  int64_t node_len(int n) const { return tok(n * L + L - 1).begin + tok(n * L + L - 1).count - node_begin(n); }
  size_t bytes(int64_t elems) const { return static_cast<size_t>(elems) * es; }
  size_t target_bytes(int g) const { return bytes(exchange_result_elems(s, dir, g, P)); }
  // Node n's block of g's heads.
  size_t relay_bytes(int n, int g) const { return bytes(B * node_len(n) * slice(g)); }
  // Where owner (n, j)'s relay for node m starts in its buffer; m == N: its end.
  size_t relay_offset(int owner, int m) const {
    const int n = owner / L, j = owner % L;
    size_t at = target_bytes(owner);
    for (int mm = 0; mm < m && mm < N; ++mm)
      if (mm != n) at += relay_bytes(n, mm * L + j);
    return at;
  }
  size_t buffer_bytes() const {
    size_t most = 0;
    for (int g = 0; g < P; ++g) most = std::max(most, relay_offset(g, N));
    return most;
  }
  // Chunks per batch: the same count on every node (node blocks may differ by a few tokens).
  int chunks(int want) const {
    int64_t shortest = node_len(0);
    for (int n = 1; n < N; ++n) shortest = std::min(shortest, node_len(n));
    return static_cast<int>(std::min<int64_t>(want, shortest));
  }
  // Chunk k of K of node n's block: tokens [chunk_lo(n, k), chunk_lo(n, k + 1)).
  int64_t chunk_lo(int n, int k, int K) const { return node_len(n) * k / K; }
};

class HierTransport : public Transport {
 public:
  HierTransport(Device& dev, MPI_Comm group, const NodeLayout& nodes, const CollectivesFactory& make_coll,
                const TransportOptions& opts, int chunks, const VMajorOptions& vmajor)
      : dev_(dev), chunks_(std::max(1, chunks)), vmajor_(vmajor), time_v_copy_(opts.time_v_copy) {
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
    cache_ = std::make_unique<TargetCache>(dev_, node_comm_, *path_, opts.cache_capacity, stats_, group_comm_.get());
    handshake_ = std::make_unique<EpochHandshake>(dev_, node_comm_, *path_, /*extra_words=*/1);
    copy_ = dev_.create_stream(StreamPriority::kHigh);
    self_ = dev_.create_stream(StreamPriority::kHigh);
    inter_ = dev_.create_stream(StreamPriority::kHigh);
    // Joins of the streams within one layer: edges of a captured layer, no nodes
    // (EventUse). released_ and copy_idle_ are waited on in the next layer (and released_
    // synchronized before an eviction): plain events.
    for (auto* e : {&ready_evt_, &self_done_, &intra_done_}) *e = dev_.create_event(EventUse::kOrdering);
    for (auto* e : {&released_, &copy_idle_}) *e = dev_.create_event();
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
    const std::string bad = exchange_shape_problem(shape, n_ * L_ + l_, P_);
    UIPC_CHECK(bad.empty(), "hier: " + bad);
    Submission sub;
    sub.tag = tag;
    sub.dir = Direction::kScatter;
    sub.shape = shape;
    return own_slice_of(target_of(sub).mine.get(), shape, n_ * L_ + l_, P_);
  }

  std::unique_ptr<Exchange> submit(const Submission& sub, Stream& producer) override {
    const std::string bad = exchange_shape_problem(sub.shape, n_ * L_ + l_, P_);
    UIPC_CHECK(bad.empty(), "hier: " + bad);
    UIPC_CHECK(!sub.own_slice_written || sub.dir == Direction::kScatter, "only a scatter's own slice can be pre-written");
    if (!group_) open_group(sub.dir);
    UIPC_CHECK(sub.dir == group_dir_, "hier: a group is all scatter or all gather");
    const HierShape h(sub.shape, sub.dir, P_, N_, L_);
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
  std::string graph_ineligible_reason() const override {
    return "the hierarchical transport is not captured yet (its streams' joins are unchecked under graphs)";
  }

  void close_peer_mappings() override {
    drain();
    cache_->close_mappings();
    handshake_->close_mappings();
  }

 private:
  // Relay of rank j of my node for remote node m.
  unsigned char* relay(const SharedTarget& t, int j, int m, const HierShape& h) const {
    return static_cast<unsigned char*>(t.peer_ptr[static_cast<size_t>(j)]) + h.relay_offset(n_ * L_ + j, m);
  }
  unsigned char* target(const SharedTarget& t, int j) const {
    return static_cast<unsigned char*>(t.peer_ptr[static_cast<size_t>(j)]);
  }
  Stream& stream_to(int j) { return j == l_ ? *self_ : *copy_; }

  // Only V's copies are timed (the overlap the report gives), and only with stage timing
  // (TransportOptions::time_v_copy): as in `ipc`, no event records for the other tensors.
  bool timed(Tag tag) const { return tag == Tag::kV && time_v_copy_; }
  void interval_start(Tag tag) {
    if (!timed(tag)) return;
    auto& iv = intervals_[tag];
    if (!iv.first) iv = {dev_.create_event(), dev_.create_event()};
    iv.first->record(*copy_);
  }
  // The own slices' stream joins the copy stream (always), then V's interval ends.
  void interval_end(Tag tag) {
    self_done_->record(*self_);
    dev_.stream_wait_event(*copy_, *self_done_);
    if (timed(tag)) intervals_[tag].second->record(*copy_);
  }

  SharedTarget& target_of(const Submission& sub) {
    const HierShape h(sub.shape, sub.dir, P_, N_, L_);
    const int64_t misses = stats_.cache_misses;
    SharedTarget& t = cache_->get(target_key(sub), h.buffer_bytes(), [this] { quiesce(); });
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
    const int K = h.chunks(chunks_), g = n_ * L_ + l_;
    const int64_t pitch = sub.src_row_pitch > 0 ? sub.src_row_pitch : h.H * h.D;
    const int64_t LS = h.node_len(n_), mine_lo = h.tok(g).begin - h.node_begin(n_), mine_hi = mine_lo + h.tok(g).count;
    const auto* src = static_cast<const unsigned char*>(sub.src);
    dev_.stream_wait_event(*copy_, *ready_evt_);
    dev_.stream_wait_event(*self_, *ready_evt_);
    interval_start(sub.tag);
    // Phase 1: relays first (they feed the slower link), chunk by chunk, each chunk
    // announced to every node-mate with its sequence number.
    const uint64_t seq0 = chunk_seq_;
    for (int64_t b = 0; b < h.B; ++b) {
      for (int k = 0; k < K; ++k) {
        const int64_t lo = std::max(h.chunk_lo(n_, k, K), mine_lo), hi = std::min(h.chunk_lo(n_, k + 1, K), mine_hi);
        for (int i = 0; lo < hi && i < L_; ++i) {
          const int j = (l_ + 1 + i) % L_;
          for (int m = 0; m < N_; ++m) {
            if (m == n_) continue;
            const int dest = m * L_ + j;  // the group rank the slice is for
            const int64_t w = h.slice(dest);
            dev_.copy_2d(stream_to(j), relay(t, j, m, h) + h.bytes((b * LS + lo) * w), h.bytes(w),
                         src + h.bytes((b * h.tok(g).count + lo - mine_lo) * pitch + h.hd(dest).begin * h.D),
                         h.bytes(pitch), h.bytes(w), static_cast<size_t>(hi - lo));
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
        std::vector<PeerTransfer> xfers;
        for (int m = 0; m < N_; ++m) {
          if (m == n_) continue;
          // Out: my relay for m, my node's chunk k of (m, l)'s heads; in: node m's chunk k
          // of my heads, straight into my target at node m's tokens.
          const int64_t lo = h.chunk_lo(n_, k, K), hi = h.chunk_lo(n_, k + 1, K), w = h.slice(m * L_ + l_);
          const int64_t rlo = h.chunk_lo(m, k, K), rhi = h.chunk_lo(m, k + 1, K), v = h.slice(g);
          PeerTransfer x;
          x.peer = m;
          x.send = relay(t, l_, m, h) + h.bytes((b * LS + lo) * w);
          x.send_bytes = h.bytes((hi - lo) * w);
          x.recv = target(t, l_) + h.bytes((b * h.S + h.node_begin(m) + rlo) * v);
          x.recv_bytes = h.bytes((rhi - rlo) * v);
          xfers.push_back(x);
        }
        set_activity("in the inter-node phase of the hier scatter");
        rail_->send_recv(*inter_, xfers);
        count_bytes(xfers);
      }
    }
  }

  void gather(const Submission& sub, const HierShape& h, const SharedTarget& t) {
    const int K = h.chunks(chunks_), g = n_ * L_ + l_;
    const int64_t LS = h.node_len(n_), v = h.slice(g);
    const auto* src = static_cast<const unsigned char*>(sub.src);  // (B, S, Hl(g), D), contiguous
    // Phase A on the inter stream: node m's token block of my heads to (m, l), node n's
    // block of (m, l)'s heads into my relay for m, chunk by chunk.
    dev_.stream_wait_event(*inter_, *ready_evt_);
    if (!inter_opened_) {
      dev_.stream_wait_event(*inter_, *copy_idle_);  // my relays are no longer read
      inter_opened_ = true;
    }
    const size_t nchunks = static_cast<size_t>(h.B) * static_cast<size_t>(K);
    while (chunk_evt_.size() < nchunks) chunk_evt_.push_back(dev_.create_event(EventUse::kOrdering));
    // My own node's heads go straight, on the copy streams, while the first chunks fly.
    dev_.stream_wait_event(*copy_, *ready_evt_);
    dev_.stream_wait_event(*self_, *ready_evt_);
    interval_start(sub.tag);
    copy_to_node(sub, t);
    for (int64_t b = 0; b < h.B; ++b) {
      for (int k = 0; k < K; ++k) {
        const int64_t lo = h.chunk_lo(n_, k, K), hi = h.chunk_lo(n_, k + 1, K);
        std::vector<PeerTransfer> xfers;
        for (int m = 0; m < N_; ++m) {
          if (m == n_) continue;
          const int64_t rlo = h.chunk_lo(m, k, K), rhi = h.chunk_lo(m, k + 1, K), w = h.slice(m * L_ + l_);
          PeerTransfer x;
          x.peer = m;
          x.send = src + h.bytes((b * h.S + h.node_begin(m) + rlo) * v);
          x.send_bytes = h.bytes((rhi - rlo) * v);
          x.recv = relay(t, l_, m, h) + h.bytes((b * LS + lo) * w);
          x.recv_bytes = h.bytes((hi - lo) * w);
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
          const Span jt = h.tok(n_ * L_ + j);
          const int64_t j0 = jt.begin - h.node_begin(n_);  // j's shard in the node block
          const int64_t jlo = std::max(lo, j0), jhi = std::min(hi, j0 + jt.count);
          if (jlo >= jhi) continue;
          for (int m = 0; m < N_; ++m) {
            if (m == n_) continue;
            const int from = m * L_ + l_;  // whose heads the relay holds
            const int64_t w = h.slice(from);
            dev_.copy_2d(*copy_, target(t, j) + h.bytes((b * jt.count + jlo - j0) * h.H * h.D + h.hd(from).begin * h.D),
                         h.bytes(h.H * h.D), relay(t, l_, m, h) + h.bytes((b * LS + jlo) * w), h.bytes(w), h.bytes(w),
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
    const int K = h.chunks(chunks_), R = N_ - 1, g = n_ * L_ + l_;
    const int64_t nblocks = h.B * K, LS = h.node_len(n_), v = h.slice(g);
    const uint64_t seq_end = seq0 + static_cast<uint64_t>(nblocks);
    for (int j = 0; j < L_; ++j)
      dev_.wait_value64_geq(*inter_, handshake_->my_word(j, 0), seq_end,
                            WaitLabel{handshake_->world_rank(j), "chunk " + std::to_string(seq_end) +
                                                                     " of the relays (tag V, intra-node phase, V-major)"});
    VState& vs = vstate_[target_key(sub).describe()];
    // My relays (one per other node, widths of their destinations' head slices), and what
    // each remote node sends me (node m's block of my heads), in the same order.
    const size_t relays = h.relay_offset(g, N_) - h.relay_offset(g, 0);
    size_t incoming = 0;
    for (int m = 0; m < N_; ++m)
      if (m != n_) incoming += h.relay_bytes(m, g);
    unsigned char* mine = target(t, l_) + h.relay_offset(g, 0);  // where my relays start
    if (!vs.last) {
      vs.last = dev_.alloc(relays);
      vs.rows = dev_.alloc(static_cast<size_t>(R * h.B * LS) * 2 * sizeof(double));
      vs.send_stage = dev_.alloc(relays);
      vs.recv_stage = dev_.alloc(std::max<size_t>(incoming, 1));
      vs.masks = dev_.alloc(static_cast<size_t>(2 * R * nblocks));
      vs.sent.assign(static_cast<size_t>(R * nblocks), 0);
    }
    // Which of my blocks go: never sent, not selective now, or changed enough.
    std::vector<double> rows;
    if (selective_) {
      for (int m = 0, r = 0; m < N_; ++m) {
        if (m == n_) continue;
        const size_t off = h.relay_offset(g, m) - h.relay_offset(g, 0);
        vmajor_.row_change(*inter_, mine + off, vs.last.as<unsigned char>() + off, sub.shape.dtype, h.B * LS,
                           h.slice(m * L_ + l_), vs.rows.as<double>() + 2 * r * h.B * LS);
        ++r;
      }
      rows.resize(static_cast<size_t>(R * h.B * LS) * 2);
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
            for (int64_t tok = h.chunk_lo(n_, k, K); tok < h.chunk_lo(n_, k + 1, K); ++tok) {
              const size_t row = static_cast<size_t>((r * h.B + b) * LS + tok);
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
    size_t full = 0, recv_at = 0;
    for (int m = 0, r = 0; m < N_; ++m) {
      if (m == n_) continue;
      const size_t off = h.relay_offset(g, m) - h.relay_offset(g, 0);
      const int64_t w = h.slice(m * L_ + l_);
      size_t out = 0, in = 0;
      auto* send_base = vs.send_stage.as<unsigned char>() + off;
      auto* recv_base = vs.recv_stage.as<unsigned char>() + recv_at;
      for (int64_t b = 0; b < h.B; ++b)
        for (int k = 0; k < K; ++k) {
          const int64_t lo = h.chunk_lo(n_, k, K), hi = h.chunk_lo(n_, k + 1, K);
          const size_t bytes = h.bytes((hi - lo) * w), at = off + h.bytes((b * LS + lo) * w);
          const size_t blk = static_cast<size_t>(r * nblocks + b * K + k);
          full += bytes;
          if (masks[blk]) {
            dev_.copy_2d(*inter_, send_base + out, bytes, mine + at, bytes, bytes, 1);
            dev_.copy_2d(*inter_, vs.last.as<unsigned char>() + at, bytes, mine + at, bytes, bytes, 1);
            vs.sent[blk] = 1;
            out += bytes;
          }
          const int64_t rlo = h.chunk_lo(m, k, K), rhi = h.chunk_lo(m, k + 1, K);
          if (masks[static_cast<size_t>(R * nblocks) + blk]) {
            unpack[static_cast<size_t>(r)].push_back(
                {h.bytes((b * h.S + h.node_begin(m) + rlo) * v), h.bytes((rhi - rlo) * v)});
            in += h.bytes((rhi - rlo) * v);
          }
        }
      xd.push_back(PeerTransfer{m, send_base, out, recv_base, in});
      stats_.inter_bytes_sent += static_cast<int64_t>(out) + nblocks;  // the mask too
      recv_at += h.relay_bytes(m, g);
      ++r;
    }
    stats_.inter_bytes_full += static_cast<int64_t>(full);
    set_activity("in V-major's inter-node phase");
    rail_->send_recv(*inter_, xd);
    for (int r = 0; r < R; ++r) {
      auto* at = static_cast<unsigned char*>(xd[static_cast<size_t>(r)].recv);
      for (const auto& [offset, bytes] : unpack[static_cast<size_t>(r)]) {
        dev_.copy_2d(*inter_, target(t, l_) + offset, bytes, at, bytes, bytes, 1);
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
    group_->done = group_events_.take();
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
  bool time_v_copy_;  // V's copies timed (TransportOptions::time_v_copy)
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
  EventPool group_events_{dev_};
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
                                               const CollectivesFactory& make_collectives, const TransportOptions& opts,
                                               int chunks, const VMajorOptions& vmajor) {
  return std::make_unique<HierTransport>(dev, group, group_nodes, make_collectives, opts, chunks, vmajor);
}

}  // namespace uipc
