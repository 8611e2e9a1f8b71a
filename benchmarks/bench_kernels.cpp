// The GPU check's benchmark: times the layer's kernels and copies on one GPU against the
// bounds they chase, all measured in the same run, prints one table and (with -o FILE)
// writes it to HDF5. Sections:
//  - bounds: a large device-to-device copy (the HBM bound, bytes read + written);
//  - attention: cuDNN SDPA and the reference kernel (FLOP/s);
//  - norm+RoPE: every norm kind, head_dim 64/72/128, bf16/fp16/fp32, fused and separate
//    views, the vector kernel against the copy bound (and the general kernel beside it);
//  - GEMM: the QKV projection, whole and split by columns as the own-slice schedules split it;
//  - GEMM by shape (gemm_shapes): every (K, N) of the shipped decks' layers, M 256..131072
//    (the machine model's GEMM profile);
//  - attention by shape (attention_shapes): cuDNN SDPA at every shipped layer's attention
//    at Ulysses 1-8, sequences to 119k (the machine model's attention profile);
//  - copies: the strided V view;
//  - what runs where: each copy kind the transports use, beside a kernel that holds every
//    SM; a copy that finishes while the kernel runs is on a copy engine, one that waits
//    for it needs SMs;
//  - allocation: a transport target's allocation and free (vmm, ipc) at 2-128 MiB, idle
//    and beside a running kernel (does the call wait for the device?); a vmm target's
//    export + import + map and close, and a first copy into a fresh mapping;
//  - latency floor: the parts of a scatter's fixed cost (event hop between streams,
//    stream-memory-op round trip, a small copy, and the host's cost to enqueue each), and
//    what a graph's nodes cost (a kernel, an event record, a hop between streams), and the
//    latency floor deck's own ops (GEMMs, norm+RoPE, attention, conversion, copy, and the
//    scatter's at one rank: NCCL's all-to-all, a stream write and wait) as graph nodes, op by
//    op, and in host enqueue;
//  - with two GPUs or more, the peer link in the Ulysses2 scatter's shape;
//  - nccl: with two GPUs or more, NCCL's all-to-all on 2..N of them, 1 KB .. 1 GB
//    (benchmarks/bench_nccl.cpp, like nccl-tests' alltoall_perf).
// The HDF5 output names the code it measured (attribute `revision`, git describe).
// Every wait is bounded (the device layer's watchdog; probe kernels end on the GPU clock).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include <unistd.h>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "benchmarks/bench_nccl.hpp"
#include "benchmarks/bench_probe.hpp"
#include "comm/device/cuda_device.hpp"
#include "kernels/cuda_internal.hpp"
#include "kernels/cuda_kernels.hpp"
#include "git_rev.h"
#include "lib/deck/model_layer.hpp"
#include "lib/hdf5/hdf5_file.hpp"
#include "lib/report/model_bench.hpp"
#include "lib/report/node_sequences.hpp"

namespace {

using namespace uipc;

struct Row {
  std::string section, what, shape;
  double ms;
  double rate;
  std::string unit;
  double of_bound;  // fraction of the bound it chases (NaN: none)
  std::string note;
};

constexpr double kNoBound = std::numeric_limits<double>::quiet_NaN();

// `warmup` untimed runs, then the median of `reps` timings of `iters` runs each, between
// two events on the stream.
double time_ms(Device& dev, Stream& s, int warmup, int iters, const std::function<void()>& fn, int reps = 5) {
  for (int i = 0; i < warmup; ++i) fn();
  auto a = dev.create_event(), b = dev.create_event();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    a->record(s);
    for (int i = 0; i < iters; ++i) fn();
    b->record(s);
    b->synchronize();
    t.push_back(dev.elapsed_ms(*a, *b) / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

cudaStream_t cu(Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// A device buffer of n random values in [-1, 1) of type t (generated on the host in
// fp32, converted on the device).
DeviceBuffer random_buffer(Device& dev, Stream& s, LayerKernels& k, size_t n, DType t, unsigned seed) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : h) x = u(rng);
  auto f = dev.alloc(n * 4);
  dev.copy_to_device(f.get(), h.data(), n * 4);
  auto out = dev.alloc(n * dtype_size(t));
  k.convert_from_f32(s, f.as<float>(), out.get(), static_cast<int64_t>(n), t);
  s.synchronize();
  return out;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(e));
}

// --- bounds
double copy_bound_tbs(Device& dev, Stream& s, std::vector<Row>& rows) {
  const size_t bytes = size_t(2) << 30;
  auto a = dev.alloc(bytes), b = dev.alloc(bytes);
  dev.memset(s, a.get(), 1, bytes);
  const double ms = time_ms(dev, s, 2, 5, [&] { dev.copy_2d(s, b.get(), bytes, a.get(), bytes, bytes, 1); });
  const double tbs = 2.0 * bytes / ms * 1e-9;
  rows.push_back({"bounds", "device-to-device copy (HBM bound)", "2 GiB contiguous", ms, tbs, "TB/s", kNoBound,
                  "bytes = read+write; the bound of the memory-bound kernels below"});
  return tbs;
}

// --- norm + RoPE
struct NormShape {
  DType dt;
  int D, H;
  bool fused;
};

// A norm+RoPE launch's occupancy: its grid, blocks and warps a multiprocessor, registers, shared
// memory a block, and bytes in flight a multiprocessor (resident warps that walk rows, the grid
// perhaps smaller than what fits, times the bytes each has loading at once).
struct Occupancy {
  int blocks = 0, blocks_per_sm = 0, warps_per_sm = 0, regs = 0;
  double smem_kb = 0, inflight_kb_per_sm = 0;
};
Occupancy occupancy_of(const NormRopeLaunchInfo& info, int sms) {
  Occupancy o;
  o.blocks = info.blocks;
  o.blocks_per_sm = info.blocks_per_sm;
  o.warps_per_sm = info.blocks_per_sm * info.threads / 32;
  o.regs = info.regs;
  o.smem_kb = info.smem / 1024.0;
  const double warps_used =
      std::min<double>(o.warps_per_sm, static_cast<double>(info.blocks) * info.threads / 32 / sms);
  o.inflight_kb_per_sm = warps_used * info.inflight_per_warp / 1024.0;
  return o;
}

// One cell of the norm+RoPE table: the kernel the layer runs (the launcher's own pick),
// with what it takes of the machine, beside the same views' plain copy.
struct NormCell {
  std::string kind, dtype, layout, kernel;
  int D = 0, H = 0;
  double ms = 0, gbs = 0, of_bound = 0, stream_ms = 0, of_stream = 0, rope_only_ms = 0, bytes = 0;
  // Q and K in one launch (launch_norm_rope_qk: what the layer runs in the schedules
  // that norm them together, every one but v-first-split), and the streaming kernel over
  // both views in one launch: what the second launch costs.
  double qk_ms = 0, qk_of_bound = 0, stream1_ms = 0, stream1_of_bound = 0;
  std::string qk_kernel;
  // 16-bit LayerNorm's two candidate walks, each with Q and K in one launch (0: not run), and
  // the flat walk so (every cell).
  double qk_pipe4_of_bound = 0, qk_staged4_of_bound = 0, qk_flat_of_bound = 0;
  // The lane-rows walk (a lane a head), Q and K in one launch (0: not run: across-heads RMS,
  // heads of other chunk counts).
  double qk_lane_of_bound = 0;
  double qk_lane1_of_bound = 0;  // its single-tile variant (16-bit heads of 8 or 9 chunks; 0: not run)
  std::string lane_kernel, lane1_kernel;
  // The same walk over the same views with RoPE only, Q and K in one launch (same_walk_rope_only).
  double qk_same_walk_rope_of_bound = 0;
  // The two-launch pick's occupancy, and the Q+K launch's (that pick may take another walk).
  Occupancy occ, qk_occ;
};

// The rate of the walk a cell's Q+K pick takes over the same views with RoPE only (no norm), as a
// share of the copy bound: the RoPE-only cell's row of that walk (lane rows 1t, lane rows, flat);
// 0 where that walk was not measured with RoPE only.
double same_walk_rope_only(const std::vector<NormCell>& cells, const NormCell& c) {
  for (const auto& r : cells) {
    if (r.kind != "none" || r.D != c.D || r.H != c.H || r.dtype != c.dtype || r.layout != c.layout) continue;
    const std::string& k = c.qk_kernel;
    if (k.rfind("lane rows 1t", 0) == 0) return r.qk_lane1_of_bound;
    if (k.rfind("lane rows", 0) == 0) return r.qk_lane_of_bound;
    if (k.rfind("flat", 0) == 0) return r.qk_flat_of_bound;
  }
  return 0;
}

// heads_dims: (H, D) pairs to measure instead of the table's (3072 / D, D) for D 64, 72, 128
// (--norm-shapes: e.g. Wan's 40 x 128 and 12 x 128, rows of other lengths than the table's).
// M: tokens (rows) of Q and K, FLUX.1-dev 2048's 16896 unless --norm-tokens gives another
// (e.g. FLUX 1024's 4608: Q and K 57 MB at bf16, much of which a 50 MB L2 keeps between
// repetitions, as the layer's projection leaves it).
void norm_rope_rows(Device& dev, Stream& s, LayerKernels& kern, double bound_tbs, std::vector<Row>& rows,
                    std::vector<NormCell>& cells, const std::vector<std::pair<int, int>>& heads_dims, int64_t M) {
  const NormKind kinds[] = {NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads, NormKind::kLayerPerHead, NormKind::kNone};
  const char* kind_names[] = {"rms", "rms_across_heads", "layer", "none (RoPE only)"};
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  std::vector<NormShape> shapes;
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32})
    if (heads_dims.empty()) {
      for (int D : {64, 72, 128})
        for (bool fused : {true, false}) shapes.push_back({dt, D, 3072 / D, fused});  // width ~3072, FLUX-like
    } else {
      for (const auto& [H, D] : heads_dims)
        for (bool fused : {true, false}) shapes.push_back({dt, D, H, fused});
    }
  for (const NormShape& sh : shapes) {
    const size_t es = dtype_size(sh.dt);
    const int64_t width = static_cast<int64_t>(sh.H) * sh.D, pitch = sh.fused ? 3 * width : width;
    // fused: one QKV buffer, Q and K its views; separate: two buffers.
    auto buf = random_buffer(dev, s, kern, static_cast<size_t>(M * pitch * (sh.fused ? 1 : 2)), sh.dt, 4);
    std::vector<float> g(static_cast<size_t>(width), 1.0f), bt(static_cast<size_t>(sh.D), 0.0f);
    auto gamma = dev.alloc(g.size() * 4), beta = dev.alloc(bt.size() * 4);
    dev.copy_to_device(gamma.get(), g.data(), g.size() * 4);
    dev.copy_to_device(beta.get(), bt.data(), bt.size() * 4);
    auto view_of = [&](int j) {  // Q (j = 0) or K (j = 1)
      QkView v;
      v.data = static_cast<unsigned char*>(buf.get()) + (sh.fused ? j * width : j * M * width) * es;
      v.row_pitch = pitch;
      v.batch = 1;
      v.tokens_per_batch = M;
      v.pos_offset = 0;
      v.heads = sh.H;
      v.head_dim = sh.D;
      return v;
    };
    const double bytes = 2.0 * 2.0 * M * width * es;  // Q and K, read + write
    // The same bytes with no arithmetic: Q's and K's views read and written back in place
    // by a streaming kernel of the same shape (a warp per row, 16-byte accesses, resident
    // grid, two launches): the bound at this size and launch count.
    const double stream_ms = time_ms(dev, s, 3, 20, [&] {
      for (int j = 0; j < 2; ++j)
        launch_stream_rows(cu(s), view_of(j).data, M, width * static_cast<long long>(es), pitch * static_cast<long long>(es));
    });
    // The same, both views in one launch: fused, Q and K side by side in each row (rows of
    // twice the bytes); separate, K's rows follow Q's in one buffer (twice the rows).
    const double stream1_ms = time_ms(dev, s, 3, 20, [&] {
      if (sh.fused)
        launch_stream_rows(cu(s), view_of(0).data, M, 2 * width * static_cast<long long>(es),
                           pitch * static_cast<long long>(es));
      else
        launch_stream_rows(cu(s), view_of(0).data, 2 * M, width * static_cast<long long>(es),
                           width * static_cast<long long>(es));
    });
    char shape[96];
    std::snprintf(shape, sizeof(shape), "M%lld H%d D%d %s %s", static_cast<long long>(M), sh.H, sh.D,
                  dtype_name(sh.dt), sh.fused ? "fused" : "separate");
    rows.push_back({"norm+rope", "stream the same Q and K views in place (no math)", shape, stream_ms,
                    bytes / stream_ms * 1e-9, "TB/s", bytes / stream_ms * 1e-9 / bound_tbs,
                    "the streaming bound at this size: same bytes, same launches, no arithmetic"});
    rows.push_back({"norm+rope", "stream the same Q and K views in place, one launch (no math)", shape, stream1_ms,
                    bytes / stream1_ms * 1e-9, "TB/s", bytes / stream1_ms * 1e-9 / bound_tbs,
                    "the streaming bound with Q and K in one launch: one ramp-up and drain of the grid, not two"});
    double rope_only_ms = 0;
    for (int ki = 3; ki >= 0; --ki) {  // RoPE only first: the norms' cells quote it
      NormRopeParams p;
      p.norm = kinds[ki];
      p.rope = RopeKind::k1D;
      p.gamma = gamma.as<float>();
      p.beta = beta.as<float>();
      // The vector kernel as the layer runs it; also with 8 and 12 passes in flight
      // forced (not pipelined), its software-pipelined walk with batches of 4, 6 and 8
      // (per-head norms and RoPE; the across-heads norm pipelines whole rows instead, or
      // walks a row a block: "block rows"), its shared-memory staged walk with batches of
      // 4 and 8, its flat walk (a block a row, chunks across head boundaries: every norm
      // kind; in two launches and with Q and K in one), its lane-rows walk (a lane a head:
      // per-head norms and RoPE; in two launches and in one; with one tile a block at 8 blocks,
      // 16-bit heads of 8 or 9 chunks, in one), the general kernel, and the
      // pick with Q and K in one launch; and the two walks 16-bit LayerNorm chooses between
      // (pipelined 4, staged 4) with Q and K in one launch, as the layer would run either.
      constexpr int kVariants = 19;
      double ms_kernel[kVariants] = {};
      const NormRopeKernel kVec = NormRopeKernel::kVector;
      const NormRopeKernel which[kVariants] = {kVec, NormRopeKernel::kGeneral, kVec, kVec, kVec, kVec, kVec,
                                               kVec, kVec, kVec, kVec, kVec, kVec, kVec, kVec, kVec, kVec, kVec, kVec};
      const int kFlat = kNormRopeFlatPipe, kLane = kNormRopeLaneRowsPipe, kLane1 = kNormRopeLaneSinglePipe;
      const int batch[kVariants] = {0, 0, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
      const int pipe[kVariants] = {-1, -1, 0, 0, 4, 6, 8, -1, -1, 12, 16, kLane, kLane, kLane1, kFlat, kFlat, 4, 0, -1};
      const int staged[kVariants] = {-1, -1, 0, 0, 0, 0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 4, -1};
      // Q and K in one launch (launch_norm_rope_qk); the last: the layer's pick so.
      const bool one_launch[kVariants] = {false, false, false, false, false, false, false, false, false, false,
                                          false, false, true,  true,  false, true,  true,  true,  true};
      // kLaneQk: " (vector, lane rows, Q+K one launch)"; kLane1Qk: its single-tile variant so.
      constexpr int kQk = kVariants - 1, kLaneQk = 12, kLane1Qk = 13;
      const char* variant[kVariants] = {"", " (general kernel)", " (vector, 8 passes)", " (vector, 12 passes)",
                                        " (vector, pipelined 4)", " (vector, pipelined 6)", " (vector, pipelined 8)",
                                        " (vector, staged 4)", " (vector, staged 8)", " (vector, pipelined rows)",
                                        " (vector, block rows)", " (vector, lane rows)",
                                        " (vector, lane rows, Q+K one launch)",
                                        " (vector, lane rows 1t, Q+K one launch)",
                                        " (vector, flat)",
                                        " (vector, flat, Q+K one launch)", " (vector, pipelined 4, Q+K one launch)",
                                        " (vector, staged 4, Q+K one launch)", kNormRopeQkRowSuffix};
      // The flat and lane-rows walks' launches (and the single-tile variant's), for their rows' notes.
      std::string flat_kernel, lane_kernel, lane1_kernel;
      NormRopeLaunchInfo qk_info;
      NormRopeLaunchInfo info;
      for (int w = 0; w < kVariants; ++w) {
        // The across-heads norm pipelines whole rows (pipe 12, rows of at most 12 passes);
        // the others pipeline batches of passes.
        const bool across = kinds[ki] == NormKind::kRmsAcrossHeads;
        const int G = std::min(32, sh.D * static_cast<int>(es) / 16), passes = (sh.H + 32 / G - 1) / (32 / G);
        if (pipe[w] > 0 && pipe[w] != kFlat && across != (pipe[w] == 12 || pipe[w] == 16)) continue;
        if (pipe[w] == 12 && passes > 12) continue;
        if (pipe[w] == 16 && passes > 48) continue;
        // The lane-rows walk where it serves the shape (across heads: skipped above).
        if (pipe[w] == kLane && !norm_rope_lane_rows_serve(sh.dt, sh.D, sh.H)) continue;
        if (pipe[w] == kLane1 && !norm_rope_lane_single_serve(kinds[ki], sh.dt, sh.D, sh.H)) continue;
        // The one-launch pair of the 16-bit LayerNorm pick: only where the staged walk is
        // a candidate (16-bit types, power-of-two lane groups; a row too long for it is
        // refused by the launcher, as for the staged rows above).
        if ((w == kQk - 2 || w == kQk - 1) && (kinds[ki] != NormKind::kLayerPerHead || es != 2 || (G & (G - 1)) != 0))
          continue;
        auto run = [&] {
          if (one_launch[w]) {
            launch_norm_rope_qk(cu(s), view_of(0), p, view_of(1), p, sh.dt, which[w], batch[w], pipe[w], staged[w]);
            return;
          }
          for (int j = 0; j < 2; ++j) launch_norm_rope(cu(s), view_of(j), sh.dt, p, which[w], batch[w], pipe[w], staged[w]);
        };
        ms_kernel[w] = time_ms(dev, s, 3, 20, run);
        if (w == 0) info = last_norm_rope_launch();
        if (w == kQk) qk_info = last_norm_rope_launch();
        if (pipe[w] == kFlat || pipe[w] == kLane || pipe[w] == kLane1) {
          const NormRopeLaunchInfo fi = last_norm_rope_launch();
          (pipe[w] == kFlat ? flat_kernel : pipe[w] == kLane ? lane_kernel : lane1_kernel) =
              fi.kernel + " (" + std::to_string(fi.regs) + " registers, " + std::to_string(fi.blocks_per_sm) +
              " blocks a multiprocessor, " + std::to_string(fi.smem / 1024) + " KB shared a block)";
        }
      }
      for (int w = 0; w < kVariants; ++w) {
        if (ms_kernel[w] == 0) continue;
        const double tbs = bytes / ms_kernel[w] * 1e-9;
        rows.push_back({"norm+rope", std::string("norm+RoPE ") + kind_names[ki] + variant[w],
                        shape, ms_kernel[w], tbs, "TB/s", tbs / bound_tbs,
                        w == 0     ? "Q and K, bytes = read+write; the layer's pick: " + info.kernel
                        : w == kQk           ? "Q and K, bytes = read+write; " + qk_info.kernel
                        : pipe[w] == kFlat   ? "Q and K, bytes = read+write; " + flat_kernel
                        : pipe[w] == kLane   ? "Q and K, bytes = read+write; " + lane_kernel
                        : pipe[w] == kLane1  ? "Q and K, bytes = read+write; " + lane1_kernel
                                             : "Q and K, bytes = read+write"});
      }
      if (ki == 3) rope_only_ms = ms_kernel[0];
      NormCell c;
      c.kind = kinds[ki] == NormKind::kNone ? "none" : kind_names[ki];
      c.dtype = dtype_name(sh.dt);
      c.layout = sh.fused ? "fused" : "separate";
      c.kernel = info.kernel;
      c.D = sh.D;
      c.H = sh.H;
      c.ms = ms_kernel[0];
      c.gbs = bytes / c.ms * 1e-6;
      c.of_bound = bytes / c.ms * 1e-9 / bound_tbs;
      c.stream_ms = stream_ms;
      c.stream1_ms = stream1_ms;
      c.stream1_of_bound = bytes / stream1_ms * 1e-9 / bound_tbs;
      c.qk_ms = ms_kernel[kQk];
      c.qk_of_bound = bytes / c.qk_ms * 1e-9 / bound_tbs;
      c.qk_kernel = qk_info.kernel;
      if (ms_kernel[kQk - 2] > 0) c.qk_pipe4_of_bound = bytes / ms_kernel[kQk - 2] * 1e-9 / bound_tbs;
      if (ms_kernel[kQk - 1] > 0) c.qk_staged4_of_bound = bytes / ms_kernel[kQk - 1] * 1e-9 / bound_tbs;
      if (ms_kernel[kQk - 3] > 0) c.qk_flat_of_bound = bytes / ms_kernel[kQk - 3] * 1e-9 / bound_tbs;
      if (ms_kernel[kLaneQk] > 0) c.qk_lane_of_bound = bytes / ms_kernel[kLaneQk] * 1e-9 / bound_tbs;
      c.lane_kernel = lane_kernel;
      if (ms_kernel[kLane1Qk] > 0) c.qk_lane1_of_bound = bytes / ms_kernel[kLane1Qk] * 1e-9 / bound_tbs;
      c.lane1_kernel = lane1_kernel;
      c.of_stream = stream_ms / c.ms;
      c.rope_only_ms = rope_only_ms;
      c.bytes = bytes;
      c.occ = occupancy_of(info, sms);
      c.qk_occ = occupancy_of(qk_info, sms);
      cells.push_back(c);  // then its walk's RoPE-only rate: that cell (kind "none") came first, or is this one
      cells.back().qk_same_walk_rope_of_bound = same_walk_rope_only(cells, cells.back());
    }
  }
}

// Why each cell below 85% of the copy bound with Q and K in one launch (what the layer runs under
// baseline, v-first, v-project-first) stays there, in numbers: its bytes and rate; its launch's
// registers, blocks, warps, shared memory and bytes in flight a multiprocessor; the streaming
// kernel over the same views in one launch (no arithmetic); and the same walk over the same views
// with RoPE only, the walk's own ceiling: what the cell is short of it is the norm's arithmetic.
void print_norm_why(const std::vector<NormCell>& cells, double bound_tbs) {
  bool header = false;
  for (const auto& c : cells) {
    if (c.qk_of_bound >= 0.85) continue;
    if (!header)
      std::printf("\nwhy below 85%% with Q and K in one launch (bound = %.3f TB/s device copy):\n", bound_tbs);
    header = true;
    const double rope = c.qk_same_walk_rope_of_bound;
    char walk[160];
    if (c.kind == "none")
      std::snprintf(walk, sizeof walk, "is this cell: the walk over these views is what holds it");
    else if (rope > 0)
      std::snprintf(walk, sizeof walk, "%.1f%%, so the norm's arithmetic costs %.1f points on this walk%s", 100 * rope,
                    100 * (rope - c.qk_of_bound), rope < 0.85 ? " (and the walk itself is below 85%)" : "");
    else
      std::snprintf(walk, sizeof walk, "not measured");
    std::printf("  %s D%d H%d %s %s, %s: %.1f%% (%.1f MB read and written in %.4f ms, %.3f TB/s); %d registers, %d "
                "blocks (%d warps) a multiprocessor, %.1f KB shared a block, %.0f KB in flight a multiprocessor; the "
                "streaming kernel over the same views %.1f%%; the same walk with RoPE only %s\n",
                c.kind.c_str(), c.D, c.H, c.dtype.c_str(), c.layout.c_str(), c.qk_kernel.c_str(), 100 * c.qk_of_bound,
                c.bytes / 1e6, c.qk_ms, c.bytes / c.qk_ms * 1e-9, c.qk_occ.regs, c.qk_occ.blocks_per_sm,
                c.qk_occ.warps_per_sm, c.qk_occ.smem_kb, c.qk_occ.inflight_kb_per_sm, 100 * c.stream1_of_bound, walk);
  }
}

// The norm+RoPE table: every kind x head_dim x dtype x layout, the kernel the layer runs.
// Where a cell is short of 85% of the copy bound, its columns say what it had: the same
// views streamed in place with no arithmetic (the bound at this size and launch count), the RoPE-only kernel of the same
// shape (the cost of the walk without the norm), occupancy and bytes in flight.
void print_norm_table(const std::vector<NormCell>& cells, double bound_tbs, int64_t M) {
  std::printf("\nnorm+RoPE table (Q and K of M%lld tokens, in two launches and in one; bound = %.3f TB/s device copy)\n",
              static_cast<long long>(M), bound_tbs);
  std::printf("%-16s | %4s | %3s | %-4s | %-8s | %-24s | %8s | %7s | %6s | %8s | %7s | %8s | %6s | %5s | %4s | %5s | %7s | %9s | %14s | %8s | %6s | %6s | %s\n",
              "kind", "D", "H", "type", "layout", "kernel", "ms", "GB/s", "%bound", "strm ms", "%strm", "rope ms",
              "MB", "grid", "b/SM", "w/SM", "regs", "smem KB/b", "inflight KB/SM", "1-lnch ms", "%bound",
              "%strm1", "");
  std::printf("%s\n", std::string(236, '-').c_str());
  int below = 0, below_qk = 0;
  for (const auto& c : cells) {
    below += c.of_bound < 0.85;
    below_qk += c.qk_of_bound < 0.85;
    std::printf("%-16s | %4d | %3d | %-4s | %-8s | %-24s | %8.4f | %7.0f | %5.1f%% | %8.4f | %6.1f%% | %8.4f | %6.1f | %5d | %4d | %5d | %7d | %9.1f | %14.0f | %8.4f | %5.1f%% | %5.1f%% |%s%s\n",
                c.kind.c_str(), c.D, c.H, c.dtype.c_str(), c.layout.c_str(), c.kernel.c_str(), c.ms, c.gbs,
                100 * c.of_bound, c.stream_ms, 100 * c.of_stream, c.rope_only_ms, c.bytes / 1e6, c.occ.blocks,
                c.occ.blocks_per_sm, c.occ.warps_per_sm, c.occ.regs, c.occ.smem_kb, c.occ.inflight_kb_per_sm, c.qk_ms,
                100 * c.qk_of_bound,
                100 * c.stream1_ms / c.qk_ms, c.of_bound < 0.85 ? " <85%" : "", c.qk_of_bound < 0.85 ? " 1-lnch<85%" : "");
  }
  std::printf("cells below 85%% of the copy bound: %d of %zu in two launches (the layer under v-first-split); with Q "
              "and K in one launch (the layer under baseline, v-first, v-project-first): %d of %zu\n",
              below, cells.size(), below_qk, cells.size());
  std::printf("1-lnch: the same pick with Q and K in one launch (launch_norm_rope_qk); %%strm1: the streaming kernel "
              "over both views in one launch, as a share of it\n");
  std::printf("\n16-bit LayerNorm, Q and K in one launch, %% of the copy bound: the pick against its candidate walks "
              "(pipelined 4 and staged 4 where the lane groups are a power of two; the flat walk everywhere)\n");
  std::printf("%4s | %-4s | %-8s | %-27s | %6s | %11s | %8s | %6s\n", "D", "type", "layout", "pick", "pick",
              "pipelined 4", "staged 4", "flat");
  auto pct = [](double f) {
    char b[16];
    if (f > 0) std::snprintf(b, sizeof b, "%.1f%%", 100 * f);
    else std::snprintf(b, sizeof b, "-");
    return std::string(b);
  };
  for (const auto& c : cells)
    if (c.kind == "layer" && c.dtype != "fp32")
      std::printf("%4d | %-4s | %-8s | %-27s | %6s | %11s | %8s | %6s\n", c.D, c.dtype.c_str(), c.layout.c_str(),
                  c.qk_kernel.c_str(), pct(c.qk_of_bound).c_str(), pct(c.qk_pipe4_of_bound).c_str(),
                  pct(c.qk_staged4_of_bound).c_str(), pct(c.qk_flat_of_bound).c_str());
  std::printf("\nThe lane-rows walk (a lane a head), Q and K in one launch, %% of the copy bound, against the pick "
              "(per-head norms and RoPE only)\n");
  std::printf("%-16s | %4s | %-4s | %-8s | %-27s | %6s | %9s | %12s | %s\n", "kind", "D", "type", "layout", "pick",
              "pick", "lane rows", "lane rows 1t", "lane-rows launch");
  for (const auto& c : cells)
    if (c.qk_lane_of_bound > 0)
      std::printf("%-16s | %4d | %-4s | %-8s | %-27s | %6s | %9s | %12s | %s\n", c.kind.c_str(), c.D, c.dtype.c_str(),
                  c.layout.c_str(), c.qk_kernel.c_str(), pct(c.qk_of_bound).c_str(), pct(c.qk_lane_of_bound).c_str(),
                  pct(c.qk_lane1_of_bound).c_str(), c.lane_kernel.c_str());
  for (const auto& c : cells)
    if (c.qk_lane1_of_bound > 0)
      std::printf("lane rows 1t: %s D%d %s %s: %s\n", c.kind.c_str(), c.D, c.dtype.c_str(), c.layout.c_str(),
                  c.lane1_kernel.c_str());
}

// --- GEMM: the fused QKV projection at Ulysses2 FLUX 2048 (M8448), whole and split the
// way the own-slice paths split it (Q,K + V's columns before the own block, the own block
// into its target, the rest), and the V-projection-first split.
void gemm_rows(Device& dev, Stream& s, LayerKernels& kern, std::vector<Row>& rows) {
  const int64_t M = 8448, K = 3072, Ct = 3072, N = 3 * Ct, Hl = 1536;  // U2: own block = half of V's columns
  auto a = random_buffer(dev, s, kern, M * K, DType::kBF16, 5);
  auto w = random_buffer(dev, s, kern, K * N, DType::kBF16, 6);
  auto out = dev.alloc(M * N * 2), target = dev.alloc(2 * M * Hl * 2);
  auto bf = [&](const void* p, int64_t col) { return static_cast<const unsigned char*>(p) + col * 2; };
  auto bfo = [&](void* p, int64_t col) { return static_cast<unsigned char*>(p) + col * 2; };
  const double flops = 2.0 * M * N * K;
  const double whole = time_ms(dev, s, 3, 10, [&] {
    kern.gemm(s, a.get(), K, w.get(), N, out.get(), N, M, N, K, DType::kBF16, DType::kBF16);
  });
  rows.push_back({"gemm", "QKV projection (cuBLASLt), one GEMM", "M8448 K3072 N9216 bf16", whole,
                  flops / whole * 1e-9, "TFLOP/s", kNoBound, ""});
  for (int me : {0, 1}) {
    const int64_t own0 = 2 * Ct + me * Hl;  // the own block of V's columns
    const double ms = time_ms(dev, s, 3, 10, [&] {
      kern.gemm(s, a.get(), K, w.get(), N, out.get(), N, M, own0, K, DType::kBF16, DType::kBF16);
      kern.gemm(s, a.get(), K, bf(w.get(), own0), N, target.get(), Hl, M, Hl, K, DType::kBF16, DType::kBF16);
      if (own0 + Hl < N)
        kern.gemm(s, a.get(), K, bf(w.get(), own0 + Hl), N, bfo(out.get(), own0 + Hl), N, M, N - own0 - Hl, K,
                  DType::kBF16, DType::kBF16);
    });
    rows.push_back({"gemm", std::string("QKV projection split for the own V slice, rank ") + std::to_string(me),
                    "M8448 K3072 N9216 bf16", ms, flops / ms * 1e-9, "TFLOP/s", whole / ms,
                    me == 0 ? "3 GEMMs; of_bound = one GEMM's time / this" : "2 GEMMs; of_bound = one GEMM's time / this"});
  }
  const double vq = time_ms(dev, s, 3, 10, [&] {
    kern.gemm(s, a.get(), K, bf(w.get(), 2 * Ct), N, bfo(out.get(), 2 * Ct), N, M, Ct, K, DType::kBF16, DType::kBF16);
    kern.gemm(s, a.get(), K, w.get(), N, out.get(), N, M, 2 * Ct, K, DType::kBF16, DType::kBF16);
  });
  rows.push_back({"gemm", "V columns first, then Q and K (v-project-first)", "M8448 K3072 N9216 bf16", vq,
                  flops / vq * 1e-9, "TFLOP/s", whole / vq, "2 GEMMs; of_bound = one GEMM's time / this"});
}

// --- GEMM by shape: the model's GEMM profile (lib/report/model_bench.hpp reads these
// rows). Each hidden size of the shipped decks (PixArt 1152, SD3 and Wan 1.3B 1536, FLUX,
// HunyuanVideo and CogVideoX 3072, Wan 14B 5120) with the (K, N) its layer's GEMMs take:
// the fused QKV projection (h -> 3h), one of separate Q/K/V or the output projection
// (h -> h), the same under TP2 (h -> 3h/2, h -> h/2, h/2 -> h); M (tokens on a rank) in
// powers of two from 256 to 131072 (HunyuanVideo 720p at Ulysses1: 119056), plus FLUX's
// 4608 and 16896. bf16 in and out, random values, the layer's cuBLASLt call.
void gemm_shape_rows(Device& dev, Stream& s, LayerKernels& kern, std::vector<Row>& rows) {
  std::vector<int64_t> ms;
  for (int64_t m = 256; m <= 131072; m *= 2) ms.push_back(m);
  ms.push_back(4608);
  ms.push_back(16896);
  std::sort(ms.begin(), ms.end());
  struct KN {
    int64_t k, n;
  };
  std::vector<KN> kns;
  for (int64_t h : {1152, 1536, 3072, 5120})
    for (KN kn : {KN{h, 3 * h}, KN{h, h}, KN{h, 3 * h / 2}, KN{h, h / 2}, KN{h / 2, h}}) kns.push_back(kn);
  int64_t max_a = 0, max_w = 0, max_o = 0;
  for (const KN& kn : kns) {
    max_a = std::max(max_a, ms.back() * kn.k);
    max_w = std::max(max_w, kn.k * kn.n);
    max_o = std::max(max_o, ms.back() * kn.n);
  }
  // Random values: one block made on the host, tiled on the device.
  const int64_t block = int64_t{1} << 24;
  auto rnd = random_buffer(dev, s, kern, static_cast<size_t>(block), DType::kBF16, 7);
  auto tile = [&](int64_t n) {
    auto b = dev.alloc(static_cast<size_t>(n) * 2);
    for (int64_t off = 0; off < n; off += block) {
      const int64_t len = std::min(block, n - off);
      dev.copy_2d(s, static_cast<unsigned char*>(b.get()) + off * 2, static_cast<size_t>(len) * 2, rnd.get(),
                  static_cast<size_t>(len) * 2, static_cast<size_t>(len) * 2, 1);
    }
    return b;
  };
  auto a = tile(max_a), w = tile(max_w);
  auto out = dev.alloc(static_cast<size_t>(max_o) * 2);
  s.synchronize();
  for (const KN& kn : kns) {
    for (int64_t m : ms) {
      const double flops = 2.0 * m * kn.n * kn.k;
      // About 2 ms a timing at 700 TFLOP/s, 3 to 50 runs.
      const int iters = static_cast<int>(std::clamp(2e-3 * 700e12 / flops, 3.0, 50.0));
      const double t = time_ms(dev, s, 2, iters, [&] {
        kern.gemm(s, a.get(), kn.k, w.get(), kn.n, out.get(), kn.n, m, kn.n, kn.k, DType::kBF16, DType::kBF16);
      });
      char shape[64];
      std::snprintf(shape, sizeof(shape), "M%lld K%lld N%lld bf16", static_cast<long long>(m),
                    static_cast<long long>(kn.k), static_cast<long long>(kn.n));
      rows.push_back({"gemm", kGemmShapeRowWhat, shape, t, flops / t * 1e-9, "TFLOP/s", kNoBound,
                      "the model's GEMM profile (model calibrate|validate|loo --rates)"});
    }
  }
}

// --- copies
void copy_rows(Device& dev, Stream& s, double bound_tbs, std::vector<Row>& rows) {
  const int64_t S = 65536;
  const int H = 24, D = 128;
  const size_t row_bytes = static_cast<size_t>(H) * D * 2;
  auto qkv = dev.alloc(S * 3 * row_bytes);
  auto dst = dev.alloc(S * row_bytes);
  for (int slices : {1, 4}) {
    const size_t w = row_bytes / slices;
    const double ms = time_ms(dev, s, 3, 20, [&] {
      for (int j = 0; j < slices; ++j) {
        dev.copy_2d(s, dst.as<unsigned char>() + j * S * w, w, qkv.as<unsigned char>() + 2 * row_bytes + j * w,
                    3 * row_bytes, w, S);
      }
    });
    const double tbs = 2.0 * S * row_bytes / ms * 1e-9;
    rows.push_back({"copies", "cudaMemcpy2DAsync strided V view",
                    "S65536 24x128 bf16, " + std::to_string(slices) + " head slice" + (slices > 1 ? "s" : ""), ms,
                    tbs, "TB/s", tbs / bound_tbs, "bytes = read+write"});
  }
}

// --- what runs where: a copy beside a kernel that holds every SM for kSpinMs.
constexpr double kSpinMs = 20.0;

void where_rows(Device& dev, std::vector<Row>& rows) {
  auto spin_s = dev.create_stream(StreamPriority::kNormal);
  auto copy_s = dev.create_stream(StreamPriority::kHigh);
  const int64_t S = 16896;
  const size_t row_bytes = 24 * 128 * 2, w = row_bytes / 2;  // half the heads of a FLUX 2048 row
  auto qkv = dev.alloc(S * 3 * row_bytes);
  auto dst = dev.alloc(S * row_bytes);
  dev.memset(*spin_s, qkv.get(), 1, qkv.bytes());
  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, S * row_bytes), "cudaMallocHost");
  std::unique_ptr<void, void (*)(void*)> pin_guard(pinned, [](void* p) { cudaFreeHost(p); });
  // The vmm transport's target: the same device memory mapped a second time, as a peer
  // on this device would map it (alloc_fd_shareable, export_fd, import_fd).
  DeviceBuffer vmm_buf;
  PeerMapping vmm_map;
  std::string vmm_why = dev.vmm_ineligible_reason();
  if (vmm_why.empty()) {
    try {
      vmm_buf = dev.alloc_fd_shareable(S * row_bytes);
      vmm_map = dev.import_fd(dev.export_fd(vmm_buf), S * row_bytes);
    } catch (const std::exception& e) {
      vmm_why = e.what();
    }
  }
  struct Kind {
    std::string name, note;
    std::function<void(Stream&)> copy;
  };
  std::vector<Kind> kinds = {
      {"same-device cudaMemcpy2DAsync (own slice, NCCL pack/unpack)", "strided V view, half the heads",
       [&](Stream& s) { dev.copy_2d(s, dst.get(), w, qkv.as<unsigned char>() + 2 * row_bytes, 3 * row_bytes, w, S); }},
      {"same-device cudaMemcpyAsync (1-D)", "contiguous",
       [&](Stream& s) { check(cudaMemcpyAsync(dst.get(), qkv.get(), S * w, cudaMemcpyDefault, cu(s)), "cudaMemcpyAsync"); }},
      {"same-device cudaMemcpy3DBatchAsync, PreferOverlapWithCompute", "strided V view, one 2-D op",
       [&](Stream& s) {
         cudaMemcpy3DBatchOp op{};
         op.src.type = cudaMemcpyOperandTypePointer;
         op.src.op.ptr.ptr = qkv.as<unsigned char>() + 2 * row_bytes;
         op.src.op.ptr.rowLength = 3 * row_bytes;
         op.src.op.ptr.layerHeight = static_cast<size_t>(S);
         op.dst.type = cudaMemcpyOperandTypePointer;
         op.dst.op.ptr.ptr = dst.get();
         op.dst.op.ptr.rowLength = w;
         op.dst.op.ptr.layerHeight = static_cast<size_t>(S);
         op.extent = make_cudaExtent(w, static_cast<size_t>(S), 1);
         op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
         op.flags = cudaMemcpyFlagPreferOverlapWithCompute;
         check(cudaMemcpy3DBatchAsync(1, &op, 0, cu(s)), "cudaMemcpy3DBatchAsync");
       }},
      {"pinned host -> device cudaMemcpy2DAsync (control)", "half rows into the strided view",
       [&](Stream& s) { dev.copy_2d(s, qkv.as<unsigned char>() + 2 * row_bytes, 3 * row_bytes, pinned, w, w, S); }},
      {"device -> pinned host cudaMemcpy2DAsync", "strided V view, half the heads",
       [&](Stream& s) { dev.copy_2d(s, pinned, w, qkv.as<unsigned char>() + 2 * row_bytes, 3 * row_bytes, w, S); }},
  };
  if (vmm_map)
    kinds.push_back({"same-device cudaMemcpy2DAsync into a VMM-mapped alias (vmm target)", "strided V view, half the heads",
                     [&](Stream& s) {
                       dev.copy_2d(s, vmm_map.get(), w, qkv.as<unsigned char>() + 2 * row_bytes, 3 * row_bytes, w, S);
                     }});
  else
    rows.push_back({"where", "VMM-mapped alias", "", 0, 0, "", kNoBound, "not measured: " + vmm_why});

  for (auto& k : kinds) {
    // Alone: the copy's own time.
    const double alone = time_ms(dev, *copy_s, 2, 5, [&] { k.copy(*copy_s); }, 3);
    // Beside the kernel: started just after it, on a high-priority stream.
    auto e_spin0 = dev.create_event(), e_spin1 = dev.create_event(), e_copy1 = dev.create_event();
    e_spin0->record(*spin_s);
    launch_spin_every_sm(cu(*spin_s), kSpinMs);
    e_spin1->record(*spin_s);
    dev.stream_wait_event(*copy_s, *e_spin0);
    k.copy(*copy_s);
    e_copy1->record(*copy_s);
    copy_s->synchronize();
    spin_s->synchronize();
    const double spin = dev.elapsed_ms(*e_spin0, *e_spin1), end = dev.elapsed_ms(*e_spin0, *e_copy1);
    const bool beside = end < 0.5 * spin;
    const bool after = end >= spin;
    char note[200];
    std::snprintf(note, sizeof(note), "%s: done %.3f ms after the start of a %.1f ms all-SM kernel (alone %.3f ms)",
                  beside ? "COPY ENGINE (runs beside the kernel)"
                         : after ? "NEEDS SMs (waited for the kernel)" : "UNCLEAR (partly delayed)",
                  end, spin, alone);
    rows.push_back({"where", k.name, k.note, alone, end, "ms done", kNoBound, note});
  }
}

// --- latency floor: the parts of a scatter's fixed cost, each as a chain of kChain
// operations behind a short delay on the first stream (so the host has enqueued the whole
// chain before the GPU starts on it), timed with events; and the host's enqueue cost.
constexpr int kChain = 200;
constexpr double kGateMs = 3.0;

void latency_rows(Device& dev, std::vector<Row>& rows) {
  auto a = dev.create_stream(StreamPriority::kHigh), b = dev.create_stream(StreamPriority::kHigh);
  using Clock = std::chrono::steady_clock;
  auto host_us = [](Clock::time_point t0, int n) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
  };
  // Event hop: a records, b waits and records, a waits ... 2*kChain hops.
  {
    std::vector<std::unique_ptr<Event>> ea(kChain), eb(kChain);
    for (int i = 0; i < kChain; ++i) {
      ea[i] = dev.create_event();
      eb[i] = dev.create_event();
    }
    auto t0e = dev.create_event(), t1e = dev.create_event();
    launch_delay(cu(*a), kGateMs);
    t0e->record(*a);
    const auto h0 = Clock::now();
    for (int i = 0; i < kChain; ++i) {
      ea[i]->record(*a);
      dev.stream_wait_event(*b, *ea[i]);
      eb[i]->record(*b);
      dev.stream_wait_event(*a, *eb[i]);
    }
    const double host = host_us(h0, 2 * kChain);
    t1e->record(*a);
    a->synchronize();
    const double us = dev.elapsed_ms(*t0e, *t1e) * 1e3 / (2 * kChain);
    rows.push_back({"latency", kEventHopRowWhat, "chain of 400", us / 1e3, us, "us",
                    kNoBound, "GPU time per hop; host enqueue " + std::to_string(host).substr(0, 5) + " us per hop"});
  }
  // Stream-memory-op round trip: a writes x = i, b waits x >= i and writes y = i, a waits y >= i.
  {
    auto words = dev.alloc(2 * sizeof(uint64_t));
    const uint64_t zero[2] = {0, 0};
    dev.copy_to_device(words.get(), zero, sizeof(zero));
    auto* x = words.as<uint64_t>();
    auto* y = x + 1;
    auto t0e = dev.create_event(), t1e = dev.create_event();
    launch_delay(cu(*a), kGateMs);
    t0e->record(*a);
    const auto h0 = Clock::now();
    for (int i = 1; i <= kChain; ++i) {
      dev.write_value64(*a, x, static_cast<uint64_t>(i));
      dev.wait_value64_geq(*b, x, static_cast<uint64_t>(i), WaitLabel{0, "the benchmark's ping"});
      dev.write_value64(*b, y, static_cast<uint64_t>(i));
      dev.wait_value64_geq(*a, y, static_cast<uint64_t>(i), WaitLabel{0, "the benchmark's pong"});
    }
    const double host = host_us(h0, 2 * kChain);
    t1e->record(*a);
    a->synchronize();
    b->synchronize();
    const double us = dev.elapsed_ms(*t0e, *t1e) * 1e3 / kChain;
    rows.push_back({"latency", "stream memory op round trip (write, wait, write back, wait)", "chain of 200", us / 1e3,
                    us, "us", kNoBound,
                    "GPU time per round trip; host enqueue " + std::to_string(host).substr(0, 5) + " us per write+wait"});
  }
  // A small copy (16 KB, the near-empty layer's tag) and its enqueue cost.
  {
    auto src = dev.alloc(size_t(16) << 10), dst = dev.alloc(size_t(16) << 10);
    auto t0e = dev.create_event(), t1e = dev.create_event();
    launch_delay(cu(*a), kGateMs);
    t0e->record(*a);
    const auto h0 = Clock::now();
    for (int i = 0; i < kChain; ++i) dev.copy_2d(*a, dst.get(), 1024, src.get(), 1024, 1024, 16);
    const double host = host_us(h0, kChain);
    t1e->record(*a);
    a->synchronize();
    const double us = dev.elapsed_ms(*t0e, *t1e) * 1e3 / kChain;
    rows.push_back({"latency", "small same-device 2-D copy (16 KB)", "chain of 200", us / 1e3, us, "us", kNoBound,
                    "GPU time per copy; host enqueue " + std::to_string(host).substr(0, 5) + " us per copy"});
    // Seven such copies (a Ulysses8 scatter's peers) as one batch, against one by one.
    std::vector<DeviceBuffer> dsts;
    std::vector<Copy2DOp> ops;
    for (int j = 0; j < 7; ++j) {
      dsts.push_back(dev.alloc(size_t(16) << 10));
      ops.push_back({dsts.back().get(), 1024, src.get(), 1024, 1024, 16});
    }
    for (int batched = 0; batched < 2; ++batched) {
      auto b0 = dev.create_event(), b1 = dev.create_event();
      launch_delay(cu(*a), kGateMs);
      b0->record(*a);
      const auto h1 = Clock::now();
      for (int i = 0; i < kChain / 7; ++i) {
        if (batched)
          dev.copy_2d_batch(*a, ops);
        else
          for (const auto& o : ops) dev.copy_2d(*a, o.dst, o.dst_pitch, o.src, o.src_pitch, o.width, o.height);
      }
      const double h = host_us(h1, kChain / 7);
      b1->record(*a);
      a->synchronize();
      const double g = dev.elapsed_ms(*b0, *b1) * 1e3 / (kChain / 7);
      rows.push_back({"latency", batched ? "7 small copies as one cudaMemcpy3DBatchAsync" : "7 small copies one by one",
                      "16 KB each, 28 rounds", g / 1e3, g, "us", kNoBound,
                      "GPU time per round of 7; host enqueue " + std::to_string(h).substr(0, 5) + " us per round"});
    }
  }
}

// --- graph nodes: what each kind of node costs a captured layer on the GPU. kGraphKernels
// one-block kernels that end at once are captured as one graph and launched kGraphLaunches
// times behind a gate, timed with events outside the graph: the kernels alone; an event
// recorded after each; a hop to a second stream and back after each (the layer's forks and
// joins: two records and two waits). Events timed (inside a capture, CudaEvent::record
// adds an external event-record node, which timing and later waits read) or ordering
// (EventUse::kOrdering: an edge of the graph, no node; op by op a record without timing).
// And the same issued op by op on streams. Figures per kernel; a variant less the kernels
// alone is what its events cost.
constexpr int kGraphKernels = kNodeKernels;
constexpr int kFloorOpTrials = kNodeMedianRuns;  // runs of a timing whose figure is their median
constexpr int kGraphLaunches = kNodeLaunches;

// GPU time per op of `issue` (kGraphKernels ops on stream a): issued op by op `chains` times
// in a row behind a gate (so the GPU's time is timed, not the host's: the chains' enqueue must
// fit in the gate), with the host's enqueue per op; and captured once as a graph, launched once
// untimed (its upload), then kGraphLaunches times behind a gate.
struct NodeTimes {
  double graph_us, stream_us, host_us;
};
NodeTimes graph_and_op_by_op(Device& dev, Stream& a, const std::function<void()>& issue, int chains,
                             double gate_ms = kGateMs, int kernels = kGraphKernels) {
  using Clock = std::chrono::steady_clock;
  NodeTimes t{};
  auto t0 = dev.create_event(), t1 = dev.create_event();
  launch_delay(cu(a), gate_ms);
  t0->record(a);
  const auto h0 = Clock::now();
  for (int l = 0; l < chains; ++l) issue();
  t.host_us = std::chrono::duration<double, std::micro>(Clock::now() - h0).count() / (kernels * chains);
  t1->record(a);
  a.synchronize();
  t.stream_us = dev.elapsed_ms(*t0, *t1) * 1e3 / (kernels * chains);
  dev.begin_capture(a);
  issue();
  auto g = dev.end_capture(a);
  g->launch(a, g->value_ops());
  a.synchronize();
  launch_delay(cu(a), kGateMs);
  t0->record(a);
  for (int l = 0; l < kGraphLaunches; ++l) g->launch(a, g->value_ops());
  t1->record(a);
  a.synchronize();
  t.graph_us = dev.elapsed_ms(*t0, *t1) * 1e3 / (kernels * kGraphLaunches);
  return t;
}

// Each figure of graph_and_op_by_op the median of `trials` runs of it. One run's host figure is
// one chain's mean, which one stall of the host moves by half: two H100 hosts' output-projection
// call measured 7.6 and 11.4 us, their GPU figures within 2% (docs/measured/2026-12-06-h100-b131772).
NodeTimes median_node_times(Device& dev, Stream& a, const std::function<void()>& issue, int chains, int trials,
                            double gate_ms = kGateMs, int kernels = kGraphKernels) {
  std::vector<double> g, s, h;
  for (int i = 0; i < trials; ++i) {
    const NodeTimes t = graph_and_op_by_op(dev, a, issue, chains, gate_ms, kernels);
    g.push_back(t.graph_us);
    s.push_back(t.stream_us);
    h.push_back(t.host_us);
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(g), median(s), median(h)};
}

void graph_node_rows(Device& dev, Stream& a, Stream& b, std::vector<Row>& rows) {
  // Each variant's steps (lib/report/node_sequences.hpp, which the model replays too) on
  // stream a, stream b and a high-priority stream (the transports' copy stream).
  auto hp = dev.create_stream(StreamPriority::kHigh);
  Stream* const streams[kNodeStreams] = {&a, &b, hp.get()};
  auto word = dev.alloc(sizeof(uint64_t));
  const uint64_t one = 1;  // every wait below is met at once: what is timed is the fixed cost
  dev.copy_to_device(word.get(), &one, sizeof(one));
  const WaitLabel label{0, "the benchmark's own word"};
  auto copy_src = dev.alloc(kNodeCopyBytes), copy_dst = dev.alloc(kNodeCopyBytes);
  dev.memset(a, copy_src.get(), 0, kNodeCopyBytes);
  for (const NodeVariant& v : node_variants()) {
    // Each kernel's own events, each timed or ordering as the variant first records it.
    std::vector<std::vector<std::unique_ptr<Event>>> ev(v.kernels);
    for (auto& e : ev) {
      e.resize(kNodeEvents);
      for (const auto* steps : {&v.before, &v.after})
        for (const NodeStep& st : *steps)
          if ((st.kind == NodeStep::kRecordTimed || st.kind == NodeStep::kRecordOrdering) && !e[st.event])
            e[st.event] = dev.create_event(st.kind == NodeStep::kRecordTimed ? EventUse::kTimed : EventUse::kOrdering);
    }
    auto run = [&](int i, const std::vector<NodeStep>& steps) {
      for (const NodeStep& st : steps) {
        Stream& s = *streams[static_cast<int>(st.stream)];
        switch (st.kind) {
          case NodeStep::kRecordTimed:
          case NodeStep::kRecordOrdering: ev[i][st.event]->record(s); break;
          case NodeStep::kWaitEvent: dev.stream_wait_event(s, *ev[i][st.event]); break;
          case NodeStep::kWriteWord: dev.write_value64(s, word.as<uint64_t>(), 1); break;
          case NodeStep::kWaitWord: dev.wait_value64_geq(s, word.as<uint64_t>(), 1, label); break;
        }
      }
    };
    auto issue = [&] {
      for (int i = 0; i < v.kernels; ++i) {
        const bool steps = has_steps(v, i);
        if (steps) run(i, v.before);
        if (v.work == NodeWork::kCopy)
          dev.copy_2d(a, copy_dst.get(), kNodeCopyRow, copy_src.get(), kNodeCopyRow, kNodeCopyRow,
                      kNodeCopyBytes / kNodeCopyRow);
        else
          launch_delay(cu(a), 0.0);
        if (steps) run(i, v.after);
      }
    };
    const NodeTimes t = median_node_times(dev, a, issue, v.chains, v.trials, v.gate_multiple * kGateMs, v.kernels);
    b.synchronize();
    hp->synchronize();
    const std::string shape = std::to_string(v.kernels) + " kernels, " + std::to_string(kGraphLaunches) + " launches";
    rows.push_back({"latency", std::string(kGraphRows) + ": " + v.what, shape, t.graph_us / 1e3, t.graph_us, "us",
                    kNoBound, "GPU time per kernel in a graph"});
    rows.push_back({"latency", std::string(kStreamRows) + ": " + v.what, shape, t.stream_us / 1e3, t.stream_us, "us",
                    kNoBound, "GPU time per kernel issued op by op (enqueued ahead of the GPU; host enqueue " +
                                  std::to_string(t.host_us).substr(0, 5) + " us per kernel)"});
  }
}

// --- the latency floor's own ops (issue #19: the near-empty layer is modelled too slow as a
// graph and too fast op by op, and its stage medians cannot say which op is long). Each op
// of the floor deck (256 tokens, 8 heads of 64, bf16, hidden 512), at the shape its layer runs
// it, kGraphKernels times in a row: issued op by op behind a gate (the GPU's time per op, the
// host's enqueue per op) and captured once as a graph, launched kGraphLaunches times behind a
// gate (the GPU's time per op as a node); each figure the median of kFloorOpTrials such runs.
// Three rows per op: graph, streams, host. The scatter's ops at one rank are among them (the
// model's lean graph floor was long by about NCCL's fixed cost and the handshake's memory
// operations, which no row timed as graph nodes; docs/model.md).
void floor_op_rows(Device& dev, Stream& a, LayerKernels& kern, std::vector<Row>& rows) {
  constexpr int64_t M = 256, H = 8, D = 64, C = H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto qkv = random_buffer(dev, a, kern, static_cast<size_t>(M * 3 * C), DType::kBF16, 21);
  auto x = random_buffer(dev, a, kern, static_cast<size_t>(M * C), DType::kBF16, 22);
  auto w = random_buffer(dev, a, kern, static_cast<size_t>(C * 3 * C), DType::kBF16, 23);
  auto q = random_buffer(dev, a, kern, static_cast<size_t>(M * C), DType::kBF16, 24);
  auto k = random_buffer(dev, a, kern, static_cast<size_t>(M * C), DType::kBF16, 25);
  auto v = random_buffer(dev, a, kern, static_cast<size_t>(M * C), DType::kBF16, 26);
  auto o = dev.alloc(static_cast<size_t>(M * C) * 2);
  auto f32 = dev.alloc(static_cast<size_t>(M * C) * 4);
  auto dst = dev.alloc(static_cast<size_t>(M * C) * 2);
  std::vector<float> g(static_cast<size_t>(C), 1.0f);
  auto gamma = dev.alloc(g.size() * 4);
  dev.copy_to_device(gamma.get(), g.data(), g.size() * 4);
  static_assert(M * 3 * C * 2 == kFloorOpNcclOneRankBytes, "the model reads the one-rank all-to-all's size");
  auto recv = dev.alloc(static_cast<size_t>(kFloorOpNcclOneRankBytes));  // the one-rank all-to-all's
  auto word = dev.alloc(sizeof(uint64_t));
  const uint64_t zero = 0;
  dev.copy_to_device(word.get(), &zero, sizeof(zero));
  std::unique_ptr<bench::OneRankNccl> nccl;
  std::string nccl_why;
  try {
    nccl = std::make_unique<bench::OneRankNccl>();
  } catch (const std::exception& e) {
    nccl_why = e.what();
  }
  auto view = [&](int j) {  // Q (j = 0) or K (j = 1) of the fused QKV rows
    QkView vw;
    vw.data = static_cast<unsigned char*>(qkv.get()) + j * C * 2;
    vw.row_pitch = 3 * C;
    vw.batch = 1;
    vw.tokens_per_batch = M;
    vw.pos_offset = 0;
    vw.heads = static_cast<int>(H);
    vw.head_dim = static_cast<int>(D);
    return vw;
  };
  NormRopeParams p;
  p.norm = NormKind::kRmsPerHead;
  p.rope = RopeKind::k1D;
  p.gamma = gamma.as<float>();
  struct Op {
    const char* name;  // kFloorOp* (lib/report/model_bench.hpp): the model reads the host rows by it
    std::string shape;
    std::function<void()> issue;
    bool attention = false;  // its row names the path taken (cuDNN SDPA, or the reference kernel)
  };
  const Op ops[] = {
      {kFloorOpQkProjection, "M256 N1024 K512 bf16",
       [&] { kern.gemm(a, x.get(), C, w.get(), 3 * C, qkv.get(), 3 * C, M, 2 * C, C, DType::kBF16, DType::kBF16); }},
      {kFloorOpOutProjection, "M256 N512 K512 bf16 -> fp32",
       [&] { kern.gemm(a, o.get(), C, w.get(), 3 * C, f32.get(), C, M, C, C, DType::kBF16, DType::kFP32); }},
      {kFloorOpNormRope, "M256 H8 D64 bf16 fused, rms",
       [&] { kern.norm_rope_qk(a, view(0), p, view(1), p, DType::kBF16); }},
      {kFloorOpAttention, "B1 H8 S256 D64 bf16",
       [&] { kern.attention(a, q.get(), k.get(), v.get(), o.get(), 1, M, static_cast<int>(H), static_cast<int>(D),
                            DType::kBF16, scale); },
       true},
      {kFloorOpConversion, "131072 elements",
       [&] { kern.convert_from_f32(a, f32.as<float>(), dst.get(), M * C, DType::kBF16); }},
      {kFloorOpCopy, "1024 B x 256 rows, pitch 3072 B",
       [&] { dev.copy_2d(a, dst.get(), C * 2, qkv.as<unsigned char>() + 2 * C * 2, 3 * C * 2, C * 2, M); }},
      // The handshake's ready at one rank: its own word written, then waited on (the value
      // is reached at once: what is timed is the two operations' fixed cost).
      {kFloorOpMemop, "one 64-bit word, write then wait >= 1",
       [&] {
         dev.write_value64(a, word.as<uint64_t>(), 1);
         dev.wait_value64_geq(a, word.as<uint64_t>(), 1, WaitLabel{0, "the benchmark's own word"});
       }},
      // The nccl transport's exchange of the floor's Q, K and V at Ulysses1: one all-to-all.
      {kFloorOpNcclOneRank, "768 KB (Q, K and V of 256 tokens x 512, bf16)",
       [&] { nccl->all_to_all(a.native(), qkv.get(), recv.get(), static_cast<size_t>(kFloorOpNcclOneRankBytes)); }},
  };
  for (const Op& op : ops) {
    if (std::string(op.name) == kFloorOpNcclOneRank && !nccl) {
      rows.push_back({"latency", floor_op_what(kGraphRows, op.name), op.shape, 0, 0, "", kNoBound,
                      "not measured: " + nccl_why});
      continue;
    }
    op.issue();  // warm: plans, heuristics and workspaces before any timing or capture
    a.synchronize();
    // One chain op by op: twenty library calls' enqueue stays inside the gate; the median of
    // kFloorOpTrials such runs (the model reads the host figure as a typical call's cost).
    const NodeTimes t = median_node_times(
        dev, a, [&] { for (int i = 0; i < kGraphKernels; ++i) op.issue(); }, 1, kFloorOpTrials);
    const std::string n = std::to_string(kGraphKernels) + " in a row, " + op.shape;
    const std::string path = op.attention ? " (" + cuda_attention_path(kern) + ")" : "";
    rows.push_back({"latency", floor_op_what(kGraphRows, op.name), n, t.graph_us / 1e3, t.graph_us, "us", kNoBound,
                    "GPU time per op as a node of a graph" + path});
    rows.push_back({"latency", floor_op_what(kStreamRows, op.name), n, t.stream_us / 1e3, t.stream_us, "us", kNoBound,
                    "GPU time per op issued op by op (enqueued ahead of the GPU)"});
    rows.push_back({"latency", floor_op_what(kHostRows, op.name), n, t.host_us / 1e3, t.host_us, "us", kNoBound,
                    "host enqueue per op, op by op (median of " + std::to_string(kFloorOpTrials) + " chains)"});
  }
}

// --- allocation: what a transport's target costs when it is not cached (the no-target-cache
// ablation allocates and frees Q's, K's and V's targets every layer). For each size: the
// host's time to allocate and to free, on an idle GPU and while a kernel of kBusyMs holds
// the GPU (a call that waits for the device takes most of what is left of it), and the
// GPU's idle gap when the next kernel is enqueued only after the call returns. vmm:
// cuMemCreate + reserve + map + access (alloc_fd_shareable), unmap + free + release;
// ipc: cudaMalloc of exportable memory, cudaFree.
constexpr double kBusyMs = 5.0;
using Clock = std::chrono::steady_clock;
double since_ms(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// One alloc row: the host time of `call` made while a kBusyMs kernel runs on `a`, and how
// long the GPU then sat idle before the next kernel (a call that waits for the device takes
// the host ~kBusyMs).
void beside_kernel_row(Device& dev, Stream& a, const std::string& what, const std::string& shape,
                       const std::function<void()>& call, std::vector<Row>& rows) {
  a.synchronize();
  auto e0 = dev.create_event(), e1 = dev.create_event();
  launch_delay(cu(a), kBusyMs);
  e0->record(a);
  const auto t0 = Clock::now();
  call();
  const double host = since_ms(t0);
  launch_delay(cu(a), 0.01);
  e1->record(a);
  a.synchronize();
  const double gap = dev.elapsed_ms(*e0, *e1) - 0.01;
  rows.push_back({"alloc", what + " beside a " + std::to_string(static_cast<int>(kBusyMs)) + " ms kernel", shape, host,
                  host * 1e3, "us", kNoBound,
                  "host time; the GPU then idle " + std::to_string(gap).substr(0, 6) +
                      " ms before the next kernel (a call that waits for the device: host ~" +
                      std::to_string(static_cast<int>(kBusyMs)) + " ms)"});
}

// The median of the host timings of a resource's calls (5 of each).
double median_ms(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Host time of making a resource (an allocation, a mapping) and of releasing it: the medians
// of 5 of each, after one untimed pair (the first call's one-time costs out of the figures).
template <typename Make>
std::pair<double, double> median_make_release_ms(const Make& make) {
  { auto warm = make(); }
  std::vector<double> mk, rel;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    auto r = make();
    mk.push_back(since_ms(t0));
    t0 = Clock::now();
    r.reset();
    rel.push_back(since_ms(t0));
  }
  return {median_ms(mk), median_ms(rel)};
}

void vmm_import_rows(Device& dev, Stream& a, std::vector<Row>& rows);

// Host time of a target's export (the descriptor made) and, apart, of its import and
// mapping: medians of 5 of each, after one untimed pair. The descriptor is closed by
// import_fd; the mapping's close is not timed here.
std::pair<double, double> median_export_import_ms(Device& dev, const DeviceBuffer& target, size_t bytes) {
  { PeerMapping warm = dev.import_fd(dev.export_fd(target), bytes); }
  std::vector<double> ex, im;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    const int fd = dev.export_fd(target);
    ex.push_back(since_ms(t0));
    t0 = Clock::now();
    PeerMapping m = dev.import_fd(fd, bytes);
    im.push_back(since_ms(t0));
  }
  return {median_ms(ex), median_ms(im)};
}

void alloc_rows(Device& dev, std::vector<Row>& rows) {
  if (!dev.vmm_ineligible_reason().empty())
    std::fprintf(stderr, "bench_kernels: allocation: vmm not measured (%s)\n", dev.vmm_ineligible_reason().c_str());
  auto a = dev.create_stream(StreamPriority::kNormal);
  for (const bool vmm : {true, false}) {
    if (vmm && !dev.vmm_ineligible_reason().empty()) continue;
    const char* kind = vmm ? "vmm" : "ipc";
    for (const size_t mib : {size_t(2), size_t(32), size_t(128)}) {
      const size_t bytes = mib << 20;
      auto make = [&] { return vmm ? dev.alloc_fd_shareable(bytes) : dev.alloc(bytes, true); };
      const auto [al, fr] = median_make_release_ms(make);  // idle GPU
      char shape[32];
      std::snprintf(shape, sizeof(shape), "%zu MiB", mib);
      rows.push_back({"alloc", std::string(kind) + " target: allocate (idle GPU)", shape, al, al * 1e3, "us",
                      kNoBound, "host time, median of 5"});
      rows.push_back({"alloc", std::string(kind) + " target: free (idle GPU)", shape, fr, fr * 1e3, "us",
                      kNoBound, "host time, median of 5"});
      // Beside a kernel: does the call wait for the device, and does the GPU run dry?
      for (const bool do_free : {false, true}) {
        DeviceBuffer b = do_free ? make() : DeviceBuffer();
        beside_kernel_row(dev, *a, std::string(kind) + " target: " + (do_free ? "free" : "allocate"), shape, [&] {
          if (do_free) b.reset();
          else b = make();
        }, rows);
      }
    }
  }
  if (dev.vmm_ineligible_reason().empty()) vmm_import_rows(dev, *a, rows);
}

// --- What vmm without its target cache pays beyond the allocation (the layer's +2 ms in
// flux-2048-u1-ablations-6e0f353 that alloc/free do not explain): a target's descriptor
// exported and imported again (cuMemExportToShareableHandle, cuMemImportFromShareableHandle,
// reserve, map, set access: what a peer does with a fresh target), idle and beside a
// running kernel; the mapping's close; and a copy into a fresh mapping against the same
// copy into it again (first touch).
void vmm_import_rows(Device& dev, Stream& a, std::vector<Row>& rows) {
  for (const size_t mib : {size_t(2), size_t(32), size_t(128)}) {
    const size_t bytes = mib << 20;
    char shape[32];
    std::snprintf(shape, sizeof(shape), "%zu MiB", mib);
    DeviceBuffer target = dev.alloc_fd_shareable(bytes);
    auto src = dev.alloc(bytes);
    dev.memset(a, src.get(), 1, bytes);
    a.synchronize();
    const auto [im, cl] = median_make_release_ms([&] { return dev.import_fd(dev.export_fd(target), bytes); });
    rows.push_back({"alloc", "vmm target: export + import + map (idle GPU)", shape, im, im * 1e3, "us", kNoBound,
                    "host time, median of 5"});
    // The same two calls timed apart: at one rank a target is exported and never imported,
    // so the model needs the export's own share (what vmm without its cache pays there).
    const auto [ex, im_only] = median_export_import_ms(dev, target, bytes);
    rows.push_back({"alloc", "vmm target: export alone (idle GPU)", shape, ex, ex * 1e3, "us", kNoBound,
                    "host time of cuMemExportToShareableHandle, median of 5"});
    rows.push_back({"alloc", "vmm target: import + map alone (idle GPU)", shape, im_only, im_only * 1e3, "us",
                    kNoBound, "host time of import, reserve, map, set access, median of 5"});
    rows.push_back({"alloc", "vmm target: close the imported mapping (idle GPU)", shape, cl, cl * 1e3, "us",
                    kNoBound, "host time, median of 5"});
    // What the layer does with each target at one rank without the cache: a fresh allocation
    // exported once, its descriptor closed, the allocation freed. The rows above export one
    // allocation again and again (after a first, untimed export), and free allocations never
    // exported.
    {
      std::vector<double> ex, cl, fr;
      for (int i = 0; i < 6; ++i) {
        DeviceBuffer fresh = dev.alloc_fd_shareable(bytes);
        auto t0 = Clock::now();
        const int fd = dev.export_fd(fresh);
        const double e = since_ms(t0);
        t0 = Clock::now();
        dev.close_export(fd, bytes);
        const double c = since_ms(t0);
        t0 = Clock::now();
        fresh.reset();
        const double f = since_ms(t0);
        if (i == 0) continue;  // the first of the six: one-time costs
        ex.push_back(e), cl.push_back(c), fr.push_back(f);
      }
      rows.push_back({"alloc", "vmm target: export of a fresh allocation (idle GPU)", shape, median_ms(ex),
                      median_ms(ex) * 1e3, "us", kNoBound, "host time of its first export, median of 5"});
      rows.push_back({"alloc", "vmm target: close of that descriptor (idle GPU)", shape, median_ms(cl),
                      median_ms(cl) * 1e3, "us", kNoBound, "host time, median of 5"});
      rows.push_back({"alloc", "vmm target: free of an exported allocation (idle GPU)", shape, median_ms(fr),
                      median_ms(fr) * 1e3, "us", kNoBound, "host time, median of 5"});
      DeviceBuffer fresh = dev.alloc_fd_shareable(bytes);
      int fd = -1;
      beside_kernel_row(dev, a, "vmm target: export of a fresh allocation", shape,
                        [&] { fd = dev.export_fd(fresh); }, rows);
      dev.close_export(fd, bytes);
    }
    for (const bool do_close : {false, true}) {
      PeerMapping m = do_close ? dev.import_fd(dev.export_fd(target), bytes) : PeerMapping();
      beside_kernel_row(dev, a,
                        std::string("vmm target: ") + (do_close ? "close the imported mapping" : "export + import + map"),
                        shape, [&] {
                          if (do_close) m.reset();
                          else m = dev.import_fd(dev.export_fd(target), bytes);
                        }, rows);
    }
    // First touch: a copy into a mapping just made, then the same copy again.
    PeerMapping m = dev.import_fd(dev.export_fd(target), bytes);
    double first = 0, again = 0;
    for (double* t : {&first, &again}) {
      auto e0 = dev.create_event(), e1 = dev.create_event();
      e0->record(a);
      dev.copy_2d(a, m.get(), bytes, src.get(), bytes, bytes, 1);
      e1->record(a);
      a.synchronize();
      *t = dev.elapsed_ms(*e0, *e1);
    }
    rows.push_back({"alloc", "vmm target: first copy into a fresh mapping", shape, first, 2.0 * bytes / first * 1e-9,
                    "TB/s", kNoBound, "GPU time; bytes = read+write"});
    rows.push_back({"alloc", "vmm target: the same copy again", shape, again, 2.0 * bytes / again * 1e-9, "TB/s",
                    kNoBound, "GPU time; bytes = read+write"});
  }
}

// GPU 0 <-> GPU 1 over cudaMemcpy2DAsync, each device's copy on its own stream: one
// direction, then both at once (what each rank of a Ulysses2 scatter does). The strided
// source is the K/V view of a fused QKV buffer (pitch 3 rows), half of its heads.
void peer_rows(std::vector<Row>& rows) {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) {
    rows.push_back({"peer", "peer link", "", 0, 0, "", kNoBound, "one GPU: not measured"});
    return;
  }
  int can01 = 0, can10 = 0;
  check(cudaDeviceCanAccessPeer(&can01, 0, 1), "cudaDeviceCanAccessPeer");
  check(cudaDeviceCanAccessPeer(&can10, 1, 0), "cudaDeviceCanAccessPeer");
  const int64_t S = 65536;  // tokens per rank
  const size_t row = 24 * 128 * 2, half = row / 2;
  void *src[2], *dst[2];
  cudaStream_t st[2];
  cudaEvent_t e0[2], e1[2];
  for (int d = 0; d < 2; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    if ((d == 0 ? can01 : can10) != 0) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
      if (e != cudaErrorPeerAccessAlreadyEnabled) check(e, "cudaDeviceEnablePeerAccess");
    }
    check(cudaMalloc(&src[d], S * 3 * row), "cudaMalloc");
    check(cudaMemset(src[d], 1, S * 3 * row), "cudaMemset");
    check(cudaMalloc(&dst[d], S * half), "cudaMalloc");
    check(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&e0[d]), "cudaEventCreate");
    check(cudaEventCreate(&e1[d]), "cudaEventCreate");
  }
  // Device d sends the second half of its heads of the V view to device 1 - d.
  auto copy = [&](int d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMemcpy2DAsync(dst[1 - d], half, static_cast<char*>(src[d]) + 2 * row + half, 3 * row, half, S,
                            cudaMemcpyDefault, st[d]),
          "cudaMemcpy2DAsync to peer");
  };
  for (int both = 0; both < 2; ++both) {
    const int senders = both ? 2 : 1, iters = 20;
    for (int i = 0; i < 3; ++i)
      for (int d = 0; d < senders; ++d) copy(d);
    for (int d = 0; d < senders; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamSynchronize(st[d]), "cudaStreamSynchronize");
      check(cudaEventRecord(e0[d], st[d]), "cudaEventRecord");
    }
    for (int i = 0; i < iters; ++i)
      for (int d = 0; d < senders; ++d) copy(d);
    double worst = 0;
    for (int d = 0; d < senders; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaEventRecord(e1[d], st[d]), "cudaEventRecord");
      check(cudaEventSynchronize(e1[d]), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0[d], e1[d]), "cudaEventElapsedTime");
      worst = std::max(worst, static_cast<double>(ms) / iters);
    }
    const double bytes = static_cast<double>(S) * half;
    rows.push_back({"peer", both ? "peer 2D copy, both directions at once" : "peer 2D copy, GPU0 -> GPU1",
                    "S65536 12 of 24x128 bf16 heads, pitch 3 rows", worst, bytes / worst * 1e-6, "GB/s", kNoBound,
                    std::string("per direction; peer access ") + (can01 && can10 ? "yes" : "no (staged)")});
  }
  for (int d = 0; d < 2; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    cudaFree(src[d]);
    cudaFree(dst[d]);
    cudaStreamDestroy(st[d]);
    cudaEventDestroy(e0[d]);
    cudaEventDestroy(e1[d]);
  }
  check(cudaSetDevice(0), "cudaSetDevice");
}

void attention_rows(Device& dev, Stream& s, std::vector<Row>& rows) {
  const int64_t B = 1, S = 16384;
  const int H = 6, D = 128;
  const size_t n = B * S * H * D;
  setenv("ULYSSES_ATTENTION", "reference", 1);
  auto ref = make_cuda_kernels();
  auto q = random_buffer(dev, s, *ref, n, DType::kBF16, 1);
  auto k = random_buffer(dev, s, *ref, n, DType::kBF16, 2);
  auto v = random_buffer(dev, s, *ref, n, DType::kBF16, 3);
  auto o = dev.alloc(n * 2);
  const double flops = 4.0 * B * H * S * S * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::string shape = "B1 H6 S16384 D128 bf16";
  setenv("ULYSSES_ATTENTION", "cudnn", 1);
  auto cudnn = make_cuda_kernels();
  unsetenv("ULYSSES_ATTENTION");
  const double ms_c = time_ms(dev, s, 3, 20, [&] {
    cudnn->attention(s, q.get(), k.get(), v.get(), o.get(), B, S, H, D, DType::kBF16, scale);
  });
  rows.push_back({"attention", "attention (ULYSSES_ATTENTION=cudnn)", shape, ms_c, flops / ms_c * 1e-9, "TFLOP/s",
                  flops / ms_c * 1e-9 / 660.0, cuda_attention_path(*cudnn) + "; of_bound: against the 660 TFLOP/s anchor"});
  const double ms_r = time_ms(dev, s, 1, 3, [&] {
    ref->attention(s, q.get(), k.get(), v.get(), o.get(), B, S, H, D, DType::kBF16, scale);
  }, 1);
  rows.push_back({"attention", "attention (reference kernel)", shape, ms_r, flops / ms_r * 1e-9, "TFLOP/s", kNoBound,
                  cuda_attention_path(*ref)});
}

// --- attention by shape (attention_shapes): cuDNN SDPA at every shipped model layer's
// attention as the largest rank of each Ulysses degree runs it (B1, the model's tokens,
// ceil(heads / U) heads, its head_dim; U = 1, 2, 4, 8), sequences from 4096 to 119k: the
// model's attention profile (model calibrate|validate|loo --rates). A shape that does not
// run on cuDNN gets a row saying so and is not timed further (nor read by the model).
void attention_shape_rows(Device& dev, Stream& s, LayerKernels& kern, std::vector<Row>& rows) {
  struct Shape {
    int64_t seq;
    int heads, head_dim;
    bool operator<(const Shape& o) const {
      return std::tie(head_dim, seq, heads) < std::tie(o.head_dim, o.seq, o.heads);
    }
  };
  std::set<Shape> shapes;
  for (const ModelLayer& m : model_layers())
    for (const auto& res : m.resolutions)
      for (const int u : {1, 2, 4, 8}) shapes.insert({res.second, (m.heads + u - 1) / u, m.head_dim});
  size_t max_n = 0;
  for (const Shape& sh : shapes) max_n = std::max(max_n, static_cast<size_t>(sh.seq) * sh.heads * sh.head_dim);
  auto q = random_buffer(dev, s, kern, max_n, DType::kBF16, 11);
  auto k = random_buffer(dev, s, kern, max_n, DType::kBF16, 12);
  auto v = random_buffer(dev, s, kern, max_n, DType::kBF16, 13);
  auto o = dev.alloc(max_n * 2);
  s.synchronize();
  for (const Shape& sh : shapes) {
    const double flops = 4.0 * sh.heads * static_cast<double>(sh.seq) * static_cast<double>(sh.seq) * sh.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
    auto run = [&] {
      kern.attention(s, q.get(), k.get(), v.get(), o.get(), 1, sh.seq, sh.heads, sh.head_dim, DType::kBF16, scale);
    };
    char shape[64];
    std::snprintf(shape, sizeof(shape), "B1 H%d S%lld D%d bf16", sh.heads, static_cast<long long>(sh.seq), sh.head_dim);
    run();  // which path it takes; also the timing's warm-up
    s.synchronize();
    const std::string path = cuda_attention_path(kern);
    if (path != "cudnn") {
      rows.push_back({"attention", "attention by shape: not on cuDNN", shape, 0, 0, "", kNoBound, path});
      continue;
    }
    // About 20 ms a timing at 700 TFLOP/s, 1 to 20 runs.
    const int iters = static_cast<int>(std::clamp(20e-3 * 700e12 / flops, 1.0, 20.0));
    const double t = time_ms(dev, s, 0, iters, run, 3);
    rows.push_back({"attention", kAttentionShapeRowWhat, shape, t, flops / t * 1e-9, "TFLOP/s", kNoBound,
                    "the model's attention profile (model calibrate|validate|loo --rates)"});
  }
}

void write_h5(const std::string& path, const std::vector<Row>& rows, const std::vector<NormCell>& cells,
              double bound_tbs, const std::string& device, const std::vector<bench::AllToAllPoint>& nccl) {
  auto f = h5::File::create(path);
  if (!cells.empty()) {
    h5::Group g = f.root().create_group("norm_rope_table");
    g.write_attr("device", device);
    g.write_attr("copy_bound_tbs", bound_tbs);
    std::vector<std::string> kind, dtype, layout, kernel;
    std::vector<int64_t> D, H, blocks, blocks_per_sm, warps_per_sm, regs;
    std::vector<double> ms, gbs, of_bound, stream_ms, of_stream, rope_only_ms, bytes, smem_kb, inflight;
    std::vector<double> qk_ms, qk_of_bound, stream1_ms, stream1_of_bound, same_walk_rope;
    std::vector<std::string> qk_kernel;
    for (const auto& c : cells) {
      kind.push_back(c.kind);
      dtype.push_back(c.dtype);
      layout.push_back(c.layout);
      kernel.push_back(c.kernel);
      D.push_back(c.D);
      H.push_back(c.H);
      blocks.push_back(c.occ.blocks);
      blocks_per_sm.push_back(c.occ.blocks_per_sm);
      warps_per_sm.push_back(c.occ.warps_per_sm);
      regs.push_back(c.occ.regs);
      ms.push_back(c.ms);
      gbs.push_back(c.gbs);
      of_bound.push_back(c.of_bound);
      stream_ms.push_back(c.stream_ms);
      of_stream.push_back(c.of_stream);
      rope_only_ms.push_back(c.rope_only_ms);
      bytes.push_back(c.bytes);
      smem_kb.push_back(c.occ.smem_kb);
      inflight.push_back(c.occ.inflight_kb_per_sm);
      qk_ms.push_back(c.qk_ms);
      qk_of_bound.push_back(c.qk_of_bound);
      stream1_ms.push_back(c.stream1_ms);
      stream1_of_bound.push_back(c.stream1_of_bound);
      qk_kernel.push_back(c.qk_kernel);
      same_walk_rope.push_back(c.qk_same_walk_rope_of_bound);
    }
    g.write_attr("qk_one_launch_ms", qk_ms);
    g.write_attr("qk_one_launch_of_bound", qk_of_bound);
    g.write_attr("qk_one_launch_kernel", qk_kernel);
    g.write_attr("qk_same_walk_rope_only_of_bound", same_walk_rope);  // 0: that walk not measured with RoPE only
    g.write_attr("stream_one_launch_ms", stream1_ms);
    g.write_attr("stream_one_launch_of_bound", stream1_of_bound);
    g.write_attr("kind", kind);
    g.write_attr("dtype", dtype);
    g.write_attr("layout", layout);
    g.write_attr("kernel", kernel);
    g.write_attr("head_dim", D);
    g.write_attr("heads", H);
    g.write_attr("ms", ms);
    g.write_attr("gbs", gbs);
    g.write_attr("of_bound", of_bound);
    g.write_attr("stream_ms", stream_ms);
    g.write_attr("of_stream", of_stream);
    g.write_attr("rope_only_ms", rope_only_ms);
    g.write_attr("bytes", bytes);
    g.write_attr("blocks", blocks);
    g.write_attr("blocks_per_sm", blocks_per_sm);
    g.write_attr("warps_per_sm", warps_per_sm);
    g.write_attr("regs", regs);
    g.write_attr("smem_kb_per_block", smem_kb);
    g.write_attr("inflight_kb_per_sm", inflight);
  }
  {
    h5::Group g = f.root().create_group("bench_kernels");
    g.write_attr("device", device);
    g.write_attr("revision", ULYSSES_GIT_REV);
    // The layer's schedules that norm Q and K together do it in one launch (LayerKernels::
    // norm_rope_qk; v-first-split norms them apart): the model's profile reads those rows.
    g.write_attr(kNormRopeLayerLaunchAttr, kNormRopeQkOneLaunch);
    std::vector<std::string> section, what, shape, unit, note;
    std::vector<double> ms, rate, of_bound;
    for (const auto& r : rows) {
      section.push_back(r.section);
      what.push_back(r.what);
      shape.push_back(r.shape);
      unit.push_back(r.unit);
      note.push_back(r.note);
      ms.push_back(r.ms);
      rate.push_back(r.rate);
      of_bound.push_back(r.of_bound);
    }
    g.write_attr("section", section);
    g.write_attr("what", what);
    g.write_attr("shape", shape);
    g.write_attr("unit", unit);
    g.write_attr("note", note);
    g.write_attr("ms", ms);
    g.write_attr("rate", rate);
    g.write_attr("of_bound", of_bound);
  }
  bench::write_alltoall_h5(f, nccl);
  f.close();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  std::string only;  // a comma-separated list of sections, or all
  int nccl_ranks = 0;  // the all-to-all sweep's largest rank count (0: every visible GPU)
  std::vector<std::pair<int, int>> norm_shapes;  // --norm-shapes: (heads, head_dim) in place of the table's
  long long norm_tokens = 16384 + 512;           // --norm-tokens: Q's and K's rows (FLUX.1-dev 2048's)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-o" || a == "--output") && i + 1 < argc) out_path = argv[++i];
    else if (a == "--sections" && i + 1 < argc) only = argv[++i];
    else if (a == "--nccl-ranks" && i + 1 < argc) nccl_ranks = std::atoi(argv[++i]);
    else if (a == "--norm-tokens" && i + 1 < argc) {
      char tail = 0;
      if (std::sscanf(argv[++i], "%lld%c", &norm_tokens, &tail) != 1 || norm_tokens < 1 || norm_tokens > (1 << 17)) {
        std::fprintf(stderr, "bench_kernels: --norm-tokens '%s': not a token count from 1 to %d\n", argv[i], 1 << 17);
        return 2;
      }
    }
    else if (a == "--norm-shapes" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at < list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        int H = 0, D = 0;
        char tail = 0;
        if (std::sscanf(list.substr(at, end - at).c_str(), "%dx%d%c", &H, &D, &tail) != 2 || H < 1 || H > 1024 ||
            D < 2 || D > 512) {
          std::fprintf(stderr, "bench_kernels: --norm-shapes '%s': not HEADSxHEAD_DIM,... (e.g. 40x128,12x128)\n",
                       list.c_str());
          return 2;
        }
        norm_shapes.emplace_back(H, D);
        at = end + 1;
      }
    }
    else {
      std::fprintf(stderr,
                   "usage: bench_kernels [-o FILE.h5] [--sections bounds,attention,attention_shapes,norm,gemm,gemm_shapes,copies,where,latency,alloc,peer,nccl]"
                   " [--nccl-ranks N (0: every GPU)] [--norm-shapes HxD,... (norm: these shapes, not the table's)]"
                   " [--norm-tokens M (norm: M rows of Q and K, not 16896)]\n");
      return 2;
    }
  }
  auto want = [&](const char* s) { return only.empty() || ("," + only + ",").find(std::string(",") + s + ",") != std::string::npos; };
  try {
    std::string why;
    if (cuda_usable_device_count(&why) == 0) {
      std::printf("bench_kernels: no usable CUDA device: %s\n", why.c_str());
      return 0;
    }
    auto dev = make_cuda_device(0);
    dev->set_watchdog_seconds(120);
    auto s = dev->create_stream(StreamPriority::kNormal);
    auto kern = make_cuda_kernels();
    std::vector<Row> rows;
    std::vector<NormCell> cells;
    const double bound = copy_bound_tbs(*dev, *s, rows);
    if (want("attention")) attention_rows(*dev, *s, rows);
    if (want("norm")) norm_rope_rows(*dev, *s, *kern, bound, rows, cells, norm_shapes, norm_tokens);
    if (want("gemm")) gemm_rows(*dev, *s, *kern, rows);
    if (want("gemm_shapes")) gemm_shape_rows(*dev, *s, *kern, rows);
    if (want("attention_shapes")) attention_shape_rows(*dev, *s, *kern, rows);
    if (want("copies")) copy_rows(*dev, *s, bound, rows);
    if (want("where")) where_rows(*dev, rows);
    if (want("latency")) latency_rows(*dev, rows);
    if (want("latency")) {
      auto ga = dev->create_stream(StreamPriority::kNormal), gb = dev->create_stream(StreamPriority::kNormal);
      graph_node_rows(*dev, *ga, *gb, rows);
      floor_op_rows(*dev, *ga, *kern, rows);
    }
    if (want("alloc")) alloc_rows(*dev, rows);
    if (want("peer")) peer_rows(rows);
    std::vector<bench::AllToAllPoint> nccl;
    if (want("nccl")) {
      std::string why;
      nccl = bench::nccl_alltoall_sweep(nccl_ranks, 1024, int64_t{1} << 30, &why);
      if (nccl.empty()) rows.push_back({"nccl", "NCCL all-to-all sweep", "", 0, 0, "", kNoBound, why});
    }
    std::printf("\n%-10s | %-60s | %-34s | %9s | %9s %-8s | %6s | %s\n", "section", "what", "shape", "ms", "rate", "",
                "bound", "note");
    std::printf("%s\n", std::string(170, '-').c_str());
    for (const auto& r : rows) {
      char ob[16] = "";
      if (!std::isnan(r.of_bound)) std::snprintf(ob, sizeof(ob), "%5.1f%%", 100.0 * r.of_bound);
      std::printf("%-10s | %-60s | %-34s | %9.4f | %9.3f %-8s | %6s | %s\n", r.section.c_str(), r.what.c_str(),
                  r.shape.c_str(), r.ms, r.rate, r.unit.c_str(), ob, r.note.c_str());
    }
    if (!cells.empty()) {
      print_norm_table(cells, bound, norm_tokens);
      print_norm_why(cells, bound);
    }
    bench::print_alltoall(nccl);
    std::printf("device: %s; code %s\n", dev->name().c_str(), ULYSSES_GIT_REV);
    if (!out_path.empty()) write_h5(out_path, rows, cells, bound, dev->name(), nccl);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 3;
  }
}
