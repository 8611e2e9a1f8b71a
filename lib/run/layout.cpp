// Layout math: ranks -> (tp_rank, u_rank), sequence shards and head slices.
#include "lib/run/layout.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace uipc {

std::vector<int> Layout::ulysses_group() const {
  std::vector<int> g;
  for (int u = 0; u < ulysses; ++u) g.push_back(rank_of(tp_rank, u));
  return g;
}

std::vector<int> Layout::tp_group() const {
  std::vector<int> g;
  for (int t = 0; t < tp; ++t) g.push_back(rank_of(t, u_rank));
  return g;
}

std::string Layout::describe() const {
  std::string s = tp > 1 ? "TP" + std::to_string(tp) + " x Ulysses" + std::to_string(ulysses) +
                               (rank_order == RankOrder::kTpInner ? " (tp_inner)" : "")
                         : "Ulysses" + std::to_string(ulysses);
  return s + " (rank " + std::to_string(rank) + ": tp_rank " + std::to_string(tp_rank) +
         ", u_rank " + std::to_string(u_rank) + ")";
}

Layout make_layout(const Case& c, int world, int rank) {
  validate_case_for_world(c, world);
  Layout l;
  l.world = world;
  l.rank = rank;
  l.tp = c.tp;
  l.ulysses = c.ulysses_for(world);
  UIPC_CHECK(l.tp * l.ulysses == world, "validated layout must cover the world");
  l.rank_order = c.rank_order;
  l.tp_rank = l.rank_order == RankOrder::kTpInner ? rank % l.tp : rank / l.ulysses;
  l.u_rank = l.rank_order == RankOrder::kTpInner ? rank / l.tp : rank % l.ulysses;
  l.batch = c.batch;
  l.seq = c.seq_len;
  // Balanced: S/U tokens and Ht/U heads, the first S%U (Ht%U) ranks one more.
  l.seq_local = c.seq_len / l.ulysses + (l.u_rank < c.seq_len % l.ulysses ? 1 : 0);
  l.seq_offset = l.u_rank * (c.seq_len / l.ulysses) + std::min<int64_t>(l.u_rank, c.seq_len % l.ulysses);
  l.heads = c.heads;
  l.heads_tp = c.heads / l.tp;
  l.heads_local = l.heads_tp / l.ulysses + (l.u_rank < l.heads_tp % l.ulysses ? 1 : 0);
  l.head_offset = l.u_rank * (l.heads_tp / l.ulysses) + std::min(l.u_rank, l.heads_tp % l.ulysses);
  l.head_dim = c.head_dim;
  return l;
}

}  // namespace uipc
