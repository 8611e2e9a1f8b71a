// The per-rank memory estimate of a case, derived from the buffers the run allocates
// (the memory check before a run: lib/run/run.cpp).
#include "lib/run/memory_estimate.hpp"

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "base/dtype.hpp"
#include "lib/report/report.hpp"

namespace uipc {

// ---------------------------------------------------------------- memory estimate
//
// Notation (docs/math.md, "Shapes"): es = dtype_size(dtype); B batch, S seq_len, H heads,
// D head_dim, C = H*D; U = ulysses (resolved for `world`), tp; Sl = ceil(S/U) (the largest
// shard: splits may be uneven); Ht = H/tp; Ct = Ht*D; M = B*Sl (the most tokens of a rank);
// "M*Ct" below stands for the larger of M*Ct and B*S*ceil(Ht/U)*D (a scatter result: with
// even splits the two are equal, B*S*Hl*D = M*Ct with Hl = Ht/U). P = the number
// of (transport, schedule) pairs, T = repeats*iterations. What is alive, and when, in
// the run driver (lib/run/run.cpp, lib/run/case_runner.cpp) for one case:
//
// Held for the whole case on every rank (per_rank_case):
//   HostLayerData host (lib/layer_data.cpp), fp32: x M*C, w_qkv 3*C*Ct, w_o Ct*C, and
//     2 (gamma) or 4 (LayerNorm: + beta) norm vectors of N = D (C for rms_across_heads)
//   LayerData data (upload_layer_data), es: x M*C, fused w_qkv 3*C*Ct, separate
//     w_q/w_k/w_v 3*C*Ct, w_o Ct*C; norm vectors in fp32
//   ref, this rank's reference rows (distribute_reference): M*C fp32 per step (steps of
//     them), and for steps > 1 the input rows of every step, M*C fp32 each; the outputs of
//     the first exact run of each schedule at every step (what V-major is measured
//     against): schedules*steps*M*C fp32
//   every run's RunResult kept in cr.runs: P*T*steps*world*(kNumStages stage_ms + 1
//     v_overlap_ms) doubles
// One (transport, schedule) pair at a time (pair_peak; the pipeline and transports are
// destroyed at the end of each pair):
//   LayerPipeline (lib/pipeline.cpp): qkv M*3*Ct (fused) or q, k, v 3*M*Ct (separate):
//     3*M*Ct*es either way; attention out M*Ct*es; out_f32 M*C*4; y M*C*es
//   scatter transport, Q, K, V targets (exchange_result_elems = M*Ct each):
//     ipc and vmm (comm/ipc_transport.cpp): 3*M*Ct*es cached targets + 2*U signal words
//     nccl (comm/nccl_transport.cpp): 3*M*Ct*es results + send and recv buffers of
//       chunk*peers = 3*M*Ct*es each: 9*M*Ct*es, counted whatever the case lists (ipc
//       falls back to nccl where it is not eligible)
//     hier (comm/hier_transport.cpp): each target with relays for the other nodes,
//       (1 + f)*M*Ct*es with f = (N-1)/N; hier-vmajor adds for V the last-sent copy and
//       two staging buffers of the relays' size, 3*f*M*Ct*es, and 16 bytes of sums per
//       relay row: 3 + 6f < 9 targets' worth, within nccl's bound (its margin 6/N of
//       M*Ct*es exceeds the sums for any real head slice)
//   gather transport, O: the default (auto) is a separate nccl transport: M*Ct*es result
//     + send/recv M*Ct*es each (ipc: one M*Ct*es target, less); the worst is counted
//   check_parity: the output copied to the host, M*C*es
//   gather_timings: times and flat (iterations*(kNumStages+1) doubles) and `all`
//     (that times world) on every rank
//   simulation mode only, the largest one-at-a-time temporary of the host device (its
//     stream runs one operation at a time; the MPI collectives drain it first):
//     attention's fp32 K^T and V (kernels/host_kernels.cpp): 2*M*Ct*4; gemm's fp32 weight
//     panels: K*N*4 (QKV: C*3*Ct, output projection: Ct*C); the MPI all-to-all's host
//     staging out + in (comm/transport.cpp): 2*3*M*Ct*es (scatter group); the TP
//     all-reduce: mine + same + all = (1 + 2*tp)*M*C*4
//   Per-thread scratch (gemm row packs of 64 rows x K, attention rows) is O(threads*K)
//   and left out; so are MPI's and Kokkos's own buffers.
// Before the pairs, upload_layer_data's staging: the separate-weight block C*Ct fp32
//   plus the largest tensor in es (upload_as); less than pair_peak, but counted in the max.
// Rank 0 only (rank0_extra), on top of per_rank_case:
//   full_ref, the whole reference output: B*S*C fp32, for the whole case
//   and the larger of the phases that do not overlap with the pairs:
//   dense_reference (lib/pipeline.cpp), the whole layer at tp = U = 1: host fp32 x B*S*C,
//     w_qkv 3*C*C, w_o C*C, norms; device x B*S*C*es, weights fused + separate + w_o
//     7*C*C*es; qkv 3*B*S*C*es, the q/k/v copies 3*B*S*C*es, o B*S*C*es, out B*S*C*4,
//     y B*S*C*es, the host copy of y B*S*C*es; simulation mode: attention's
//     2*B*S*C*4 or the QKV gemm's 3*C*C*4 fp32 panels
//   distribute_reference's send buffer: world*B*Sl*C = tp*B*S*C fp32
size_t estimate_case_bytes_per_rank(const Case& c, int world, bool rank0, bool sim_mode) {
  // Saturating arithmetic: a hostile or unvalidated case must give "huge", not wrap.
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  auto mul = [](std::initializer_list<uint64_t> xs) {
    uint64_t r = 1;
    for (uint64_t x : xs)
      if (__builtin_mul_overflow(r, x, &r)) return kMax;
    return r;
  };
  auto add = [](std::initializer_list<uint64_t> xs) {
    uint64_t r = 0;
    for (uint64_t x : xs)
      if (__builtin_add_overflow(r, x, &r)) return kMax;
    return r;
  };
  auto max_of = [](std::initializer_list<uint64_t> xs) {
    uint64_t r = 0;
    for (uint64_t x : xs) r = x > r ? x : r;
    return r;
  };
  auto pos = [](int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : uint64_t{0}; };

  const uint64_t es = dtype_size(c.dtype), f4 = 4, f8 = 8;
  const int tp_i = c.tp > 0 ? c.tp : 1;
  // As Case::ulysses_for, without its division by a tp that may be 0 here.
  int u_i = c.ulysses > 0 ? c.ulysses : (world > 0 ? world : 1) / tp_i;
  if (u_i < 1) u_i = 1;
  const uint64_t B = pos(c.batch), S = pos(c.seq_len), H = pos(c.heads), D = pos(c.head_dim);
  const uint64_t tp = static_cast<uint64_t>(tp_i), U = static_cast<uint64_t>(u_i);
  const uint64_t W = static_cast<uint64_t>(world > 0 ? world : 1);
  const uint64_t C = mul({H, D}), Sl = (S + U - 1) / U, Ht = H / tp, Ct = mul({Ht, D}), M = mul({B, Sl});
  const uint64_t N = c.qk_norm == NormKind::kNone ? 0 : c.qk_norm == NormKind::kRmsAcrossHeads ? C : D;
  const uint64_t norm_vecs = c.qk_norm == NormKind::kLayerPerHead ? 4 : c.qk_norm == NormKind::kNone ? 0 : 2;
  const uint64_t P = mul({c.transports.size(), c.schedules.size(), 1 + c.ablations.size()});
  const uint64_t T = mul({pos(c.repeats), pos(c.iterations)});
  const uint64_t stages = static_cast<uint64_t>(kNumStages) + 1;

  const uint64_t MC = mul({M, C}), MCt = max_of({mul({M, Ct}), mul({B, S, (Ht + U - 1) / U, D})}),
                 CCt = mul({C, Ct});
  const uint64_t norms = mul({norm_vecs, N, f4});

  const uint64_t host_data = add({mul({add({MC, mul({3, CCt}), CCt}), f4}), norms});
  const uint64_t device_data = add({mul({add({MC, mul({3, CCt}), mul({3, CCt}), CCt}), es}), norms});
  const uint64_t steps = static_cast<uint64_t>(c.steps > 0 ? c.steps : 1);
  const uint64_t ref_shard = add({mul({steps, MC, f4}), steps > 1 ? mul({steps, MC, f4}) : 0,
                                  mul({c.schedules.size(), steps, MC, f4})});
  const uint64_t results = mul({P, T, steps, W, stages, f8});
  const uint64_t per_rank_case = add({host_data, device_data, ref_shard, results});

  // nccl's buffers bound the scatter whatever the case lists: ipc falls back to nccl
  // where it is not eligible, and eligibility is known only once the devices are up.
  const uint64_t scatter = mul({9, MCt, es});
  const uint64_t gather = mul({3, MCt, es});
  const uint64_t pipeline = add({mul({3, MCt, es}), mul({MCt, es}), mul({MC, f4}), mul({MC, es})});
  const uint64_t parity = mul({MC, es});
  const uint64_t timings = add({mul({pos(c.iterations), stages, f8}), mul({pos(c.iterations), stages, f8}),
                                mul({pos(c.iterations), stages, W, f8})});
  uint64_t sim_tmp = 0;
  if (sim_mode) {
    sim_tmp = max_of({mul({2, MCt, f4}), mul({3, CCt, f4}), mul({2, 3, MCt, es}),
                      tp > 1 ? mul({add({1, mul({2, tp})}), MC, f4}) : 0});
  }
  const uint64_t pair_peak = add({pipeline, scatter, gather, parity, timings, sim_tmp});
  const uint64_t upload_staging = add({mul({CCt, f4}), mul({max_of({MC, mul({3, CCt})}), es})});

  uint64_t total = add({per_rank_case, max_of({pair_peak, upload_staging})});
  if (!rank0) return static_cast<size_t>(total);

  const uint64_t BSC = mul({B, S, C}), CC = mul({C, C});
  const uint64_t full_ref = mul({BSC, f4});
  const uint64_t dense_host = add({mul({add({BSC, mul({3, CC}), CC}), f4}), mul({norm_vecs, N, f4})});
  const uint64_t dense_device =
      add({mul({BSC, es}), mul({7, CC, es}), mul({norm_vecs, N, f4}), mul({3, BSC, es}), mul({3, BSC, es}),
           mul({BSC, es}), mul({BSC, f4}), mul({BSC, es}), mul({BSC, es})});
  const uint64_t dense_tmp = sim_mode ? max_of({mul({2, BSC, f4}), mul({3, CC, f4})}) : 0;
  const uint64_t dense_upload = add({mul({CC, f4}), mul({max_of({BSC, mul({3, CC})}), es})});
  const uint64_t dense_peak = add({dense_host, dense_device, max_of({dense_tmp, dense_upload})});
  const uint64_t send_buf = mul({tp, BSC, f4});
  // During the dense reference the pairs have not started; during the pairs it is gone.
  total = add({per_rank_case, full_ref, max_of({pair_peak, upload_staging, dense_peak, send_buf})});
  return static_cast<size_t>(total);
}

}  // namespace uipc
