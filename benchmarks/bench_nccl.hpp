// bench_kernels' NCCL all-to-all sweep, like nccl-tests' alltoall_perf: every visible GPU
// from 2 up to all of them driven by this one process (ncclCommInitAll, one group call
// per all-to-all), message sizes 1 KB .. 1 GB, time, algorithm and bus bandwidth. What
// the machine model assumes for NCCL (docs/model.md, "NCCL as it scales"), measured.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/hdf5/hdf5_file.hpp"

namespace uipc::bench {

struct AllToAllPoint {
  int ranks = 0;
  int64_t bytes = 0;     // each rank's send buffer (nccl-tests' "size"): bytes / ranks to each peer
  double us = 0;         // median over repetitions of the mean time of one all-to-all, slowest rank
  double algbw = 0;      // GB/s: bytes / time
  double busbw = 0;      // GB/s: algbw x (ranks - 1) / ranks (nccl-tests' definition)
};

// Runs the sweep on 2, 3, ... up to `max_ranks` (0: every visible GPU) of the visible
// GPUs, sizes doubling from `min_bytes` to `max_bytes`. Empty with fewer than 2 GPUs;
// `why` then says so. Throws RuntimeError on a CUDA or NCCL failure.
std::vector<AllToAllPoint> nccl_alltoall_sweep(int max_ranks, int64_t min_bytes, int64_t max_bytes, std::string* why);

// Prints the sweep as nccl-tests does (one block per rank count).
void print_alltoall(const std::vector<AllToAllPoint>& points);

// Writes the sweep as group /nccl_alltoall (arrays ranks, bytes, us, algbw_gbs, busbw_gbs)
// into `file`.
void write_alltoall_h5(const h5::File& file, const std::vector<AllToAllPoint>& points);

// A one-rank NCCL communicator on the current device: what the nccl transport runs at
// Ulysses1, where its all-to-all is a copy to the rank itself. For the latency section's
// floor-op rows (NCCL's fixed cost at one rank, op by op and as a graph node).
class OneRankNccl {
 public:
  OneRankNccl();  // throws RuntimeError when NCCL cannot set it up
  ~OneRankNccl();
  OneRankNccl(const OneRankNccl&) = delete;
  OneRankNccl& operator=(const OneRankNccl&) = delete;
  // ncclAlltoAll of `bytes` from send to recv on `stream`, the call the layer makes.
  void all_to_all(void* stream, const void* send, void* recv, size_t bytes);

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace uipc::bench
