// `ulysses-ipc deck new|show|presets|help` (on CLI11, lib/cli.hpp), and the preset
// table from which inputs/make_decks.sh regenerates every shipped deck.
#include "app/deck_cli.hpp"
#include "lib/deck/deck_wire.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "base/error.hpp"
#include "base/text.hpp"
#include "app/cli.hpp"

namespace uipc {

namespace {

// ------------------------------------------------------------------ presets
// The one table of presets. Each shipped deck is inputs/<preset>.h5, written from this
// table by inputs/make_decks.sh; change a preset here, then rerun that script.

struct Preset {
  std::string name;
  std::string description;  // becomes the deck's description
  std::function<std::vector<Case>()> cases;
};

// --- real DiT attention layers, from the models' published configs
// One entry per model; each becomes a GPU-sized preset per resolution ("<model>-<res>")
// with one case per layout the heads allow, and one simulation-sized twin ("<model>-sim")
// with the same structure (head_dim, norm, projection, layouts) on few heads and tokens.
struct ModelLayer {
  const char* name;
  const char* source;       // where the shapes come from
  int heads, head_dim;
  NormKind qk_norm;
  RopeKind rope;            // 1-D RoPE stands in for the model's own (same cost); none where it has none
  bool fused_qkv;           // the model's own projection
  std::vector<std::pair<const char*, int64_t>> resolutions;  // label, tokens
  const char* tokens_note;  // how the token counts arise
};

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

struct LayoutChoice {
  const char* tag;
  int ulysses, tp;
};
const LayoutChoice kLayouts[] = {{"u2", 2, 1}, {"u4", 4, 1}, {"u8", 8, 1}, {"tp2u2", 2, 2}};

// The cases of one model at one token count: a case per layout that fits, and a note
// naming the layouts left out and why.
std::vector<Case> model_cases(const ModelLayer& m, const std::string& label, int64_t tokens, int heads,
                              bool gpu_sized, std::string* left_out) {
  std::vector<Case> out;
  for (const LayoutChoice& lc : kLayouts) {
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

// ------------------------------------------------------------------ the command line
// `deck new|show|presets|help` on CLI11: each option declared once below, with its
// help and its check; a field option's check parses the value as the field would.

// A value the field cannot take; the message says why, CLI11 prefixes the option.
struct BadValue : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The whole of v as an integer of type T; `kind` names what T accepts in the message.
template <typename T>
T parse_integer(const std::string& v, const char* kind) {
  T x = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
    throw BadValue("'" + v + "' is not " + kind);
  return x;
}

int64_t parse_i64(const std::string& v) { return parse_integer<int64_t>(v, "an integer"); }

int parse_int(const std::string& v) {
  int64_t x = parse_i64(v);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    throw BadValue(v + " is out of range");
  return static_cast<int>(x);
}

uint64_t parse_u64(const std::string& v) { return parse_integer<uint64_t>(v, "a non-negative integer"); }

double parse_f64(const std::string& v) {
  char* end = nullptr;
  double x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))
    throw BadValue("'" + v + "' is not a finite number");
  return x;
}

std::vector<std::string> parse_list(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    std::string item = v.substr(start, end - start);
    if (item.empty()) throw BadValue("empty name in '" + v + "' (use a,b,c)");
    out.push_back(item);
    start = end + 1;
  }
  return out;
}

template <class E>
E parse_named(const std::string& v, int count, const char* (*name_of)(E)) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    names.push_back(name_of(static_cast<E>(i)));
    if (v == names.back()) return static_cast<E>(i);
  }
  throw BadValue("unknown value '" + v + "' (allowed: " + join(names) + ")");
}

// An option of `deck new` that sets one case field. Whether the value is allowed (a
// range, a known transport) is the deck validation's to say, when the deck is written.
struct FieldOption {
  const char* flag;
  const char* arg;
  std::string help;
  void (*apply)(Case& c, const std::string& v);  // throws BadValue
};

const std::vector<FieldOption>& field_options() {
  static const std::vector<FieldOption> opts = {
      {"--description", "TEXT", "free text about the case", [](Case& c, const std::string& v) { c.description = v; }},
      {"--batch", "B", "batch size (1..1024)", [](Case& c, const std::string& v) { c.batch = parse_i64(v); }},
      {"--seq-len", "S", "global sequence length, tokens (1..4194304)",
       [](Case& c, const std::string& v) { c.seq_len = parse_i64(v); }},
      {"--heads", "H", "attention heads (1..1024)", [](Case& c, const std::string& v) { c.heads = parse_int(v); }},
      {"--head-dim", "D", "channels per head (1..512, even with RoPE)",
       [](Case& c, const std::string& v) { c.head_dim = parse_int(v); }},
      {"--dtype", "T", "bf16, fp16 or fp32",
       [](Case& c, const std::string& v) { c.dtype = parse_named<DType>(v, 3, dtype_name); }},
      {"--qk-norm", "K", "none, rms, rms_across_heads or layer",
       [](Case& c, const std::string& v) { c.qk_norm = parse_named<NormKind>(v, 4, norm_kind_name); }},
      {"--norm-eps", "X", "epsilon of the Q/K norm (0 < X < 1)",
       [](Case& c, const std::string& v) { c.norm_eps = static_cast<float>(parse_f64(v)); }},
      {"--rope", "R", "none or 1d",
       [](Case& c, const std::string& v) { c.rope = parse_named<RopeKind>(v, 2, rope_kind_name); }},
      {"--rope-theta", "X", "RoPE base (> 0)",
       [](Case& c, const std::string& v) { c.rope_theta = static_cast<float>(parse_f64(v)); }},
      {"--fused-qkv", "0|1", "one fused QKV projection (1) or three (0)",
       [](Case& c, const std::string& v) {
         if (v != "0" && v != "1") throw BadValue("'" + v + "' (allowed: 0, 1)");
         c.fused_qkv = v == "1";
       }},
      {"--ulysses", "U", "Ulysses degree, 0 = all ranks / tp (0..64)",
       [](Case& c, const std::string& v) { c.ulysses = parse_int(v); }},
      {"--tp", "T", "tensor-parallel degree (1, 2, 4, 8)", [](Case& c, const std::string& v) { c.tp = parse_int(v); }},
      {"--rank-order", "O", "tp_outer (Ulysses groups are consecutive ranks) or tp_inner (TP groups are)",
       [](Case& c, const std::string& v) { c.rank_order = parse_named<RankOrder>(v, 2, rank_order_name); }},
      {"--transports", "a,b", "scatter transports to compare (nccl, nccl-ce, ipc, vmm, hier, hier-vmajor)",
       [](Case& c, const std::string& v) { c.transports = parse_list(v); }},
      {"--schedules", "a,b", "schedules to compare (baseline, v-first, v-project-first, v-first-split)",
       [](Case& c, const std::string& v) { c.schedules = parse_list(v); }},
      {"--ablations", "a,b", "ablation runs beside the full design (" + join(known_ablations()) + "; 'none' for none)",
       [](Case& c, const std::string& v) { c.ablations = v == "none" ? std::vector<std::string>{} : parse_list(v); }},
      {"--warmup", "W", "untimed layers before timing (0..10000)",
       [](Case& c, const std::string& v) { c.warmup = parse_int(v); }},
      {"--iterations", "I", "timed layers per repeat (1..100000)",
       [](Case& c, const std::string& v) { c.iterations = parse_int(v); }},
      {"--repeats", "R", "repeats of warmup + iterations (1..1000)",
       [](Case& c, const std::string& v) { c.repeats = parse_int(v); }},
      {"--seed", "S", "seed of inputs and weights (0..2^64-1)",
       [](Case& c, const std::string& v) { c.seed = parse_u64(v); }},
      {"--tol-max-abs", "X", "parity tolerance, max |y - y_ref| (> 0)",
       [](Case& c, const std::string& v) { c.tol_max_abs = parse_f64(v); }},
      {"--tol-rel-l2", "X", "parity tolerance, ||y - y_ref|| / ||y_ref|| (> 0)",
       [](Case& c, const std::string& v) { c.tol_rel_l2 = parse_f64(v); }},
      {"--watchdog", "S", "seconds a peer may be late before the run fails (0 < S <= 86400)",
       [](Case& c, const std::string& v) { c.watchdog_s = parse_f64(v); }},
      {"--steps", "N", "denoising steps; each runs warmup + iterations layers (1..1000)",
       [](Case& c, const std::string& v) { c.steps = parse_int(v); }},
      {"--step-similarity", "X", "mean cosine similarity of consecutive steps' inputs (0.5..1)",
       [](Case& c, const std::string& v) { c.step_similarity = parse_f64(v); }},
      {"--full-steps", "N", "first steps with full communication in hier-vmajor (0..steps)",
       [](Case& c, const std::string& v) { c.full_steps = parse_int(v); }},
      {"--vmajor-threshold", "X", "hier-vmajor skips a V block whose relative change since last sent is below X",
       [](Case& c, const std::string& v) { c.vmajor_threshold = parse_f64(v); }},
      {"--vmajor-tol-rel-l2", "X", "hier-vmajor's own tolerance: rel. L2 error vs the exact result of each step",
       [](Case& c, const std::string& v) { c.vmajor_tol_rel_l2 = parse_f64(v); }},
  };
  return opts;
}

// What the command line asked for, filled in by CLI11.
struct Request {
  std::string preset, name, output, show_path;
  bool names_only = false;
  std::vector<std::string> field_values = std::vector<std::string>(field_options().size());
};

// The deck tool's command line: every subcommand and option, in one place.
void declare(CLI::App& app, Request& rq) {
  app.require_subcommand(1);
  app.footer("Decks are documented field by field in docs/deck.md. Options take '--opt V' or '--opt=V'.");

  CLI::App* nw = app.add_subcommand("new", "Write a deck from a preset or the built-in defaults.");
  nw->footer(
      "Without --preset: one case from the built-in defaults, named by --name ('custom' if not given).\n"
      "With --preset: every case of the preset, or with --name only its case of that name. Field options\n"
      "override that field in every case written; the values are checked when the deck is written.");
  nw->add_option("--preset", rq.preset, "start from a preset (see 'deck presets')")
      ->type_name("NAME")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return find_preset(v) ? "" : "unknown preset '" + v + "' (presets: " + join(deck_preset_names()) + ")";
          },
          ""));
  nw->add_option("--name", rq.name, "case name (letters, digits, _ - . +)")->type_name("N");
  for (size_t i = 0; i < field_options().size(); ++i) {
    const FieldOption& f = field_options()[i];
    nw->add_option(f.flag, rq.field_values[i], f.help)
        ->type_name(f.arg)
        ->check(CLI::Validator(
            [&f](std::string& v) -> std::string {
              Case scratch;
              try {
                f.apply(scratch, v);
              } catch (const BadValue& e) {
                return e.what();
              }
              return "";
            },
            ""));
  }
  nw->add_option("-o,--output", rq.output, "the deck to write")->type_name("FILE")->required();

  CLI::App* show = app.add_subcommand("show", "Print a deck readably (every field of every case).");
  show->add_option("FILE", rq.show_path, "the deck")->required();

  CLI::App* pr = app.add_subcommand("presets", "List the presets every shipped deck is generated from.");
  pr->add_flag("--names", rq.names_only, "names only, one a line");

  app.add_subcommand("help", "Every subcommand with its options.");
}

int cmd_new(const CLI::App& app, const Request& rq, std::ostream& out) {
  Deck deck;
  const bool have_name = app.get_subcommand("new")->count("--name") > 0;
  if (rq.preset.empty()) {
    Case c;
    c.name = have_name ? rq.name : "custom";
    deck.description = "made by ulysses-ipc deck new";
    deck.cases.push_back(c);
  } else {
    const Preset* p = find_preset(rq.preset);  // known: the option's check said so
    deck.description = p->description;
    std::vector<Case> cases = p->cases();
    if (have_name) {
      std::vector<std::string> names;
      for (const Case& c : cases) {
        names.push_back(c.name);
        if (c.name == rq.name) deck.cases.push_back(c);
      }
      if (deck.cases.empty())
        throw InputError(cli::usage_message(app, "new", "--name: preset '" + rq.preset + "' has no case '" + rq.name +
                                                            "' (cases: " + join(names) + ")"));
    } else {
      deck.cases = cases;
    }
  }
  const CLI::App* nw = app.get_subcommand("new");
  for (Case& c : deck.cases)
    for (size_t i = 0; i < field_options().size(); ++i)
      if (nw->count(field_options()[i].flag) > 0) field_options()[i].apply(c, rq.field_values[i]);
  write_deck(deck, rq.output);  // validates every case first: bad values name the field
  out << "wrote " << rq.output << " (" << deck.cases.size() << (deck.cases.size() == 1 ? " case)" : " cases)") << "\n";
  return 0;
}

int cmd_presets(const Request& rq, std::ostream& out) {
  for (const Preset& p : presets()) {
    if (rq.names_only) {
      out << p.name << "\n";
      continue;
    }
    std::vector<std::string> names;
    for (const Case& c : p.cases()) names.push_back(c.name);
    out << p.name << " (" << names.size() << (names.size() == 1 ? " case: " : " cases: ") << join(names) << ")\n  "
        << p.description << "\n";
  }
  return 0;
}

}  // namespace

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

int deck_command(int argc, char** argv, std::ostream& out) {
  CLI::App app{"Writes, prints and lists input decks (serial: no mpirun).", "ulysses-ipc deck"};
  Request rq;
  declare(app, rq);
  const std::string text = cli::parse(app, std::vector<std::string>(argv, argv + argc));
  if (!text.empty()) {
    out << text;
    return 0;
  }
  if (app.got_subcommand("new")) return cmd_new(app, rq, out);
  if (app.got_subcommand("show")) {
    out << format_deck(read_deck_isolated(rq.show_path));
    return 0;
  }
  if (app.got_subcommand("presets")) return cmd_presets(rq, out);
  out << cli::help_all(app);  // help
  return 0;
}

int deck_command(int argc, char** argv) { return deck_command(argc, argv, std::cout); }

}  // namespace uipc
