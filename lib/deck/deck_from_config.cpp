// `deck from-config`: a diffusers transformer config.json (nlohmann-json, a well-kept
// parser rather than our own) plus a resolution and frame count, as the ModelLayer the
// shipped presets are made of. What a config does not say (the VAE's compression, the
// pipeline's default text length and frame count, whether the reference model fuses its
// QKV projection) is the class's, in one table below with its sources.
#include "lib/deck/deck_from_config.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace uipc {

namespace {

using nlohmann::json;

// Every class has a VAE that compresses 8x per spatial axis: AutoencoderKL (Flux, SD3,
// PixArt), AutoencoderKLHunyuanVideo, AutoencoderKLWan, AutoencoderKLCogVideoX. The
// video VAEs are causal and 4x in time: F frames become (F - 1) / 4 + 1 latent frames,
// which is how HunyuanVideoPipeline, WanPipeline and CogVideoXPipeline count them.
constexpr int64_t kVaeSpatial = 8;
constexpr int64_t kVaeTemporal = 4;
constexpr int64_t kMaxPixels = int64_t{1} << 20;  // per axis and for frames: far above any model

// One diffusers class: what its config says, what its code fixes, what its pipeline
// adds. Field names are the config's; a null field name means the class fixes the fact.
struct ConfigClass {
  const char* name;        // "_class_name"
  const char* short_name;  // case names: "<short>-<WxH>.<layout>"
  bool video;
  const char* norm_field;    // config field naming the Q/K norm, read with norm_default
  const char* norm_default;  // the class's default for norm_field (nullptr: None)
  NormKind fixed_norm;       // where norm_field is null
  const char* rope_field;    // config boolean turning RoPE on (default false); null: fixed_rope
  bool fixed_rope;
  bool fused_qkv;            // the reference model's projection (one QKV GEMM or three)
  int64_t pack;              // spatial packing the pipeline adds on top of the patch size
  int64_t default_frames;    // the pipeline's default num_frames (video classes)
  int64_t default_text;      // text tokens attended jointly; -1: cross-attention, none
  const char* text_field;    // config field that sets the text length (over default_text)
  const char* temporal_field;  // config field with the VAE's temporal compression
  const char* source;
};

// Sources (diffusers, src/diffusers/...): models/transformers/transformer_flux.py (the
// attention's qk_norm="rms_norm" per head, RoPE); pipelines/flux/pipeline_flux.py
// (_pack_latents packs 2x2 latent patches into one token, max_sequence_length=512 T5
// tokens, joint attention); transformer_sd3.py (qk_norm=None by default, absolute
// position embeddings, no RoPE) and pipeline_stable_diffusion_3.py (77 CLIP tokens and
// max_sequence_length=256 T5 tokens, concatenated: 333, joint); pixart_transformer_2d.py
// (self-attention attn1 without Q/K norm, text by cross-attention attn2);
// transformer_hunyuan_video.py (qk_norm="rms_norm" by default, RoPE, joint attention
// with the text tokens) and pipeline_hunyuan_video.py (max_sequence_length=256,
// num_frames=129); transformer_wan.py (qk_norm="rms_norm_across_heads" by default,
// RoPE, text by cross-attention) and pipeline_wan.py (num_frames=81);
// cogvideox_transformer_3d.py (LayerNorm on Q/K per head, text and video tokens in one
// attention, use_rotary_positional_embeddings) and pipeline_cogvideox.py (num_frames=49,
// max_sequence_length=226). Fused QKV: the reference implementations of FLUX.1
// (black-forest-labs/flux, one qkv Linear) and HunyuanVideo (Tencent, img_attn_qkv); the
// others project Q, K and V apart. These are the facts the shipped presets state.
const ConfigClass kClasses[] = {
    {"FluxTransformer2DModel", "flux", false, nullptr, nullptr, NormKind::kRmsPerHead, nullptr, true, true, 2, 0,
     512, nullptr, nullptr, "diffusers FluxTransformer2DModel + FluxPipeline"},
    {"SD3Transformer2DModel", "sd3", false, "qk_norm", nullptr, NormKind::kNone, nullptr, false, false, 1, 0, 333,
     nullptr, nullptr, "diffusers SD3Transformer2DModel + StableDiffusion3Pipeline"},
    {"PixArtTransformer2DModel", "pixart", false, nullptr, nullptr, NormKind::kNone, nullptr, false, false, 1, 0, -1,
     nullptr, nullptr, "diffusers PixArtTransformer2DModel + PixArtAlphaPipeline"},
    {"HunyuanVideoTransformer3DModel", "hunyuanvideo", true, "qk_norm", "rms_norm", NormKind::kNone, nullptr, true,
     true, 1, 129, 256, nullptr, nullptr, "diffusers HunyuanVideoTransformer3DModel + HunyuanVideoPipeline"},
    {"WanTransformer3DModel", "wan", true, "qk_norm", "rms_norm_across_heads", NormKind::kNone, nullptr, true, false,
     1, 81, -1, nullptr, nullptr, "diffusers WanTransformer3DModel + WanPipeline"},
    {"CogVideoXTransformer3DModel", "cogvideox", true, nullptr, nullptr, NormKind::kLayerPerHead,
     "use_rotary_positional_embeddings", false, false, 1, 49, 226, "max_text_seq_length",
     "temporal_compression_ratio", "diffusers CogVideoXTransformer3DModel + CogVideoXPipeline"},
};

// Hub checkpoints written before PixArtTransformer2DModel existed say
// "Transformer2DModel" with norm_type "ada_norm_single"; diffusers loads them as
// PixArtTransformer2DModel (_CLASS_REMAPPING_DICT, models/model_loading_utils.py).
std::string remapped_class(const json& cfg, const std::string& name) {
  if (name != "Transformer2DModel") return name;
  auto it = cfg.find("norm_type");
  if (it != cfg.end() && it->is_string() && it->get<std::string>() == "ada_norm_single")
    return "PixArtTransformer2DModel";
  return name;
}

std::string known_list() {
  std::string s;
  for (const ConfigClass& c : kClasses) s += std::string(s.empty() ? "" : ", ") + c.name;
  return s;
}

// Reading one field of the config: each failure names the file, the field and the class.
class Fields {
 public:
  Fields(const json& cfg, const std::string& where, const char* cls) : cfg_(cfg), where_(where), cls_(cls) {}

  [[noreturn]] void bad(const std::string& what) const { throw InputError(where_ + ": " + what); }

  const json* find(const char* field) const {
    auto it = cfg_.find(field);
    return it == cfg_.end() ? nullptr : &*it;
  }
  const json& need(const char* field) const {
    const json* j = find(field);
    if (!j) bad(std::string("'") + field + "' is missing (" + cls_ + " needs it)");
    return *j;
  }
  int64_t positive(const json& j, const std::string& field) const {
    if (!j.is_number_integer() || j.get<int64_t>() < 1 || j.get<int64_t>() > kMaxPixels)
      bad("'" + field + "' is " + j.dump() + ", not a positive integer");
    return j.get<int64_t>();
  }
  int64_t positive(const char* field) const { return positive(need(field), field); }
  // A positive integer where the field may be absent or null (the class's default then).
  int64_t positive_or(const char* field, int64_t fallback) const {
    const json* j = find(field);
    return !j || j->is_null() ? fallback : positive(*j, field);
  }

 private:
  const json& cfg_;
  std::string where_;
  const char* cls_;
};

NormKind norm_named(const Fields& f, const json* j, const char* field, const char* fallback) {
  if ((!j && !fallback) || (j && j->is_null())) return NormKind::kNone;
  if (j && !j->is_string()) f.bad(std::string("'") + field + "' is " + j->dump() + ", not a string or null");
  const std::string v = j ? j->get<std::string>() : fallback;
  if (v == "rms_norm") return NormKind::kRmsPerHead;
  if (v == "rms_norm_across_heads") return NormKind::kRmsAcrossHeads;
  if (v == "layer_norm") return NormKind::kLayerPerHead;
  f.bad(std::string("'") + field + "' is \"" + v +
        "\", a Q/K norm this program does not model (rms_norm, rms_norm_across_heads, layer_norm or null)");
}

// The spatial (ph, pw) and temporal (pt) patch: "patch_size" is one integer, or [t, h, w]
// as WanTransformer3DModel writes it; "patch_size_t" (HunyuanVideo, CogVideoX 1.5) is
// the temporal one where it exists, 1 where absent or null.
void patch_of(const Fields& f, bool video, int64_t& pt, int64_t& ph, int64_t& pw) {
  const json& p = f.need("patch_size");
  if (p.is_array()) {
    if (p.size() != 3) f.bad("'patch_size' is " + p.dump() + ", not an integer or [t, h, w]");
    pt = f.positive(p[0], "patch_size[0]");
    ph = f.positive(p[1], "patch_size[1]");
    pw = f.positive(p[2], "patch_size[2]");
  } else {
    ph = pw = f.positive(p, "patch_size");
    pt = video ? f.positive_or("patch_size_t", 1) : 1;
  }
}

// Latent tokens along one axis: `pixels` / (VAE x patch x packing), which must divide.
int64_t axis_tokens(const std::string& what, int64_t pixels, int64_t patch, int64_t pack, const char* cls) {
  const int64_t step = kVaeSpatial * patch * pack;
  if (pixels % step != 0) {
    std::string how = "the VAE's 8x times patch " + std::to_string(patch);
    if (pack > 1) how += " times the pipeline's " + std::to_string(pack) + "x" + std::to_string(pack) + " packing";
    throw InputError("--resolution: " + what + " " + std::to_string(pixels) + " does not divide by " +
                     std::to_string(step) + " (" + how + " for " + cls + ")");
  }
  return pixels / step;
}

const char* norm_words(NormKind k) {
  switch (k) {
    case NormKind::kNone: return "no Q/K norm";
    case NormKind::kRmsPerHead: return "RMSNorm on Q/K per head";
    case NormKind::kRmsAcrossHeads: return "RMSNorm on Q/K across all heads";
    case NormKind::kLayerPerHead: return "LayerNorm on Q/K per head";
  }
  return "?";
}

}  // namespace

std::vector<std::string> config_classes() {
  std::vector<std::string> v;
  for (const ConfigClass& c : kClasses) v.push_back(c.name);
  return v;
}

void parse_resolution(const std::string& text, ConfigShape& shape) {
  const size_t x = text.find('x');
  auto number = [&](const std::string& s, int64_t& out) {
    auto r = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && out >= 1 && out <= kMaxPixels;
  };
  if (x == std::string::npos || !number(text.substr(0, x), shape.width) || !number(text.substr(x + 1), shape.height))
    throw InputError("--resolution: '" + text + "' is not WIDTHxHEIGHT in pixels (e.g. 1280x720)");
}

ModelLayer model_layer_from_config(const std::string& config_json, const std::string& where, const ConfigShape& shape) {
  json cfg;
  try {
    cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    throw InputError(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!cfg.is_object()) throw InputError(where + ": not a JSON object (a diffusers config.json is one)");
  auto cn = cfg.find("_class_name");
  if (cn == cfg.end() || !cn->is_string())
    throw InputError(where + ": no \"_class_name\" string: not a diffusers model config (classes read: " +
                     known_list() + ")");
  const std::string cls_name = remapped_class(cfg, cn->get<std::string>());
  const ConfigClass* cls = nullptr;
  for (const ConfigClass& c : kClasses)
    if (cls_name == c.name) cls = &c;
  if (!cls)
    throw InputError(where + ": unknown class \"" + cn->get<std::string>() + "\" (classes read: " + known_list() + ")");
  const Fields f(cfg, where, cls->name);

  ModelLayer m{};
  m.heads = static_cast<int>(f.positive("num_attention_heads"));
  m.head_dim = static_cast<int>(f.positive("attention_head_dim"));
  m.qk_norm = cls->norm_field ? norm_named(f, f.find(cls->norm_field), cls->norm_field, cls->norm_default)
                              : cls->fixed_norm;
  if (cls->rope_field) {
    const json* r = f.find(cls->rope_field);
    if (r && !r->is_boolean()) f.bad(std::string("'") + cls->rope_field + "' is " + r->dump() + ", not true or false");
    m.rope = r && r->get<bool>() ? RopeKind::k1D : RopeKind::kNone;
  } else {
    m.rope = cls->fixed_rope ? RopeKind::k1D : RopeKind::kNone;
  }
  m.fused_qkv = cls->fused_qkv;

  int64_t pt = 1, ph = 1, pw = 1;
  patch_of(f, cls->video, pt, ph, pw);
  const int64_t rows = axis_tokens("height", shape.height, ph, cls->pack, cls->name);
  const int64_t cols = axis_tokens("width", shape.width, pw, cls->pack, cls->name);
  int64_t latent_frames = 1, frames = 0;
  if (cls->video) {
    frames = shape.frames.value_or(cls->default_frames);
    const int64_t tc = cls->temporal_field ? f.positive_or(cls->temporal_field, kVaeTemporal) : kVaeTemporal;
    if (frames < 1 || frames > kMaxPixels || (frames - 1) % tc != 0)
      throw InputError("--frames: " + std::to_string(frames) + " is not 1 + a multiple of " + std::to_string(tc) +
                       " (the VAE's temporal compression for " + cls->name + "; e.g. " +
                       std::to_string(cls->default_frames) + ")");
    latent_frames = (frames - 1) / tc + 1;
    if (latent_frames % pt != 0)
      throw InputError("--frames: " + std::to_string(frames) + " frames are " + std::to_string(latent_frames) +
                       " latent frames, which do not divide by the temporal patch " + std::to_string(pt) + " of " +
                       cls->name);
    latent_frames /= pt;
  } else if (shape.frames) {
    throw InputError("--frames: " + std::string(cls->name) + " is an image model; --frames does not apply");
  }

  int64_t text = 0;
  if (cls->default_text < 0) {
    if (shape.text_tokens && *shape.text_tokens != 0)
      throw InputError("--text-tokens: " + std::string(cls->name) +
                       " attends the text by cross-attention, so the self-attention layer has no text tokens");
  } else {
    text = cls->text_field ? f.positive_or(cls->text_field, cls->default_text) : cls->default_text;
    if (shape.text_tokens) text = *shape.text_tokens;
    if (text < 0 || text > kMaxPixels)
      throw InputError("--text-tokens: " + std::to_string(text) + " is out of range (0.." + std::to_string(kMaxPixels) +
                       ")");
  }

  const int64_t media = latent_frames * rows * cols;
  const std::string res = std::to_string(shape.width) + "x" + std::to_string(shape.height);
  const std::string label = cls->video ? res + "-" + std::to_string(frames) + "f" : res;
  m.name = cls->short_name;
  m.resolutions = {{label, media + text}};
  std::ostringstream note;
  note << (cls->video ? std::to_string(frames) + " frames at " : std::string()) << res << ": ";
  if (cls->video) note << latent_frames << " x ";
  note << rows << " x " << cols << " = " << media << (cls->video ? " video" : " image") << " tokens";
  if (cls->default_text >= 0)
    note << " + " << text << " text tokens attended jointly" << (shape.text_tokens ? " (--text-tokens)" : " (the class's default)");
  else
    note << ", self-attention only (the text enters by cross-attention)";
  m.tokens_note = note.str();
  m.source = where + " (" + cls->name + ", read as " + cls->source + "): " + std::to_string(m.heads) + " heads x " +
             std::to_string(m.head_dim) + ", " + norm_words(m.qk_norm) + ", " +
             (m.fused_qkv ? "fused QKV" : "separate Q/K/V") + (m.rope == RopeKind::k1D ? ", RoPE" : ", no RoPE");
  return m;
}

ModelLayer model_layer_from_config_file(const std::string& path, const ConfigShape& shape) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": is a directory (give the config.json inside it, e.g. " + path + "/transformer/config.json)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the config");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the config");
  return model_layer_from_config(text.str(), path, shape);
}

}  // namespace uipc
