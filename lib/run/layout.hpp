// Layout math in one place: which tokens and heads each rank holds for a case on a
// given world, and which ranks form its Ulysses and TP groups (docs/math.md, "Shapes").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc {

struct Layout {
  int world = 1, rank = 0;
  int tp = 1, ulysses = 1;
  RankOrder rank_order = RankOrder::kTpOuter;
  int tp_rank = 0, u_rank = 0;
  // Shards and head slices are balanced, possibly uneven (docs/math.md, "Shapes"): this
  // rank's tokens [seq_offset, seq_offset + seq_local) and, after the scatter, its heads
  // [first_head_tp() + head_offset, + heads_local) of its TP slice.
  int64_t batch = 1, seq = 1, seq_local = 1, seq_offset = 0;
  int heads = 1, heads_tp = 1, heads_local = 1, head_offset = 0, head_dim = 1;

  int64_t width() const { return static_cast<int64_t>(heads) * head_dim; }      // C
  int64_t width_tp() const { return static_cast<int64_t>(heads_tp) * head_dim; }  // Ht*D
  int64_t tokens_local() const { return batch * seq_local; }                       // rows M
  int64_t pos_offset() const { return seq_offset; }
  int first_head_tp() const { return tp_rank * heads_tp; }
  // The world rank of (tp_rank t, u_rank u) under rank_order.
  int rank_of(int t, int u) const { return rank_order == RankOrder::kTpInner ? u * tp + t : t * ulysses + u; }
  // World ranks of this rank's Ulysses group (same tp_rank, by u_rank) and TP group (same
  // u_rank, by tp_rank).
  std::vector<int> ulysses_group() const;
  std::vector<int> tp_group() const;
  std::string describe() const;  // "TP2 x Ulysses2 (rank 3: tp_rank 1, u_rank 1)"
  // Every shard and head slice the same size.
  bool even() const { return seq % ulysses == 0 && heads_tp % ulysses == 0; }
};

// Throws InputError when the case cannot run on `world` ranks.
Layout make_layout(const Case& c, int world, int rank);

}  // namespace uipc
