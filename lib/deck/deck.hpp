// The input deck: a versioned HDF5 file holding one or more cases (a DiT attention
// layer shape, a parallel layout, and the transports and schedules to compare).
// The schema is documented field by field in docs/deck.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/kernels.hpp"

namespace uipc {

constexpr int kDeckSchemaVersion = 1;

// Where a case's TP and Ulysses ranks sit (docs/math.md, "Shapes"): tp_outer, rank =
// tp_rank*ulysses + u_rank (a Ulysses group is consecutive ranks); tp_inner, rank =
// u_rank*tp + tp_rank (a TP group is consecutive ranks, so it stays inside a node while
// the Ulysses group strides across nodes).
enum class RankOrder : int { kTpOuter = 0, kTpInner = 1 };

struct Case {
  std::string name;
  std::string description;  // free text, e.g. where the shapes come from
  // shape
  int64_t batch = 1;
  int64_t seq_len = 256;     // global, tokens
  int heads = 8;
  int head_dim = 64;
  DType dtype = DType::kBF16;
  NormKind qk_norm = NormKind::kRmsPerHead;
  float norm_eps = 1e-6f;
  RopeKind rope = RopeKind::k1D;
  float rope_theta = 10000.0f;
  bool fused_qkv = true;
  // layout
  int ulysses = 0;  // 0: all ranks of the run (world / tp)
  int tp = 1;
  RankOrder rank_order = RankOrder::kTpOuter;
  // run
  std::vector<std::string> transports{"nccl", "ipc"};
  std::vector<std::string> schedules{"baseline", "v-first", "v-first-split"};
  // Ablations, each a run of its own beside every transport x schedule it applies to
  // (known_ablations()); empty: the full design only.
  std::vector<std::string> ablations;
  int warmup = 1;
  int iterations = 3;
  int repeats = 1;
  uint64_t seed = 1234;
  double tol_max_abs = 2e-2;
  double tol_rel_l2 = 1e-2;
  double watchdog_s = 60.0;
  // denoising steps (docs/math.md, "Steps"): the layer runs `steps` times on inputs that
  // evolve with mean step-to-step cosine similarity `step_similarity`; the first
  // `full_steps` run with full communication in the V-major transport (hier-vmajor), which
  // later skips sending V blocks whose relative change since last sent is under
  // `vmajor_threshold`, and is judged by its error against the exact result of the same
  // step (`vmajor_tol_rel_l2`), never as an exact parity pass.
  int steps = 1;
  double step_similarity = 0.98;
  int full_steps = 1;
  double vmajor_threshold = 0.1;
  double vmajor_tol_rel_l2 = 0.05;

  // ulysses and world for a run on `world_size` ranks (resolves ulysses = 0).
  int ulysses_for(int world_size) const { return ulysses > 0 ? ulysses : world_size / tp; }
  int64_t width() const { return static_cast<int64_t>(heads) * head_dim; }
};

struct Deck {
  int schema_version = kDeckSchemaVersion;
  std::string description;
  std::vector<Case> cases;
};

// Transport and schedule names the program knows (validation and --help): the
// transports from their table (comm/transport/transports.hpp), the ablations from theirs.
const std::vector<std::string>& known_transports();
const std::vector<std::string>& known_schedules();
const std::vector<std::string>& known_ablations();

// The one table of ablations: each switches one part of the design off, in a run of its
// own beside the full one. The switch itself lives in the code it switches
// (TransportOptions, PipelineOptions; lib/run/case_runner.cpp sets them by name).
struct AblationKind {
  const char* name;
  const char* what;        // for --help
  bool ipc_protocol_only;  // a part of the IPC protocol: runs of ipc and vmm only
  bool fused_only;         // needs strided views: fused QKV projections only
};
const std::vector<AblationKind>& ablation_table();
const AblationKind* find_ablation(const std::string& name);  // nullptr for none
const char* norm_kind_name(NormKind k);   // "none", "rms", "rms_across_heads", "layer"
const char* rope_kind_name(RopeKind k);   // "none", "1d"
const char* rank_order_name(RankOrder o); // "tp_outer", "tp_inner"
// Transports whose results are exact (bit-identical data movement); the others (the
// V-major hier-vmajor) are approximate by design.
bool transport_is_exact(const std::string& name);

// Checks every field of c for sanity, independent of the world size. Throws
// InputError("case 'NAME': FIELD: what is wrong").
void validate_case(const Case& c);
// Checks that c can run on `world` ranks. Throws InputError.
void validate_case_for_world(const Case& c, int world);

// Reads and validates a deck. Throws InputError naming the file and the field.
Deck read_deck(const std::string& path);
// The cases a report (`ulysses-ipc ... -o REPORT.h5`) ran, as a deck: every case field it
// stores, the field's default where an older report lacks it (listed in `defaulted` as
// "case: field"). Throws InputError naming the file and what is wrong (not a report, a
// case missing, a field out of range).
struct ReportCases {
  Deck deck;
  std::vector<std::string> defaulted;
};
ReportCases read_report_cases(const std::string& path);
// Writes a deck (to a temporary name, renamed at the end).
void write_deck(const Deck& deck, const std::string& path);
// A readable multi-line description (what `ulysses-ipc deck show` prints).
std::string format_deck(const Deck& deck);

}  // namespace uipc
