// `ulysses-ipc deck new|from-config|from-report|show|presets|help` (on CLI11, app/cli.hpp); the presets it
// writes are lib/deck/presets.cpp's.
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
#include "lib/deck/deck_from_config.hpp"
#include "lib/deck/model_layer.hpp"

namespace uipc {

namespace {

// ------------------------------------------------------------------ the command line
// `deck new|from-config|from-report|show|presets|help` on CLI11: each option declared once below, with its
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
  std::string config_path, resolution;  // deck from-config
  std::string report_path;              // deck from-report
  int64_t frames = 0, text_tokens = 0;
};
// The shape fields `deck from-config` takes from the config, not from options.
bool is_shape_option(const FieldOption& f) {
  for (const char* flag : {"--seq-len", "--heads", "--head-dim", "--qk-norm", "--rope", "--fused-qkv"})
    if (std::string(flag) == f.flag) return true;
  return false;
}

// The field options of field_options() on subcommand `sub` (all, or all but the shape).
void add_field_options(CLI::App* sub, Request& rq, bool with_shape) {
  for (size_t i = 0; i < field_options().size(); ++i) {
    const FieldOption& f = field_options()[i];
    if (!with_shape && is_shape_option(f)) continue;
    sub->add_option(f.flag, rq.field_values[i], f.help)
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
}

// `deck from-config`: the layer a diffusers config.json describes (lib/deck/deck_from_config.*)
// through the presets' case path (model_cases); the field options as in `deck new`, less
// the shape the config gives.
void declare_from_config(CLI::App& app, Request& rq) {
  CLI::App* fc = app.add_subcommand("from-config", "Write a deck from a diffusers transformer config.json.");
  fc->footer(
      "Reads " + join(config_classes()) + ".\n"
      "Without --ulysses/--tp: a case per layout the heads allow (u2, u4, u8, tp2u2), as the presets;\n"
      "with either: one case of that layout. docs/deck.md, \"Decks from a diffusers config\", says what is read.");
  fc->add_option("CONFIG", rq.config_path, "the model's config.json (e.g. transformer/config.json)")->required();
  fc->add_option("--resolution", rq.resolution, "WIDTHxHEIGHT in pixels")->type_name("WxH")->required();
  fc->add_option("--frames", rq.frames, "video frames (video classes; default: the pipeline's)")->type_name("N");
  fc->add_option("--text-tokens", rq.text_tokens, "text tokens attended jointly (default: the class's)")
      ->type_name("N");
  add_field_options(fc, rq, false);
  fc->add_option("-o,--output", rq.output, "the deck to write")->type_name("FILE")->required();
}


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
  add_field_options(nw, rq, true);
  nw->add_option("-o,--output", rq.output, "the deck to write")->type_name("FILE")->required();

  declare_from_config(app, rq);

  CLI::App* fr = app.add_subcommand("from-report", "Write a deck of the cases a report ran.");
  fr->footer(
      "Every case field the report stores (shape, layout, transports, schedules, ablations, layers,\n"
      "seed, tolerances); fields an older report lacks take their defaults and are listed. Field\n"
      "options override that field in every case (e.g. --iterations, or --transports to rerun one).");
  fr->add_option("REPORT", rq.report_path, "a report written by ulysses-ipc (-o REPORT.h5)")->required();
  add_field_options(fr, rq, true);
  fr->add_option("-o,--output", rq.output, "the deck to write")->type_name("FILE")->required();

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

int cmd_from_config(const CLI::App& app, const Request& rq, std::ostream& out) {
  const CLI::App* fc = app.get_subcommand("from-config");
  ConfigShape shape;
  parse_resolution(rq.resolution, shape);
  if (fc->count("--frames")) shape.frames = rq.frames;
  if (fc->count("--text-tokens")) shape.text_tokens = rq.text_tokens;
  const ModelLayer m = model_layer_from_config_file(rq.config_path, shape);
  const auto& [label, tokens] = m.resolutions.front();
  std::vector<LayoutChoice> layouts = preset_layouts();
  auto value_of = [&](const char* flag) {
    for (size_t i = 0; i < field_options().size(); ++i)
      if (std::string(flag) == field_options()[i].flag) return rq.field_values[i];
    return std::string();
  };
  if (fc->count("--ulysses") || fc->count("--tp")) {
    const int u = fc->count("--ulysses") ? parse_int(value_of("--ulysses")) : 0;
    const int t = fc->count("--tp") ? parse_int(value_of("--tp")) : 1;
    layouts = {{(t > 1 ? "tp" + std::to_string(t) : std::string()) + "u" + (u ? std::to_string(u) : "world"), u, t}};
  }
  std::string left;
  Deck deck;
  deck.cases = model_cases(m, label, tokens, m.heads, true, &left, layouts);
  if (deck.cases.empty()) throw InputError("from-config: " + left);
  deck.description = m.name + " attention layer at " + label + ", from " + m.source + ". " + m.tokens_note + "." +
                     (left.empty() ? "" : " Layouts left out: " + left + ".");
  for (Case& c : deck.cases)
    for (size_t i = 0; i < field_options().size(); ++i)
      if (!is_shape_option(field_options()[i]) && fc->count(field_options()[i].flag) > 0)
        field_options()[i].apply(c, rq.field_values[i]);
  write_deck(deck, rq.output);  // validates every case first: bad values name the field
  out << "wrote " << rq.output << " (" << deck.cases.size() << (deck.cases.size() == 1 ? " case" : " cases")
      << ", " << tokens << " tokens: " << m.tokens_note << ")\n";
  return 0;
}

// `deck from-report`: what a report ran, to run it again or model it (`--mode model`).
int cmd_from_report(const CLI::App& app, const Request& rq, std::ostream& out) {
  const CLI::App* fr = app.get_subcommand("from-report");
  ReportCases rc = read_report_cases(rq.report_path);
  for (Case& c : rc.deck.cases)
    for (size_t i = 0; i < field_options().size(); ++i)
      if (fr->count(field_options()[i].flag) > 0) field_options()[i].apply(c, rq.field_values[i]);
  write_deck(rc.deck, rq.output);  // validates every case first: bad values name the field
  out << "wrote " << rq.output << " (" << rc.deck.cases.size() << (rc.deck.cases.size() == 1 ? " case" : " cases")
      << " of " << rq.report_path << ")\n";
  if (!rc.defaulted.empty())
    out << "not in the report, so the default: " << join(rc.defaulted) << "\n";
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
  if (app.got_subcommand("from-config")) return cmd_from_config(app, rq, out);
  if (app.got_subcommand("from-report")) return cmd_from_report(app, rq, out);
  out << cli::help_all(app);  // help
  return 0;
}

int deck_command(int argc, char** argv) { return deck_command(argc, argv, std::cout); }

}  // namespace uipc
