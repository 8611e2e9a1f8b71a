// `deck from-config`: the attention layer a diffusers transformer config.json describes,
// at a given resolution and frame count, as the ModelLayer the presets are made of
// (lib/deck/model_layer.hpp). The class table in deck_from_config.cpp says, per diffusers
// class, which fields it reads, what it fixes by class, and where each fact comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/deck/model_layer.hpp"

namespace uipc {

// What the command line adds to the config: the pixel size, the frame count (video
// classes only; their pipeline's default if not given) and the text tokens the layer
// attends jointly (joint-attention classes only; the class's default if not given).
struct ConfigShape {
  int64_t width = 0, height = 0;
  std::optional<int64_t> frames;
  std::optional<int64_t> text_tokens;
};

// "WxH" (e.g. "1280x720") as a shape's width and height. Throws InputError.
void parse_resolution(const std::string& text, ConfigShape& shape);

// The layer of `config_json` (the text of a config.json; `where` names it in errors) at
// `shape`: name, heads, head dim, norm, RoPE, projection and one resolution entry (label
// "WxH" or "WxH-Ff", the token count). Throws InputError naming what is wrong: JSON that
// does not parse, an unknown class, a missing or malformed field, a resolution or frame
// count the VAE and patch size do not divide, an option the class does not take.
ModelLayer model_layer_from_config(const std::string& config_json, const std::string& where, const ConfigShape& shape);
// The same, reading the file at `path`.
ModelLayer model_layer_from_config_file(const std::string& path, const ConfigShape& shape);

// The diffusers classes from-config reads, in table order.
std::vector<std::string> config_classes();

}  // namespace uipc
