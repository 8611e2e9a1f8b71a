// `deck from-config` against the shipped presets: the real config.json of every preset
// model (tests/diffusers_configs/, sources in its README), at every shipped resolution,
// gives the preset's heads, head dim, Q/K norm, projection, RoPE and token count, and a
// deck whose cases equal the preset's field for field. Also each bad input's message.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "base/error.hpp"
#include "app/deck_cli.hpp"
#include "lib/deck/deck_from_config.hpp"
#include "lib/deck/model_layer.hpp"
#include "tests/deck_testing.hpp"

using uipc::ConfigShape;
using uipc::InputError;
using uipc::ModelLayer;

namespace {

const std::string kConfigs = std::string(ULYSSES_SOURCE_DIR) + "/tests/diffusers_configs/";

// Which checkpoint config stands behind each preset model, and what each preset
// resolution label means in pixels and frames (the presets' tokens_note says the same
// in words). A preset model or resolution missing here fails the test: a new preset
// needs its config and its resolution stated before it ships.
const std::map<std::string, std::string> kConfigOf = {
    {"flux-dev", "flux-dev.json"},         {"sd3-medium", "sd3-medium.json"},
    {"pixart-alpha", "pixart-alpha.json"}, {"hunyuanvideo", "hunyuanvideo.json"},
    {"wan2.1-14b", "wan2.1-t2v-14b.json"}, {"wan2.1-1.3b", "wan2.1-t2v-1.3b.json"},
    {"cogvideox-5b", "cogvideox-5b.json"},
};
struct Pixels {
  int64_t width, height, frames;  // frames 0: an image model
};
const std::map<std::pair<std::string, std::string>, Pixels> kPixelsOf = {
    {{"flux-dev", "1024"}, {1024, 1024, 0}},       {{"flux-dev", "2048"}, {2048, 2048, 0}},
    {{"sd3-medium", "1024"}, {1024, 1024, 0}},     {{"pixart-alpha", "1024"}, {1024, 1024, 0}},
    {{"hunyuanvideo", "720p"}, {1280, 720, 129}},  {{"wan2.1-14b", "480p"}, {832, 480, 81}},
    {{"wan2.1-14b", "720p"}, {1280, 720, 81}},     {{"wan2.1-1.3b", "480p"}, {832, 480, 81}},
    {{"cogvideox-5b", "720x480"}, {720, 480, 49}},
};

std::string run_deck_cli(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out;
  EXPECT_EQ(uipc::deck_command(static_cast<int>(argv.size()), argv.data(), out), 0);
  return out.str();
}

std::string layout_tag(const std::string& case_name) { return case_name.substr(case_name.rfind('.') + 1); }

ModelLayer derive(const std::string& json, const ConfigShape& shape) {
  return uipc::model_layer_from_config(json, "test.json", shape);
}

ConfigShape shape(int64_t w, int64_t h) {
  ConfigShape s;
  s.width = w;
  s.height = h;
  return s;
}

// The InputError of `json` at `s`, with its exit code (main returns it: 2).
void expect_error(const std::string& json, const ConfigShape& s, const std::string& part) {
  try {
    derive(json, s);
    ADD_FAILURE() << "no error; expected: " << part;
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), uipc::kExitBadInput);
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

}  // namespace

// Every preset model at every resolution: the pure derivation agrees on the layer.
TEST(DeckFromConfig, AgreesWithEveryShippedPresetModel) {
  int checked = 0;
  for (const ModelLayer& m : uipc::model_layers()) {
    auto cfg = kConfigOf.find(m.name);
    ASSERT_NE(cfg, kConfigOf.end()) << "preset model '" << m.name << "' has no config in tests/diffusers_configs";
    for (const auto& [label, tokens] : m.resolutions) {
      SCOPED_TRACE(m.name + " " + label);
      auto px = kPixelsOf.find({m.name, label});
      ASSERT_NE(px, kPixelsOf.end()) << "no pixel size stated for preset resolution " << m.name << "-" << label;
      ConfigShape s = shape(px->second.width, px->second.height);
      if (px->second.frames) s.frames = px->second.frames;
      const ModelLayer d = uipc::model_layer_from_config_file(kConfigs + cfg->second, s);
      EXPECT_EQ(d.heads, m.heads);
      EXPECT_EQ(d.head_dim, m.head_dim);
      EXPECT_EQ(d.qk_norm, m.qk_norm);
      EXPECT_EQ(d.rope, m.rope);
      EXPECT_EQ(d.fused_qkv, m.fused_qkv);
      ASSERT_EQ(d.resolutions.size(), 1u);
      EXPECT_EQ(d.resolutions[0].second, tokens) << d.tokens_note;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(kPixelsOf.size())) << "a stated resolution has no preset behind it";
}

// The same through the command line: `deck from-config` writes the preset's cases, equal
// in every field but the name and description, layout for layout.
TEST(DeckFromConfig, CommandWritesThePresetsCases) {
  uipc::testing::TempDir dir;
  for (const auto& [key, px] : kPixelsOf) {
    const auto& [model, label] = key;
    SCOPED_TRACE(model + "-" + label);
    const std::string out = dir.file(model + "-" + label + ".h5");
    std::vector<std::string> args = {"from-config", kConfigs + kConfigOf.at(model), "--resolution",
                                     std::to_string(px.width) + "x" + std::to_string(px.height), "-o", out};
    if (px.frames) args.insert(args.end(), {"--frames", std::to_string(px.frames)});
    run_deck_cli(args);
    const uipc::Deck got = uipc::read_deck(out);
    const uipc::Deck want = uipc::deck_preset(model + "-" + label);
    ASSERT_EQ(got.cases.size(), want.cases.size());
    for (size_t i = 0; i < want.cases.size(); ++i) {
      uipc::Case g = got.cases[i];
      EXPECT_EQ(layout_tag(g.name), layout_tag(want.cases[i].name));
      g.name = want.cases[i].name;
      g.description = want.cases[i].description;
      uipc::testing::expect_same_case(g, want.cases[i]);
    }
  }
}

// A layout option writes one case of that layout; one the heads do not allow is refused
// with the presets' own reason.
TEST(DeckFromConfig, LayoutOptionsPickOneLayout) {
  uipc::testing::TempDir dir;
  const std::string cfg = kConfigs + "wan2.1-t2v-1.3b.json", out = dir.file("w.h5");
  run_deck_cli({"from-config", cfg, "--resolution", "832x480", "--ulysses", "4", "--transports", "nccl", "-o", out});
  const uipc::Deck d = uipc::read_deck(out);
  ASSERT_EQ(d.cases.size(), 1u);
  EXPECT_EQ(d.cases[0].name, "wan-832x480-81f.u4");
  EXPECT_EQ(d.cases[0].ulysses, 4);
  EXPECT_EQ(d.cases[0].tp, 1);
  EXPECT_EQ(d.cases[0].transports, std::vector<std::string>{"nccl"});
  EXPECT_EQ(d.cases[0].seq_len, 32760);
  try {
    run_deck_cli({"from-config", cfg, "--resolution", "832x480", "--ulysses", "2", "--tp", "2", "-o", out});
    ADD_FAILURE() << "tp 2 with RMS norm across heads was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RMS norm across heads needs every head of a token on one rank"),
              std::string::npos)
        << e.what();
  }
}

// Frames and text tokens move the token count as the VAE and the class say.
TEST(DeckFromConfig, FramesAndTextTokens) {
  std::ifstream in(kConfigs + "hunyuanvideo.json");
  std::stringstream hv;
  hv << in.rdbuf();
  ConfigShape s = shape(1280, 720);
  s.frames = 61;                                                  // (61 - 1) / 4 + 1 = 16 latent frames
  EXPECT_EQ(derive(hv.str(), s).resolutions[0].second, 16 * 45 * 80 + 256);
  s.text_tokens = 0;
  EXPECT_EQ(derive(hv.str(), s).resolutions[0].second, 16 * 45 * 80);
  // CogVideoX 1.5 style: a temporal patch of 2 halves the latent frames; the config's
  // own text length and temporal compression are read.
  const std::string cog15 = R"({"_class_name": "CogVideoXTransformer3DModel", "num_attention_heads": 48,
      "attention_head_dim": 64, "patch_size": 2, "patch_size_t": 2, "max_text_seq_length": 224,
      "temporal_compression_ratio": 4})";
  s = shape(1360, 768);
  s.frames = 85;  // 22 latent frames, 11 after the temporal patch
  EXPECT_EQ(derive(cog15, s).resolutions[0].second, 11 * 48 * 85 + 224);
  EXPECT_EQ(derive(cog15, s).rope, uipc::RopeKind::kNone);  // use_rotary_positional_embeddings absent: off
}

TEST(DeckFromConfig, EachBadInputNamesWhatIsWrong) {
  const std::string flux = R"({"_class_name": "FluxTransformer2DModel", "num_attention_heads": 24,
      "attention_head_dim": 128, "patch_size": 1})";
  expect_error(R"({"_class_name": "UNet2DConditionModel"})", shape(1024, 1024),
               "unknown class \"UNet2DConditionModel\" (classes read: FluxTransformer2DModel");
  expect_error(R"({"num_attention_heads": 24})", shape(1024, 1024), "no \"_class_name\"");
  expect_error(R"({"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128, "patch_size": 1})",
               shape(1024, 1024), "'num_attention_heads' is missing (FluxTransformer2DModel needs it)");
  expect_error(R"({"_class_name": "SD3Transformer2DModel", "num_attention_heads": 24, "attention_head_dim": 64})",
               shape(1024, 1024), "'patch_size' is missing (SD3Transformer2DModel needs it)");
  expect_error(R"({"_class_name": "FluxTransformer2DModel", "num_attention_heads": "24",
      "attention_head_dim": 128, "patch_size": 1})",
               shape(1024, 1024), "'num_attention_heads' is \"24\", not a positive integer");
  expect_error(flux, shape(1000, 1024),
               "--resolution: width 1000 does not divide by 16 (the VAE's 8x times patch 1 times the pipeline's 2x2 "
               "packing for FluxTransformer2DModel)");
  expect_error(flux, shape(1024, 1000), "height 1000 does not divide by 16");
  ConfigShape f = shape(1024, 1024);
  f.frames = 9;
  expect_error(flux, f, "--frames: FluxTransformer2DModel is an image model");
  std::ifstream in(kConfigs + "wan2.1-t2v-14b.json");
  std::stringstream wan;
  wan << in.rdbuf();
  ConfigShape w = shape(832, 480);
  w.frames = 80;
  expect_error(wan.str(), w, "--frames: 80 is not 1 + a multiple of 4 (the VAE's temporal compression for "
                             "WanTransformer3DModel; e.g. 81)");
  w.frames = 81;
  w.text_tokens = 512;
  expect_error(wan.str(), w, "--text-tokens: WanTransformer3DModel attends the text by cross-attention");
  expect_error(R"({"_class_name": "WanTransformer3DModel", "num_attention_heads": 12, "attention_head_dim": 128,
      "patch_size": [1, 2, 2], "qk_norm": "l2"})",
               shape(832, 480), "'qk_norm' is \"l2\", a Q/K norm this program does not model");
  ConfigShape t = shape(1024, 1024);
  t.text_tokens = -1;
  expect_error(flux, t, "--text-tokens: -1 is out of range (0..1048576)");
  t.text_tokens = int64_t{1} << 62;  // would overflow the token sum
  expect_error(flux, t, "is out of range");
  expect_error("{\"_class_name\": ", shape(1024, 1024), "test.json: not valid JSON");
  expect_error("[1, 2]", shape(1024, 1024), "not a JSON object");
  EXPECT_THROW(uipc::model_layer_from_config_file("/nonexistent/config.json", shape(1024, 1024)), InputError);
  try {
    uipc::model_layer_from_config_file(kConfigs, shape(1024, 1024));
    ADD_FAILURE() << "a directory was read as a config";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  ConfigShape r;
  EXPECT_THROW(uipc::parse_resolution("1024", r), InputError);
  EXPECT_THROW(uipc::parse_resolution("1024x0", r), InputError);
  EXPECT_THROW(uipc::parse_resolution("x1024", r), InputError);
  uipc::parse_resolution("1280x720", r);
  EXPECT_EQ(std::make_tuple(r.width, r.height), std::make_tuple(int64_t{1280}, int64_t{720}));
}

// PixArt checkpoints on the Hub say "Transformer2DModel"; only with norm_type
// ada_norm_single is that PixArt (diffusers' own remapping), not a plain 2-D transformer.
TEST(DeckFromConfig, Transformer2DModelIsPixArtOnlyWithAdaNormSingle) {
  const std::string base = R"("_class_name": "Transformer2DModel", "num_attention_heads": 16,
      "attention_head_dim": 72, "patch_size": 2)";
  EXPECT_EQ(derive("{" + base + R"(, "norm_type": "ada_norm_single"})", shape(1024, 1024)).name, "pixart");
  expect_error("{" + base + R"(, "norm_type": "ada_norm_zero"})", shape(1024, 1024),
               "unknown class \"Transformer2DModel\"");
}
