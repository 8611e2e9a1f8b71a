// Helpers shared by the deck and report tests: a scratch directory that removes itself,
// and a field-by-field comparison of cases (a failure names the field).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "uipc-test-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  // File names in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(path_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  std::string path_;
};

inline void expect_same_case(const Case& a, const Case& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope, b.rope);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.fused_qkv, b.fused_qkv);
  EXPECT_EQ(a.ulysses, b.ulysses);
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.transports, b.transports);
  EXPECT_EQ(a.schedules, b.schedules);
  EXPECT_EQ(a.ablations, b.ablations);
  EXPECT_EQ(a.warmup, b.warmup);
  EXPECT_EQ(a.iterations, b.iterations);
  EXPECT_EQ(a.repeats, b.repeats);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.tol_max_abs, b.tol_max_abs);
  EXPECT_EQ(a.tol_rel_l2, b.tol_rel_l2);
  EXPECT_EQ(a.watchdog_s, b.watchdog_s);
  EXPECT_EQ(a.rank_order, b.rank_order);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.step_similarity, b.step_similarity);
  EXPECT_EQ(a.full_steps, b.full_steps);
  EXPECT_EQ(a.vmajor_threshold, b.vmajor_threshold);
  EXPECT_EQ(a.vmajor_tol_rel_l2, b.vmajor_tol_rel_l2);
}

}  // namespace uipc::testing
