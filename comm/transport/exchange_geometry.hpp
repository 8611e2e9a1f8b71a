// Where each byte of a Ulysses exchange goes: the balanced split of tokens and heads over
// the group (even or not), and the 2-D copies that carry rank `me`'s part for `peer`,
// straight from the source view into the peer's final layout.
// Shared by every transport (IPC copies them into peers' targets; the NCCL baseline
// uses the same slices to pack and unpack around its all-to-all).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport/transport.hpp"

namespace uipc {

// A 2-D copy: `height` rows of `width` bytes, offsets and pitches in bytes.
struct Copy2D {
  size_t src_offset = 0, src_pitch = 0;
  size_t dst_offset = 0, dst_pitch = 0;
  size_t width = 0, height = 0;
};

// Balanced split of n items over p parts: part i has n/p, the first n%p one more.
inline int64_t split_count(int64_t n, int p, int i) { return n / p + (i < n % p ? 1 : 0); }
inline int64_t split_begin(int64_t n, int p, int i) { return i * (n / p) + (i < n % p ? i : n % p); }

// The group's tokens (all shards together).
inline int64_t exchange_seq(const ExchangeShape& s, int peers) { return s.seq > 0 ? s.seq : s.seq_local * peers; }
// Rank r's shard of the tokens and slice of the heads: [begin, begin + count).
struct Span {
  int64_t begin = 0, count = 0;
};
inline Span token_shard(const ExchangeShape& s, int peers, int r) {
  const int64_t S = exchange_seq(s, peers);
  return {split_begin(S, peers, r), split_count(S, peers, r)};
}
inline Span head_slice(const ExchangeShape& s, int peers, int r) {
  return {split_begin(s.heads, peers, r), split_count(s.heads, peers, r)};
}
// Every shard and every head slice of the same size.
inline bool exchange_is_even(const ExchangeShape& s, int peers) {
  return exchange_seq(s, peers) % peers == 0 && s.heads % peers == 0;
}
// What a transport checks of a submission: rank `me`'s seq_local is its shard, and every
// rank has a head and a token ("" = fine).
inline std::string exchange_shape_problem(const ExchangeShape& s, int me, int peers) {
  const int64_t S = exchange_seq(s, peers);
  if (s.heads < peers) return std::to_string(s.heads) + " heads for " + std::to_string(peers) + " ranks";
  if (S < peers) return std::to_string(S) + " tokens for " + std::to_string(peers) + " ranks";
  if (s.seq_local != token_shard(s, peers, me).count)
    return "seq_local " + std::to_string(s.seq_local) + " is not rank " + std::to_string(me) + "'s shard of " +
           std::to_string(S) + " tokens (" + std::to_string(token_shard(s, peers, me).count) + ")";
  return "";
}

// Elements of rank r's result: scatter (B, S, Hl(r), D), gather (B, Sl(r), H, D).
inline int64_t exchange_result_elems(const ExchangeShape& s, Direction dir, int r, int peers) {
  return dir == Direction::kScatter ? s.batch * exchange_seq(s, peers) * head_slice(s, peers, r).count * s.head_dim
                                    : s.batch * token_shard(s, peers, r).count * s.heads * s.head_dim;
}
// The largest result of any rank of the group: what a target shared by all is sized to.
inline int64_t exchange_max_result_elems(const ExchangeShape& s, Direction dir, int peers) {
  return exchange_result_elems(s, dir, 0, peers);  // rank 0 has the most tokens and heads
}

// Bytes rank `from` sends rank `to`: scatter, from's tokens of to's heads; gather, to's
// tokens of from's heads.
inline size_t exchange_slice_bytes(const ExchangeShape& s, Direction dir, int from, int to, int peers) {
  const int tokens_of = dir == Direction::kScatter ? from : to, heads_of = dir == Direction::kScatter ? to : from;
  return static_cast<size_t>(s.batch * token_shard(s, peers, tokens_of).count * head_slice(s, peers, heads_of).count *
                             s.head_dim) *
         dtype_size(s.dtype);
}

// This rank's own slice of a scatter result `base` (the final layout, as a whole) for a
// producer that writes it itself (Transport::own_slice).
inline OwnSlice own_slice_of(void* base, const ExchangeShape& s, int me, int peers) {
  const Span tok = token_shard(s, peers, me), hd = head_slice(s, peers, me);
  OwnSlice o;
  o.data = static_cast<unsigned char*>(base) + static_cast<size_t>(tok.begin * hd.count * s.head_dim) * dtype_size(s.dtype);
  o.head_begin = static_cast<int>(hd.begin);
  o.head_count = static_cast<int>(hd.count);
  o.row_pitch = hd.count * s.head_dim;
  o.batch_pitch = exchange_seq(s, peers) * hd.count * s.head_dim;
  return o;
}

// The copies (one per batch) from rank `me`'s source into rank `peer`'s result.
//  scatter: src (B, Sl(me), H, D) rows `src_row_pitch` elements apart
//           -> dst (B, S, Hl(peer), D): peer gets its heads at my tokens
//  gather:  src (B, S, Hl(me), D) contiguous
//           -> dst (B, Sl(peer), H, D): peer gets its tokens at my heads
inline std::vector<Copy2D> exchange_copies(const Submission& sub, int me, int peer, int peers) {
  const ExchangeShape& s = sub.shape;
  const size_t es = dtype_size(s.dtype);
  const int64_t full = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t seq = exchange_seq(s, peers);
  const bool scatter = sub.dir == Direction::kScatter;
  const Span tok = token_shard(s, peers, scatter ? me : peer), hd = head_slice(s, peers, scatter ? peer : me);
  const int64_t slice = hd.count * s.head_dim;  // elements of one token's slice
  std::vector<Copy2D> out;
  for (int64_t b = 0; b < s.batch; ++b) {
    Copy2D c;
    c.width = static_cast<size_t>(slice) * es;
    c.height = static_cast<size_t>(tok.count);
    if (scatter) {
      const int64_t pitch = sub.src_row_pitch > 0 ? sub.src_row_pitch : full;
      c.src_offset = static_cast<size_t>(b * tok.count * pitch + hd.begin * s.head_dim) * es;
      c.src_pitch = static_cast<size_t>(pitch) * es;
      c.dst_offset = static_cast<size_t>((b * seq + tok.begin) * slice) * es;
      c.dst_pitch = static_cast<size_t>(slice) * es;
    } else {
      c.src_offset = static_cast<size_t>((b * seq + tok.begin) * slice) * es;
      c.src_pitch = static_cast<size_t>(slice) * es;
      c.dst_offset = static_cast<size_t>(b * tok.count * full + hd.begin * s.head_dim) * es;
      c.dst_pitch = static_cast<size_t>(full) * es;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace uipc
