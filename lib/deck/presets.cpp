// The one table of presets. Each shipped deck is inputs/<preset>.h5, written from this
// table by inputs/make_decks.sh (through `ulysses-ipc deck new --preset`); change a preset
// here, then rerun that script.
#include "lib/deck/presets.hpp"
#include "lib/deck/model_layer.hpp"

#include <functional>

#include "base/error.hpp"
#include "base/text.hpp"

namespace uipc {

// --- real DiT attention layers, from the models' published configs
// One entry per model; each becomes a GPU-sized preset per resolution ("<model>-<res>")
// with one case per layout the heads allow, and one simulation-sized twin ("<model>-sim")
// with the same structure (head_dim, norm, projection, layouts) on few heads and tokens.
// The struct is lib/deck/model_layer.hpp's, shared with `deck from-config`.
const std::vector<ModelLayer>& model_layers() {
  static const std::vector<ModelLayer> table = {
      {"flux-dev", "black-forest-labs/FLUX.1-dev transformer config: 24 heads x 128 (3072), RMSNorm on Q/K per head, fused QKV, RoPE",
       24, 128, NormKind::kRmsPerHead, RopeKind::k1D, true, {{"1024", 4096 + 512}, {"2048", 16384 + 512}},
       "joint attention: (res/16)^2 image tokens + 512 T5 text tokens"},
      {"sd3-medium", "stabilityai/stable-diffusion-3-medium transformer config: 24 heads x 64 (1536), no QK norm, separate Q/K/V",
       24, 64, NormKind::kNone, RopeKind::kNone, false, {{"1024", 4429}},
       "joint attention: 4096 image tokens + 333 text tokens (77 CLIP + 256 T5) = 4429, unpadded: uneven shards where the Ulysses degree does not divide it"},
      {"pixart-alpha", "PixArt-alpha/PixArt-XL-2-1024-MS config: 16 heads x 72 (1152), no QK norm, separate Q/K/V",
       16, 72, NormKind::kNone, RopeKind::kNone, false, {{"1024", 4096}}, "self-attention over (1024/16)^2 = 4096 image tokens"},
      {"hunyuanvideo", "tencent/HunyuanVideo config: 24 heads x 128 (3072), RMSNorm on Q/K per head, fused QKV",
       24, 128, NormKind::kRmsPerHead, RopeKind::k1D, true, {{"720p", 118800 + 256}},
       "720p x 129 frames: 33 x 45 x 80 = 118800 video tokens + 256 text tokens"},
      {"wan2.1-14b", "Wan-AI/Wan2.1-T2V-14B config: 40 heads x 128 (5120), RMSNorm on Q/K across all heads, separate Q/K/V",
       40, 128, NormKind::kRmsAcrossHeads, RopeKind::k1D, false, {{"480p", 32760}, {"720p", 75600}},
       "81 frames: 21 x 30 x 52 = 32760 tokens at 480p, 21 x 45 x 80 = 75600 at 720p"},
      {"wan2.1-1.3b", "Wan-AI/Wan2.1-T2V-1.3B config: 12 heads x 128 (1536), RMSNorm on Q/K across all heads, separate Q/K/V",
       12, 128, NormKind::kRmsAcrossHeads, RopeKind::k1D, false, {{"480p", 32760}}, "81 frames at 480p: 21 x 30 x 52 = 32760 tokens"},
      {"cogvideox-5b", "THUDM/CogVideoX-5b config: 48 heads x 64 (3072), LayerNorm on Q/K per head, separate Q/K/V",
       48, 64, NormKind::kLayerPerHead, RopeKind::k1D, false, {{"720x480", 17550 + 226}},
       "49 frames at 720x480: 13 x 30 x 45 = 17550 video tokens + 226 text tokens"},
  };
  return table;
}

const std::vector<LayoutChoice>& preset_layouts() {
  static const std::vector<LayoutChoice> layouts = {{"u2", 2, 1}, {"u4", 4, 1}, {"u8", 8, 1}, {"tp2u2", 2, 2}};
  return layouts;
}

// The cases of one model at one token count: a case per layout that fits, and a note
// naming the layouts left out and why.
std::vector<Case> model_cases(const ModelLayer& m, const std::string& label, int64_t tokens, int heads,
                              bool gpu_sized, std::string* left_out, const std::vector<LayoutChoice>& layouts) {
  std::vector<Case> out;
  for (const LayoutChoice& lc : layouts) {
    std::string why;
    // Shards and head slices may be uneven (balanced); TP needs whole heads per rank.
    if (heads % lc.tp != 0)
      why = std::to_string(heads) + " heads do not divide by tp = " + std::to_string(lc.tp);
    else if (heads / lc.tp < lc.ulysses)
      why = std::to_string(heads / lc.tp) + " heads per TP rank are fewer than " + std::to_string(lc.ulysses) + " ranks";
    else if (m.qk_norm == NormKind::kRmsAcrossHeads && lc.tp > 1)
      why = "RMS norm across heads needs every head of a token on one rank (tp = 1)";
    if (!why.empty()) {
      if (left_out) *left_out += std::string(*left_out->c_str() ? "; " : "") + lc.tag + ": " + why;
      continue;
    }
    Case c;
    c.name = std::string(m.name) + "-" + label + "." + lc.tag;
    c.batch = 1;
    c.seq_len = tokens;
    c.heads = heads;
    c.head_dim = m.head_dim;
    c.dtype = DType::kBF16;
    c.qk_norm = m.qk_norm;
    c.rope = m.rope;
    c.fused_qkv = m.fused_qkv;
    c.ulysses = lc.ulysses;
    c.tp = lc.tp;
    c.transports = {"nccl", "ipc"};
    // v-first needs the fused projection, v-first-split the separate ones: each model
    // gets the V-first order its own projection allows, against the baseline.
    c.schedules = {"baseline", m.fused_qkv ? "v-first" : "v-first-split"};
    c.warmup = gpu_sized ? 5 : 1;
    c.iterations = gpu_sized ? 20 : 2;
    c.repeats = gpu_sized ? 3 : 1;
    c.description = std::string(m.name) + " " + label + ", " + lc.tag + ": B1 S" + std::to_string(tokens) + " H" +
                    std::to_string(heads) + " D" + std::to_string(m.head_dim) + " bf16" +
                    (gpu_sized ? "" : " (simulation twin: the model's head_dim, norm, projection and layouts on few heads and tokens)");
    out.push_back(c);
  }
  return out;
}

namespace {

std::vector<Preset> model_presets() {
  std::vector<Preset> v;
  for (const ModelLayer& m : model_layers()) {
    for (const auto& res : m.resolutions) {
      std::string left;
      model_cases(m, res.first, res.second, m.heads, true, &left);
      v.push_back({"", "", nullptr});
      v.back().name = std::string(m.name) + "-" + res.first;
      v.back().description = std::string(m.name) + " attention layer at " + res.first + " (GPU runs). " +
                                   m.tokens_note + ". Source: " + m.source +
                                   (m.rope == RopeKind::kNone ? std::string(". No RoPE (the model has none).")
                                                              : std::string(". 1-D RoPE over the token index stands in for the model's own multi-axis RoPE (same cost).")) +
                                   (left.empty() ? "" : " Layouts left out: " + left + ".");
      const ModelLayer* mp = &m;
      const std::string label = res.first;
      const int64_t tokens = res.second;
      v.back().cases = [mp, label, tokens] { return model_cases(*mp, label, tokens, mp->heads, true, nullptr); };
    }
    // The simulation twin: 8 heads (or the model's count if smaller) keep every layout
    // the model allows, 128 tokens plus the model's remainder modulo 8 keep its uneven
    // shards (SD3's 4429 tokens: 133); 16 tokens per Ulysses-8 shard are plenty for a CPU.
    std::string left;
    const int twin_heads = m.heads % 8 == 0 ? 8 : 12 % m.heads == 0 ? m.heads : 4;
    const int64_t twin_tokens = 128 + m.resolutions.front().second % 8;
    model_cases(m, "sim", twin_tokens, twin_heads, false, &left);
    v.push_back({"", "", nullptr});
    v.back().name = std::string(m.name) + "-sim";
    v.back().description = std::string("Simulation-sized twin of ") + m.name + ": " + std::to_string(twin_heads) +
                                 " heads x " + std::to_string(m.head_dim) + ", " + std::to_string(twin_tokens) +
                                 " tokens, same norm, projection and layouts. Source: " +
                                 m.source + "." + (left.empty() ? "" : " Layouts left out: " + left + ".");
    const ModelLayer* mp = &m;
    v.back().cases = [mp, twin_heads, twin_tokens] {
      return model_cases(*mp, "sim", twin_tokens, twin_heads, false, nullptr);
    };
  }
  return v;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = [] {
  std::vector<Preset> t = {
      {"default",
       "Shipped default: two small layers that 4 MPI ranks on 2 CPU cores run in seconds in simulation "
       "mode; ulysses = 0, so it runs at 1, 2 and 4 ranks.",
       [] {
         Case a;
         a.name = "small-bf16";
         a.description = "small fused-QKV bf16 layer, RMS QK norm per head, 1-D RoPE";
         a.batch = 1;
         a.seq_len = 256;
         a.heads = 8;
         a.head_dim = 64;
         a.dtype = DType::kBF16;
         a.qk_norm = NormKind::kRmsPerHead;
         a.rope = RopeKind::k1D;
         a.fused_qkv = true;
         a.ulysses = 0;
         a.tp = 1;
         a.transports = {"nccl", "ipc"};
         a.schedules = {"baseline", "v-first", "v-first-split"};
         a.warmup = 1;
         a.iterations = 3;
         a.repeats = 1;

         Case b = a;
         b.name = "small-fp16-layernorm";
         b.description = "small fp16 layer with separate Q/K/V projections and LayerNorm QK norm per head";
         b.batch = 2;
         b.seq_len = 128;
         b.heads = 8;
         b.head_dim = 32;
         b.dtype = DType::kFP16;
         b.qk_norm = NormKind::kLayerPerHead;
         b.fused_qkv = false;
         b.schedules = {"baseline", "v-first-split"};
         return std::vector<Case>{a, b};
       }},
      {"protocol",
       "The IPC protocol's acceptance deck (simulation-sized): Ulysses2, Ulysses4 and TP2+Ulysses2, each "
       "comparing nccl, ipc and vmm under all four schedules, in bf16, fp16 and fp32. At 2 ranks the Ulysses2 "
       "case runs; at 4 ranks the Ulysses4 and TP2+Ulysses2 cases.",
       [] {
         Case a;
         a.batch = 1;
         a.seq_len = 128;
         a.heads = 8;
         a.head_dim = 32;
         a.qk_norm = NormKind::kRmsPerHead;
         a.rope = RopeKind::k1D;
         a.fused_qkv = true;
         a.transports = {"nccl", "ipc", "vmm"};
         a.schedules = {"baseline", "v-first", "v-project-first", "v-first-split"};
         a.warmup = 1;
         a.iterations = 2;
         a.repeats = 1;
         Case u2 = a, u2f = a, u4 = a, tp = a;
         u2.name = "u2-bf16";
         u2.description = "Ulysses2, bf16, fused QKV, RMS norm per head";
         u2.dtype = DType::kBF16;
         u2.ulysses = 2;
         u2f.name = "u2-fp32";
         u2f.description = "Ulysses2, fp32, separate projections in the baseline, no norm";
         u2f.dtype = DType::kFP32;
         u2f.ulysses = 2;
         u2f.fused_qkv = false;
         u2f.qk_norm = NormKind::kNone;
         u4.name = "u4-fp16";
         u4.description = "Ulysses4, fp16, batch 2, LayerNorm per head";
         u4.dtype = DType::kFP16;
         u4.ulysses = 4;
         u4.batch = 2;
         u4.qk_norm = NormKind::kLayerPerHead;
         tp.name = "tp2-u2-bf16";
         tp.description = "TP2 x Ulysses2, bf16: the output projection's partial sums all-reduced across TP";
         tp.dtype = DType::kBF16;
         tp.ulysses = 2;
         tp.tp = 2;
         return std::vector<Case>{u2, u2f, u4, tp};
       }},
  };
  for (Preset& p : model_presets()) t.push_back(std::move(p));
  return t;
  }();
  return table;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return &p;
  return nullptr;
}

std::vector<std::string> deck_preset_names() {
  std::vector<std::string> v;
  for (const Preset& p : presets()) v.push_back(p.name);
  return v;
}

Deck deck_preset(const std::string& name) {
  const Preset* p = find_preset(name);
  if (!p) throw InputError("unknown preset '" + name + "' (presets: " + join(deck_preset_names()) + ")");
  Deck d;
  d.description = p->description;
  d.cases = p->cases();
  return d;
}

}  // namespace uipc
