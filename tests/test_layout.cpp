// Layout math (lib/layout.*): which tokens and heads each rank holds, and which ranks
// form its Ulysses and TP groups, checked against docs/math.md's definitions written out
// independently here, for every layout the decks use.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "base/error.hpp"
#include "lib/run/layout.hpp"

using namespace uipc;

namespace {

Case make_case(int heads, int64_t seq, int ulysses, int tp) {
  Case c;
  c.name = "t";
  c.heads = heads;
  c.head_dim = 64;
  c.seq_len = seq;
  c.batch = 2;
  c.ulysses = ulysses;
  c.tp = tp;
  return c;
}

struct Shape {
  int ulysses, tp;
};

class LayoutTest : public ::testing::TestWithParam<Shape> {};

TEST_P(LayoutTest, ShardsAndGroupsCoverEverythingOnce) {
  const Shape sh = GetParam();
  const int world = sh.ulysses * sh.tp;
  const Case c = make_case(48, 960, sh.ulysses, sh.tp);
  std::set<std::pair<int64_t, int>> token_head;  // (first token, first head) after the scatter
  std::set<int> seen_ranks;
  for (int r = 0; r < world; ++r) {
    Layout l = make_layout(c, world, r);
    // docs/math.md: tp_rank = r / ulysses, u_rank = r % ulysses.
    EXPECT_EQ(l.tp_rank, r / sh.ulysses);
    EXPECT_EQ(l.u_rank, r % sh.ulysses);
    EXPECT_EQ(l.seq_local * sh.ulysses, c.seq_len);
    EXPECT_EQ(l.pos_offset(), l.u_rank * (c.seq_len / sh.ulysses));
    EXPECT_EQ(l.heads_tp, c.heads / sh.tp);
    EXPECT_EQ(l.heads_local, c.heads / sh.tp / sh.ulysses);
    EXPECT_EQ(l.first_head_tp(), l.tp_rank * (c.heads / sh.tp));
    EXPECT_EQ(l.tokens_local(), c.batch * l.seq_local);
    // Groups: consecutive ranks with my tp_rank; ranks with my u_rank.
    auto ug = l.ulysses_group(), tg = l.tp_group();
    ASSERT_EQ(static_cast<int>(ug.size()), sh.ulysses);
    ASSERT_EQ(static_cast<int>(tg.size()), sh.tp);
    for (int u = 0; u < sh.ulysses; ++u) EXPECT_EQ(ug[u], l.tp_rank * sh.ulysses + u);
    for (int t = 0; t < sh.tp; ++t) EXPECT_EQ(tg[t], t * sh.ulysses + l.u_rank);
    EXPECT_NE(std::find(ug.begin(), ug.end(), r), ug.end());
    EXPECT_NE(std::find(tg.begin(), tg.end(), r), tg.end());
    // After the scatter, rank r holds all tokens of heads [first_head_tp + u_rank*Hl, +Hl).
    const int first_head = l.first_head_tp() + l.u_rank * l.heads_local;
    EXPECT_TRUE(token_head.insert({0, first_head}).second) << "two ranks hold the same heads";
    seen_ranks.insert(r);
  }
  // Every head is held by exactly one rank after the scatter.
  EXPECT_EQ(static_cast<int>(token_head.size()), world);
  EXPECT_EQ(static_cast<int>(seen_ranks.size()), world);
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutTest,
                         ::testing::Values(Shape{1, 1}, Shape{2, 1}, Shape{4, 1}, Shape{8, 1}, Shape{2, 2}, Shape{4, 2}),
                         [](const auto& info) {
                           return "U" + std::to_string(info.param.ulysses) + "TP" + std::to_string(info.param.tp);
                         });

// tp_inner (docs/math.md): rank = u_rank*tp + tp_rank, so TP groups are consecutive
// ranks (inside a node) and a Ulysses group strides over the nodes; shards and heads
// are the same functions of (tp_rank, u_rank) as with tp_outer.
TEST(Layout, TpInnerKeepsTpGroupsConsecutive) {
  Case c = make_case(8, 64, 2, 2);
  c.rank_order = RankOrder::kTpInner;
  for (int r = 0; r < 4; ++r) {
    Layout l = make_layout(c, 4, r);
    EXPECT_EQ(l.tp_rank, r % 2);
    EXPECT_EQ(l.u_rank, r / 2);
    EXPECT_EQ(l.tp_group(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(l.ulysses_group(), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(l.rank_of(l.tp_rank, l.u_rank), r);
    EXPECT_EQ(l.pos_offset(), l.u_rank * 32);
    EXPECT_EQ(l.first_head_tp(), l.tp_rank * 4);
  }
  c.rank_order = RankOrder::kTpOuter;
  EXPECT_EQ(make_layout(c, 4, 1).ulysses_group(), (std::vector<int>{0, 1}));
}

// Uneven splits (docs/math.md): balanced, the first S%U ranks one token more and the first
// Ht%U one head more; shards tile the sequence and slices the TP heads, each once.
TEST(Layout, UnevenShardsAndHeadsAreBalancedAndTile) {
  for (int u : {2, 3, 4, 8}) {
    for (int64_t seq : {int64_t{4429}, int64_t{67}, int64_t{u} * 5}) {
      for (int heads : {12, 7, 2 * u}) {
        if (heads < u) continue;
        Case c = make_case(heads, seq, u, 1);
        int64_t next_token = 0;
        int next_head = 0;
        for (int r = 0; r < u; ++r) {
          Layout l = make_layout(c, u, r);
          EXPECT_EQ(l.pos_offset(), next_token);
          EXPECT_EQ(l.head_offset, next_head);
          EXPECT_EQ(l.seq_local, seq / u + (r < seq % u ? 1 : 0)) << "u " << u << " seq " << seq << " rank " << r;
          EXPECT_EQ(l.heads_local, heads / u + (r < heads % u ? 1 : 0));
          next_token += l.seq_local;
          next_head += l.heads_local;
        }
        EXPECT_EQ(next_token, seq);
        EXPECT_EQ(next_head, heads);
      }
    }
  }
  // Wan2.1-1.3B at Ulysses8: 12 heads as 2, 2, 2, 2, 1, 1, 1, 1.
  Case wan = make_case(12, 32760, 8, 1);
  EXPECT_EQ(make_layout(wan, 8, 3).heads_local, 2);
  EXPECT_EQ(make_layout(wan, 8, 4).heads_local, 1);
  EXPECT_EQ(make_layout(wan, 8, 4).head_offset, 8);
}

TEST(Layout, ZeroUlyssesMeansAllRanksOverTp) {
  Case c = make_case(8, 64, 0, 2);
  Layout l = make_layout(c, 8, 5);
  EXPECT_EQ(l.ulysses, 4);
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.u_rank, 1);
}

TEST(Layout, ImpossibleLayoutsAreInputErrors) {
  EXPECT_THROW(make_layout(make_case(8, 64, 4, 1), 2, 0), InputError);   // world != tp * ulysses
  EXPECT_THROW(make_layout(make_case(3, 64, 4, 1), 4, 0), InputError);   // fewer heads than ranks
  EXPECT_THROW(make_layout(make_case(8, 3, 4, 1), 4, 0), InputError);    // fewer tokens than ranks
  EXPECT_THROW(make_layout(make_case(8, 64, 0, 2), 3, 0), InputError);   // world not divisible by tp
  try {
    make_layout(make_case(8, 64, 4, 2), 4, 0);
    FAIL() << "tp 2 x ulysses 4 on 4 ranks must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("8"), std::string::npos) << e.what();
  }
}

}  // namespace
