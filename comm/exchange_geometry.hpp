// Where each byte of a Ulysses exchange goes: the 2-D copies that carry rank `me`'s
// part for `peer`, straight from the source view into the peer's final layout.
// Shared by every transport (IPC copies them into peers' targets; the NCCL baseline
// uses the same slices to pack and unpack around its all-to-all).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/transport.hpp"

namespace uipc {

// A 2-D copy: `height` rows of `width` bytes, offsets and pitches in bytes.
struct Copy2D {
  size_t src_offset = 0, src_pitch = 0;
  size_t dst_offset = 0, dst_pitch = 0;
  size_t width = 0, height = 0;
};

// Elements in the final (received) tensor of one rank.
inline int64_t exchange_result_elems(const ExchangeShape& s) {
  return s.batch * s.seq_local * s.heads * s.head_dim;  // the same count before and after
}

// Bytes one rank sends to one peer.
inline size_t exchange_slice_bytes(const ExchangeShape& s, int peers) {
  return static_cast<size_t>(s.batch * s.seq_local * (s.heads / peers) * s.head_dim) * dtype_size(s.dtype);
}

// This rank's own slice of a scatter result `base` (the final layout, as a whole) for a
// producer that writes it itself (Transport::own_slice).
inline OwnSlice own_slice_of(void* base, const ExchangeShape& s, int me, int peers) {
  const int64_t hl = s.heads / peers;
  OwnSlice o;
  o.data = static_cast<unsigned char*>(base) + static_cast<size_t>(me * s.seq_local * hl * s.head_dim) * dtype_size(s.dtype);
  o.head_begin = static_cast<int>(me * hl);
  o.head_count = static_cast<int>(hl);
  o.row_pitch = hl * s.head_dim;
  o.batch_pitch = s.seq_local * peers * hl * s.head_dim;
  return o;
}

// The copies (one per batch) from rank `me`'s source into rank `peer`'s result.
//  scatter: src (B, Sl, H, D) rows `src_row_pitch` elements apart
//           -> dst (B, Sl*P, H/P, D): peer gets heads [peer*Hl, +Hl) at tokens [me*Sl, +Sl)
//  gather:  src (B, Sl*P, H/P, D) contiguous
//           -> dst (B, Sl, H, D): peer gets tokens [peer*Sl, +Sl) at heads [me*Hl, +Hl)
inline std::vector<Copy2D> exchange_copies(const Submission& sub, int me, int peer, int peers) {
  const ExchangeShape& s = sub.shape;
  const size_t es = dtype_size(s.dtype);
  const int64_t hl = s.heads / peers;
  const int64_t slice = hl * s.head_dim;              // elements of one token's slice
  const int64_t full = static_cast<int64_t>(s.heads) * s.head_dim;
  const int64_t seq = s.seq_local * peers;
  std::vector<Copy2D> out;
  for (int64_t b = 0; b < s.batch; ++b) {
    Copy2D c;
    c.width = slice * es;
    c.height = static_cast<size_t>(s.seq_local);
    if (sub.dir == Direction::kScatter) {
      const int64_t pitch = sub.src_row_pitch > 0 ? sub.src_row_pitch : full;
      c.src_offset = (b * s.seq_local * pitch + peer * slice) * es;
      c.src_pitch = pitch * es;
      c.dst_offset = ((b * seq + me * s.seq_local) * slice) * es;
      c.dst_pitch = slice * es;
    } else {
      c.src_offset = ((b * seq + peer * s.seq_local) * slice) * es;
      c.src_pitch = slice * es;
      c.dst_offset = (b * s.seq_local * full + me * slice) * es;
      c.dst_pitch = full * es;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace uipc
