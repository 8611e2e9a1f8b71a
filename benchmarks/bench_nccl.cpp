// bench_kernels' NCCL all-to-all sweep (benchmarks/bench_nccl.hpp), after nccl-tests'
// alltoall_perf: send/recv pairs to every peer inside one NCCL group, out of place,
// bytes / ranks to each peer, busbw = algbw x (n - 1) / n.
#include "benchmarks/bench_nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/device/cuda_check.hpp"

namespace uipc::bench {
namespace {

// One all-to-all of `bytes` per rank on every communicator, issued as nccl-tests does.
void all_to_all(const std::vector<ncclComm_t>& comms, const std::vector<cudaStream_t>& st,
                const std::vector<char*>& send, const std::vector<char*>& recv, int64_t bytes) {
  const int n = static_cast<int>(comms.size());
  const size_t chunk = static_cast<size_t>(bytes / n);
  UIPC_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      UIPC_NCCL_CHECK(ncclSend(send[r] + p * chunk, chunk, ncclInt8, p, comms[r], st[r]));
      UIPC_NCCL_CHECK(ncclRecv(recv[r] + p * chunk, chunk, ncclInt8, p, comms[r], st[r]));
    }
  UIPC_NCCL_CHECK(ncclGroupEnd());
}

void sweep_ranks(int n, int64_t min_bytes, int64_t max_bytes, std::vector<AllToAllPoint>& out) {
  std::vector<int> devs(n);
  for (int i = 0; i < n; ++i) devs[i] = i;
  std::vector<ncclComm_t> comms(n);
  UIPC_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devs.data()));
  std::vector<cudaStream_t> st(n);
  std::vector<cudaEvent_t> e0(n), e1(n);
  std::vector<char*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    UIPC_CUDA_CHECK(cudaSetDevice(r));
    UIPC_CUDA_CHECK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    UIPC_CUDA_CHECK(cudaEventCreate(&e0[r]));
    UIPC_CUDA_CHECK(cudaEventCreate(&e1[r]));
    UIPC_CUDA_CHECK(cudaMalloc(&send[r], max_bytes));
    UIPC_CUDA_CHECK(cudaMalloc(&recv[r], max_bytes));
    UIPC_CUDA_CHECK(cudaMemset(send[r], r + 1, max_bytes));
  }
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const int64_t b = bytes / n * n;  // whole chunks, as nccl-tests rounds its count
    if (b == 0) continue;
    // Fewer iterations for large sizes: about 0.2 s of traffic a size at ~300 GB/s.
    const int iters = static_cast<int>(std::clamp<int64_t>(int64_t{60} * 1000 * 1000 * 1000 / b, 5, 100));
    for (int w = 0; w < 3; ++w) all_to_all(comms, st, send, recv, b);
    std::vector<double> reps;
    for (int rep = 0; rep < 5; ++rep) {
      for (int r = 0; r < n; ++r) {
        UIPC_CUDA_CHECK(cudaSetDevice(r));
        UIPC_CUDA_CHECK(cudaStreamSynchronize(st[r]));
      }
      for (int r = 0; r < n; ++r) {
        UIPC_CUDA_CHECK(cudaSetDevice(r));
        UIPC_CUDA_CHECK(cudaEventRecord(e0[r], st[r]));
      }
      for (int i = 0; i < iters; ++i) all_to_all(comms, st, send, recv, b);
      double worst = 0;
      for (int r = 0; r < n; ++r) {
        UIPC_CUDA_CHECK(cudaSetDevice(r));
        UIPC_CUDA_CHECK(cudaEventRecord(e1[r], st[r]));
        UIPC_CUDA_CHECK(cudaEventSynchronize(e1[r]));
        float ms = 0;
        UIPC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0[r], e1[r]));
        worst = std::max(worst, 1e3 * ms / iters);
      }
      reps.push_back(worst);
    }
    std::sort(reps.begin(), reps.end());
    AllToAllPoint p;
    p.ranks = n;
    p.bytes = b;
    p.us = reps[reps.size() / 2];
    p.algbw = static_cast<double>(b) / p.us * 1e-3;  // bytes per us -> GB/s
    p.busbw = p.algbw * (n - 1) / n;
    out.push_back(p);
  }
  for (int r = 0; r < n; ++r) {
    UIPC_CUDA_CHECK(cudaSetDevice(r));
    cudaFree(send[r]);
    cudaFree(recv[r]);
    cudaEventDestroy(e0[r]);
    cudaEventDestroy(e1[r]);
    cudaStreamDestroy(st[r]);
    ncclCommDestroy(comms[r]);
  }
  UIPC_CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace

std::vector<AllToAllPoint> nccl_alltoall_sweep(int max_ranks, int64_t min_bytes, int64_t max_bytes, std::string* why) {
  std::vector<AllToAllPoint> out;
  int visible = 0;
  UIPC_CUDA_CHECK(cudaGetDeviceCount(&visible));
  const int top = max_ranks > 0 ? std::min(max_ranks, visible) : visible;
  if (top < 2) {
    *why = "one GPU: no all-to-all between GPUs to measure";
    return out;
  }
  for (int n = 2; n <= top; ++n) sweep_ranks(n, min_bytes, max_bytes, out);
  return out;
}

OneRankNccl::OneRankNccl() {
  int dev = 0;
  UIPC_CUDA_CHECK(cudaGetDevice(&dev));
  UIPC_NCCL_CHECK(ncclCommInitAll(&comm_, 1, &dev));
}

OneRankNccl::~OneRankNccl() {
  if (comm_) ncclCommDestroy(comm_);
}

void OneRankNccl::all_to_all(void* stream, const void* send, void* recv, size_t bytes) {
  UIPC_NCCL_CHECK(ncclAlltoAll(send, recv, bytes, ncclUint8, comm_, static_cast<cudaStream_t>(stream)));
}

void print_alltoall(const std::vector<AllToAllPoint>& points) {
  int last = 0;
  for (const AllToAllPoint& p : points) {
    if (p.ranks != last) {
      std::printf("\n# NCCL all-to-all, %d ranks (one process, ncclCommInitAll; bytes per rank, out of place)\n", p.ranks);
      std::printf("# %12s %12s %10s %10s\n", "size (B)", "time (us)", "algbw", "busbw (GB/s)");
      last = p.ranks;
    }
    std::printf("  %12lld %12.2f %10.2f %10.2f\n", static_cast<long long>(p.bytes), p.us, p.algbw, p.busbw);
  }
}

void write_alltoall_h5(const h5::File& file, const std::vector<AllToAllPoint>& points) {
  h5::Group g = file.root().create_group("nccl_alltoall");
  std::vector<int64_t> ranks, bytes;
  std::vector<double> us, algbw, busbw;
  for (const AllToAllPoint& p : points) {
    ranks.push_back(p.ranks);
    bytes.push_back(p.bytes);
    us.push_back(p.us);
    algbw.push_back(p.algbw);
    busbw.push_back(p.busbw);
  }
  g.write_attr("definition", "nccl-tests alltoall_perf: size = bytes per rank, algbw = size / time, busbw = algbw (n-1)/n");
  if (points.empty()) return;
  const std::vector<int64_t> dims = {static_cast<int64_t>(points.size())};
  g.write_dataset("ranks", dims, ranks.data());
  g.write_dataset("bytes", dims, bytes.data());
  g.write_dataset("us", dims, us.data());
  g.write_dataset("algbw_gbs", dims, algbw.data());
  g.write_dataset("busbw_gbs", dims, busbw.data());
}

}  // namespace uipc::bench
