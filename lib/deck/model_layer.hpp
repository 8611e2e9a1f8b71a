// A real DiT attention layer as the presets describe it (heads, head dim, Q/K norm,
// RoPE, projection, token counts), and the one path from such a description to deck
// cases. The shipped presets (lib/deck/presets.cpp) and `deck from-config`
// (lib/deck/deck_from_config.*) both build their cases through model_cases().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc {

struct ModelLayer {
  std::string name;
  std::string source;       // where the shapes come from
  int heads, head_dim;
  NormKind qk_norm;
  RopeKind rope;            // 1-D RoPE stands in for the model's own (same cost); none where it has none
  bool fused_qkv;           // the model's own projection
  std::vector<std::pair<std::string, int64_t>> resolutions;  // label, tokens
  std::string tokens_note;  // how the token counts arise
};

// A parallel layout a case is written for; `tag` ends the case name ("u8", "tp2u2").
struct LayoutChoice {
  std::string tag;
  int ulysses, tp;
};

// The models behind the shipped presets, one entry per model.
const std::vector<ModelLayer>& model_layers();
// The layouts every model preset tries: u2, u4, u8, tp2u2.
const std::vector<LayoutChoice>& preset_layouts();

// The cases of one model at one token count: a case per layout of `layouts` that the
// heads allow; `left_out` (if given) gets the layouts left out and why.
std::vector<Case> model_cases(const ModelLayer& m, const std::string& label, int64_t tokens, int heads,
                              bool gpu_sized, std::string* left_out,
                              const std::vector<LayoutChoice>& layouts = preset_layouts());

}  // namespace uipc
