// The CPU-time estimate of simulation-mode cases (lib/run/cpu_estimate.hpp).
#include "lib/run/cpu_estimate.hpp"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/device/device.hpp"
#include "kernels/kernels.hpp"
#include "lib/deck/presets.hpp"

namespace uipc {
namespace {

// Cases expected to take longer than this print their estimate and their
// progress.
constexpr double kNoteSeconds = 60.0;
// and a progress line at most this often.
constexpr double kProgressSeconds = 20.0;
// A rank's host-kernel rate assumed before anything is measured: below what a
// core of any machine this runs on reaches, so a case it puts under a minute is
// under a minute.
constexpr double kPessimisticFlops = 0.5e9;

// The startup measurement (only for a case that may take minutes): shapes whose
// operands outgrow the caches as a full-size layer's do (a K of 3072, the keys of a
// 2048-token head: 1 MB as fp32), which the small shapes of the -sim decks do not;
// the rates of a probe that fits in cache were 2-6x those of a FLUX 1024 layer.
// About 3 GFLOP together: a second or two per rank.
constexpr int64_t kGemmM = 128, kGemmN = 1024, kGemmK = 3072;
constexpr int64_t kAttnSeq = 2048, kAttnHeads = 1, kAttnDim = 128;

double runs_of(const Case& c) {
  return static_cast<double>(c.transports.size()) * static_cast<double>(c.schedules.size()) *
         static_cast<double>(1 + c.ablations.size());
}

std::string minutes(double s) {
  char text[48];
  if (s < 10)
    std::snprintf(text, sizeof(text), "%.2g s", s);
  else if (s < 120)
    std::snprintf(text, sizeof(text), "%.0f s", s);
  else
    std::snprintf(text, sizeof(text), "%.1f min", s / 60.0);
  return text;
}

int cores_of_this_process() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

CaseFlops case_flops(const Case& c, int world) {
  CaseFlops f;
  const double tp = std::max(1, c.tp);
  const double U = std::max(1, c.ulysses > 0 ? c.ulysses : std::max(1, world) / std::max(1, c.tp));
  const double B = static_cast<double>(c.batch), S = static_cast<double>(c.seq_len);
  const double H = c.heads, D = c.head_dim, C = H * D, Ct = C / tp;
  const double tokens = B * std::ceil(S / U);             // this rank's rows
  const double heads = std::ceil(std::ceil(H / tp) / U);  // this rank's heads in attention
  f.layer_gemm = 2 * tokens * C * 3 * Ct + 2 * tokens * Ct * C;
  f.layer_attention = 4 * B * S * S * heads * D;
  f.reference_gemm = 8 * B * S * C * C;
  f.reference_attention = 4 * B * S * S * H * D;
  f.steps = std::max(1, c.steps);
  f.runs = static_cast<int64_t>(runs_of(c));
  f.layers = f.runs * std::max(1, c.repeats) * f.steps * (std::max(0, c.warmup) + std::max(1, c.iterations));
  return f;
}

HostRates measure_host_rates(Device& dev, LayerKernels& k, Stream& s) {
  using Clock = std::chrono::steady_clock;
  const DType t = DType::kBF16;
  auto bytes_of = [](int64_t elems, DType d) { return static_cast<size_t>(elems) * dtype_size(d); };
  DeviceBuffer a = dev.alloc(bytes_of(kGemmM * kGemmK, t)), w = dev.alloc(bytes_of(kGemmK * kGemmN, t)),
               o = dev.alloc(bytes_of(kGemmM * kGemmN, t));
  const int64_t n = kAttnSeq * kAttnHeads * kAttnDim;
  DeviceBuffer q = dev.alloc(bytes_of(n, t)), kk = dev.alloc(bytes_of(n, t)), v = dev.alloc(bytes_of(n, t)),
               y = dev.alloc(bytes_of(n, t));
  HostRates r;
  auto t0 = Clock::now();
  k.gemm(s, a.get(), kGemmK, w.get(), kGemmN, o.get(), kGemmN, kGemmM, kGemmN, kGemmK, t, t);
  s.synchronize();
  auto t1 = Clock::now();
  k.attention(s, q.get(), kk.get(), v.get(), y.get(), 1, kAttnSeq, kAttnHeads, kAttnDim, t, 0.1f);
  s.synchronize();
  auto t2 = Clock::now();
  const double gemm_s = std::max(1e-6, std::chrono::duration<double>(t1 - t0).count());
  const double attn_s = std::max(1e-6, std::chrono::duration<double>(t2 - t1).count());
  r.gemm = 2.0 * kGemmM * kGemmN * kGemmK / gemm_s;
  r.attention = 4.0 * kAttnSeq * kAttnSeq * kAttnHeads * kAttnDim / attn_s;
  return r;
}

CpuEstimate estimate_case_cpu(const CaseFlops& f, const HostRates& r, double share) {
  CpuEstimate e;
  const double gemm = std::max(r.gemm, 1.0), attn = std::max(r.attention, 1.0);
  // Measured beside the other ranks: alone (the reference) a rank runs `share`
  // faster.
  e.reference_s = f.steps * (f.reference_gemm / gemm + f.reference_attention / attn) / std::max(1.0, share);
  e.layer_s = f.layer_gemm / gemm + f.layer_attention / attn;
  e.total_s = e.reference_s + static_cast<double>(f.layers) * e.layer_s;
  e.minimum_s = e.reference_s + static_cast<double>(f.runs) * e.layer_s;
  return e;
}

double pessimistic_case_seconds(const Case& c, int world, double share) {
  const CaseFlops f = case_flops(c, world);
  const double rank_rate = kPessimisticFlops / std::max(1.0, share);
  return estimate_case_cpu(f, HostRates{rank_rate, rank_rate}, share).minimum_s;
}

std::string sim_alternatives(const Case& c) {
  std::string twin;
  for (const std::string& p : deck_preset_names()) {
    const std::string suffix = "-sim";
    if (p.size() <= suffix.size() || p.compare(p.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string family = p.substr(0, p.size() - suffix.size()) + "-";
    if (c.name.compare(0, family.size(), family) == 0 && c.name.compare(0, p.size(), p) != 0) twin = p;
  }
  std::string out =
      "run it with --mode model (the full-size protocol on the "
      "CPU, modelled timings, no parity)";
  if (!twin.empty())
    out +=
        ", or run its simulation-sized twin deck inputs/" + twin + ".h5 (ulysses-ipc deck new --preset " + twin + ")";
  else
    out +=
        ", or a simulation-sized deck ('ulysses-ipc deck presets' lists the "
        "-sim twins)";
  return out;
}

double ranks_per_core(int ranks_on_node) {
  return std::max(1.0, static_cast<double>(ranks_on_node) / cores_of_this_process());
}

std::vector<CpuEstimate> check_case_cpu_times(const std::vector<Case>& cases, int world, int ranks_on_node,
                                              double limit_s, const HostRates& r,
                                              const std::function<void(const std::string&)>& print) {
  std::vector<CpuEstimate> est(cases.size());
  const double share = ranks_per_core(ranks_on_node);
  char rate_text[160];
  std::snprintf(rate_text, sizeof(rate_text),
                "host kernels measured at startup: GEMM %.2f, attention %.2f GFLOP/s per rank, %d rank(s) per %d "
                "core(s)",
                r.gemm / 1e9, r.attention / 1e9, ranks_on_node, cores_of_this_process());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const CaseFlops f = case_flops(c, world);
    est[i] = estimate_case_cpu(f, r, share);
    const CpuEstimate& e = est[i];
    char text[512];
    std::snprintf(text, sizeof(text),
                  "case '%s' is estimated at %s of CPU time in simulation mode: the dense reference %s on rank 0, "
                  "then %lld layer(s) of %s each (%s)",
                  c.name.c_str(), minutes(e.total_s).c_str(), minutes(e.reference_s).c_str(),
                  static_cast<long long>(f.layers), minutes(e.layer_s).c_str(), rate_text);
    // Refused: a case whose layers are large for a CPU (its reference and one layer of
    // each run take over a minute) and whose whole run takes longer than the limit. Many
    // small layers (a long run to interrupt, a soak) are the deck's choice, not a size
    // the CPU cannot carry: they run, with their estimate and progress printed.
    if (e.total_s > limit_s && e.minimum_s > kNoteSeconds)
      throw InputError(std::string(text) + ", above the limit of " + minutes(limit_s) +
                       " (--sim-time-limit): " + sim_alternatives(c) + "; or raise --sim-time-limit");
    if (e.total_s > kNoteSeconds) print(std::string(text) + "\n");
  }
  return est;
}

std::vector<CpuEstimate> check_sim_cpu_time(const std::vector<Case>& cases, int world, int ranks_on_node,
                                            double limit_s, double watchdog_s, Device& dev, LayerKernels& k,
                                            const std::function<void(const std::string&)>& print) {
  const double share = ranks_per_core(ranks_on_node);
  bool any_long = false;
  for (const Case& c : cases) any_long = any_long || pessimistic_case_seconds(c, world, share) > kNoteSeconds;
  if (!any_long) return std::vector<CpuEstimate>(cases.size());  // alike on every rank: the deck is the same

  const auto t0 = std::chrono::steady_clock::now();
  HostRates mine = measure_host_rates(dev, k, *dev.create_stream(StreamPriority::kNormal));
  const double probe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Bounded, as every collective that a rank's death could leave waiting; the bound
  // allows for the ranks' probes ending apart (they share cores). The slowest rank's rates.
  const double rates[2] = {mine.gemm, mine.attention};
  std::vector<double> all(2 * static_cast<size_t>(world));
  allgather_bounded(MPI_COMM_WORLD, rates, sizeof(rates), all.data(), watchdog_s + 4 * probe_s,
                    "the host-kernel rates of the CPU-time estimate");
  double slowest[2] = {all[0], all[1]};
  for (size_t r = 1; r < static_cast<size_t>(world); ++r) {
    slowest[0] = std::min(slowest[0], all[2 * r]);
    slowest[1] = std::min(slowest[1], all[2 * r + 1]);
  }
  // Alike on every rank (the rates are the slowest rank's): a refusal is reported once.
  std::vector<CpuEstimate> est;
  collective_phase(MPI_COMM_WORLD, [&] {
    est = check_case_cpu_times(cases, world, ranks_on_node, limit_s, HostRates{slowest[0], slowest[1]}, print);
  });
  return est;
}

double sim_watchdog_for(double deck_watchdog_s, const CpuEstimate& e) {
  return std::max({deck_watchdog_s, 2.0 * e.layer_s, e.reference_s / 10.0});
}

CaseProgress::CaseProgress(const Case& c, const CpuEstimate& e, std::function<void(const std::string&)> print)
    : name_(c.name), est_(e), print_(std::move(print)), start_(std::chrono::steady_clock::now()) {
  const CaseFlops f = case_flops(c, 1);
  layers_ = f.layers;
  steps_ = f.steps;
  last_line_ = start_;
}

void CaseProgress::line(const std::string& what) {
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Silent for a short case: one estimated under a minute, or (many small layers, not
  // estimated up front) one that has not yet run for a minute.
  if (!print_ || (est_.total_s > 0 ? est_.total_s <= kNoteSeconds : spent < kNoteSeconds)) return;
  std::string about;
  if (est_.total_s > 0) {
    about = "estimate for the case: " + minutes(est_.total_s);
  } else if (layers_done_ > 0) {
    about = "about " + minutes(spent / layers_done_ * static_cast<double>(layers_ - layers_done_)) +
            " left at the rate so far";
  }
  char text[320];
  std::snprintf(text, sizeof(text), "  %s: %s after %s (%s)\n", name_.c_str(), what.c_str(), minutes(spent).c_str(),
                about.c_str());
  print_(text);
}

void CaseProgress::reference_done() {
  ++references_done_;
  line("dense reference " + std::to_string(references_done_) + "/" + std::to_string(steps_) + " done");
}

void CaseProgress::layer_done() {
  ++layers_done_;
  // A line every kProgressSeconds at most (and for the last layer): many short layers
  // must not flood the console.
  const auto now = std::chrono::steady_clock::now();
  if (layers_done_ < layers_ && now - last_line_ < std::chrono::duration<double>(kProgressSeconds)) return;
  last_line_ = now;
  line("layer " + std::to_string(layers_done_) + "/" + std::to_string(layers_) + " done");
}

}  // namespace uipc
