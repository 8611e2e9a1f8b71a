// Which walk 16-bit LayerNorm's norm+RoPE kernel takes where the launcher picks (power-of-two
// lane groups, a row that fits shared memory twice): the shared-memory staged walk, which
// keeps a whole row in flight per warp, or the register walk pipelined by 4 passes, which
// keeps less in flight at less cost per byte. Which wins depends on how many bytes a
// multiprocessor must keep in flight to reach its share of the memory bandwidth, so the rule
// is the device's peak memory bandwidth per SM. Measured with Q and K in one launch
// (bench_kernels' "16-bit LayerNorm, Q and K in one launch" table, % of the copy bound):
// - one H200 (4.8 TB/s, 132 SMs: 36 GB/s an SM; docs/measured/2026-12-05-h200-9d2ed1a):
//   staged 70.9-76.0, pipelined 66.7-71.5: staged ahead by 1.2-2.3 points at bf16, 6.5-7.1 fp16;
// - one H100 (3.35 TB/s, 132 SMs: 25 GB/s an SM; docs/measured/2026-12-05-h100-27d7ca2):
//   pipelined 81.5-87.6, staged 79.3-83.5: pipelined ahead by 3.0-7.3 points at bf16, 0.1-3.4 fp16.
//   Since (93ad383, docs/measured/2026-12-05-h100-layernorm: the pick's first GPU run, which
//   read 3352 GB/s and took pipelined 4; fp16's pipelined walk held to 5 blocks an SM, the
//   staged walk's statistics in one reduction): pipelined 85.4-87.5 (fp16 85.7-86.8), staged
//   78.9-82.0. Neither change has run on an H200: its figures above are of the code before.
// The threshold lies between the two GPUs measured; a GPU between them is not measured.
#pragma once

namespace uipc {

// Peak memory bandwidth, GB/s, from the device's memory clock (kHz) and bus width (bits):
// double data rate over the bus (H200: 3201 MHz x 6144 bits = 4917; H100 SXM: 2619 MHz x
// 5120 bits = 3352).
inline double peak_memory_gbs(int memory_clock_khz, int bus_width_bits) {
  return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) * 1e-9;
}

// GB/s of peak memory bandwidth per SM above which the staged walk is the pick.
constexpr double kStagedWalkMinGbsPerSm = 30.0;

// Whether 16-bit LayerNorm takes the staged walk on a GPU of this peak memory bandwidth
// (GB/s) and SM count; unknown figures (0) keep the staged walk, the pick before the rule.
inline bool staged_walk_pays(double peak_memory_gbs, int sms) {
  if (peak_memory_gbs <= 0 || sms <= 0) return true;
  return peak_memory_gbs / sms > kStagedWalkMinGbsPerSm;
}

}  // namespace uipc
