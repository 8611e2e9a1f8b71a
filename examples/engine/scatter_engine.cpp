// A minimal engine on the ulysses_ipc library (docs/library.md): each step is one
// attention layer's exchanges. The "projection" writes this rank's tokens as rows
// [Q | K | V] (row pitch 3*H*D, as a fused QKV projection leaves them); V goes out first,
// then Q, then K carrying the group's barrier; the "attention" stream waits for the
// three, and every element is checked against an independent reference (the value each
// element of the global tensor must have). This rank's heads of V then stand in for the
// attention output and go back by the output gather, which must give back the V rows
// this rank produced. Every step has fresh values, so stale targets would show.
//
//   mpirun -np 2 scatter_engine [--device sim|cuda] [--transport ipc|vmm|nccl|hier] [--steps N]
//                               [--ranks-per-node N]   (declared nodes, e.g. for hier on one machine)
//
// Exit 0 when every element of every step matched on every rank, 1 on a mismatch,
// 2 for bad arguments, 3 when the library raised an error.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ulysses_ipc/ulysses_ipc.hpp>

namespace {

namespace uipc = ulysses_ipc;

// Element (b, s, h, d) of tensor j (0 Q, 1 K, 2 V) at step t of the global (B, S, H, D)
// tensors: an integer below 2^24 (exact in fp32), different for every element.
float value(uint64_t seed, int t, int j, int64_t b, int64_t s, int64_t h, int64_t d) {
  uint64_t x = seed ^ (((((static_cast<uint64_t>(t) * 3 + j) * 1009 + b) * 1000003 + s) * 4099 + h) * 521 + d);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40);
}

struct Args {
  std::string device = "sim", transport = "ipc";
  int steps = 3;
  int ranks_per_node = 0;  // 0: the ranks sharing a host
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (opt == "--device" && (v == "sim" || v == "cuda")) a.device = v;
    else if (opt == "--transport") a.transport = v;
    else if (opt == "--steps" && std::atoi(v.c_str()) > 0) a.steps = std::atoi(v.c_str());
    else if (opt == "--ranks-per-node" && std::atoi(v.c_str()) > 0) a.ranks_per_node = std::atoi(v.c_str());
    else return false;
  }
  return true;
}

// The layer's sizes: every rank holds Sl tokens of the S = Sl*P sequence and Hl = 3 of the
// H = 3*P heads after the scatter.
struct Sizes {
  int64_t B = 2, Sl = 24, S = 0, D = 32;
  int H = 0, Hl = 3;
  int64_t row = 0;  // one of Q, K, V in a token row (H*D)
  size_t qkv_elems = 0, hp_elems = 0;
  explicit Sizes(int P) : S(Sl * P), H(3 * P), row(static_cast<int64_t>(3 * P) * D) {
    qkv_elems = static_cast<size_t>(B * Sl * 3 * row);
    hp_elems = static_cast<size_t>(B * S * Hl * D);
  }
};

// Elements compared with the reference, and how many differed.
struct Tally {
  long long mismatches = 0, checked = 0;
  void count(float got, float want) {
    mismatches += got != want;
    ++checked;
  }
};

// This rank's device: the simulated one, or one GPU per rank where there are enough (ranks
// share them round robin otherwise: functional checks only, their copies are time-sliced).
uipc::Device make_device(const Args& args) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_rank = 0;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  const int gpus = args.device == "cuda" ? uipc::Device::cuda_device_count() : 0;
  if (args.device == "cuda" && gpus == 0) throw uipc::Error(uipc::ErrorKind::kBadInput, "--device cuda: no usable GPU");
  return args.device == "sim" ? uipc::Device::simulated(MPI_COMM_WORLD) : uipc::Device::cuda(local_rank % gpus);
}

// The projection's output at step t: this rank's tokens s = rank*Sl + sl as rows [Q | K | V].
void write_projection(uipc::Device& dev, uipc::Buffer& qkv, const Sizes& z, uint64_t seed, int t, int rank) {
  std::vector<float> rows(z.qkv_elems);
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t sl = 0; sl < z.Sl; ++sl)
      for (int j = 0; j < 3; ++j)
        for (int64_t h = 0; h < z.H; ++h)
          for (int64_t d = 0; d < z.D; ++d)
            rows[static_cast<size_t>((b * z.Sl + sl) * 3 * z.row + j * z.row + h * z.D + d)] =
                value(seed, t, j, b, rank * z.Sl + sl, h, d);
  dev.copy_to_device(qkv.data(), rows.data(), z.qkv_elems * sizeof(float));
}

// Counts the elements of a scattered tensor j (B, S, H/P, D: every token, this rank's heads
// rank*Hl ...) that differ from the reference; returns the tensor as read.
std::vector<float> check_scattered(uipc::Device& dev, const uipc::Exchange& x, int j, const Sizes& z, uint64_t seed,
                                   int t, int rank, Tally& tally) {
  std::vector<float> got(z.hp_elems);
  dev.copy_to_host(got.data(), x.data(), z.hp_elems * sizeof(float));
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t s = 0; s < z.S; ++s)
      for (int64_t hl = 0; hl < z.Hl; ++hl)
        for (int64_t d = 0; d < z.D; ++d) {
          tally.count(got[static_cast<size_t>(((b * z.S + s) * z.Hl + hl) * z.D + d)],
                      value(seed, t, j, b, s, rank * z.Hl + hl, d));
        }
  return got;
}

// Counts the elements of the gathered output (B, S/P, H, D) that differ from this rank's V rows.
void check_gathered(uipc::Device& dev, const uipc::Exchange& o, const Sizes& z, uint64_t seed, int t, int rank,
                    Tally& tally) {
  std::vector<float> back(static_cast<size_t>(z.B * z.Sl * z.row));
  dev.copy_to_host(back.data(), o.data(), back.size() * sizeof(float));
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t sl = 0; sl < z.Sl; ++sl)
      for (int64_t c = 0; c < z.row; ++c) {
        tally.count(back[static_cast<size_t>((b * z.Sl + sl) * z.row + c)],
                    value(seed, t, 2, b, rank * z.Sl + sl, c / z.D, c % z.D));
      }
}

// The engine's steps on one communicator; counts what differs from the reference.
void run_engine(const Args& args, uint64_t seed, int rank, int P, Tally& tally) {
  uipc::Device dev = make_device(args);
  dev.set_watchdog_seconds(30);
  uipc::Options opt;
  opt.transport = args.transport;
  opt.ranks_per_node = args.ranks_per_node;
  uipc::Communicator comm = uipc::Communicator::create(MPI_COMM_WORLD, dev, opt);
  if (rank == 0)
    std::printf("scatter_engine: ulysses_ipc %s, %d ranks, %s, transport %s%s%s\n", uipc::version().c_str(), P,
                dev.name().c_str(), comm.transport().c_str(), comm.fallback_reason().empty() ? "" : " - ",
                comm.fallback_reason().c_str());

  const Sizes z(P);
  const uipc::Shape shape{z.B, z.Sl, z.H, static_cast<int>(z.D), uipc::DType::kFP32};
  uipc::Buffer qkv = dev.alloc(z.qkv_elems * sizeof(float));
  uipc::Buffer attn_out = dev.alloc(z.hp_elems * sizeof(float));
  uipc::Stream compute = dev.create_stream(), attention = dev.create_stream();
  auto* base = static_cast<const float*>(qkv.data());

  for (int t = 0; t < args.steps; ++t) {
    write_projection(dev, qkv, z, seed, t, rank);

    // V first, then Q, then K with the barrier: one handshake for the three.
    const auto scatter = uipc::Direction::kScatter;
    uipc::Exchange v = comm.submit({uipc::Tag::kV, scatter, base + 2 * z.row, 3 * z.row, shape, false}, compute);
    uipc::Exchange q = comm.submit({uipc::Tag::kQ, scatter, base, 3 * z.row, shape, false}, compute);
    uipc::Exchange k = comm.submit({uipc::Tag::kK, scatter, base + z.row, 3 * z.row, shape, true}, compute);
    q.wait(attention);
    k.wait(attention);
    v.wait(attention);
    attention.synchronize();
    check_scattered(dev, q, 0, z, seed, t, rank, tally);
    check_scattered(dev, k, 1, z, seed, t, rank, tally);
    const std::vector<float> v_heads = check_scattered(dev, v, 2, z, seed, t, rank, tally);

    // The attention stand-in's output is this rank's heads of V; the targets are read.
    dev.copy_to_device(attn_out.data(), v_heads.data(), z.hp_elems * sizeof(float));
    comm.release(attention);

    // The output gather: (B, S, H/P, D) back to (B, S/P, H, D), which must be our V rows.
    uipc::Exchange o =
        comm.submit({uipc::Tag::kO, uipc::Direction::kGather, attn_out.data(), 0, shape, true}, attention);
    o.wait(attention);
    attention.synchronize();
    check_gathered(dev, o, z, seed, t, rank, tally);
    comm.release(attention);
  }
  attention.synchronize();
  compute.synchronize();
  const uipc::Stats st = comm.stats();
  comm.close();
  if (rank == 0)
    std::printf("scatter_engine: %lld groups, %lld handshakes, target cache %lld hits / %lld misses\n",
                static_cast<long long>(st.groups), static_cast<long long>(st.handshakes),
                static_cast<long long>(st.cache_hits), static_cast<long long>(st.cache_misses));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  Args args;
  if (!parse(argc, argv, args)) {
    if (rank == 0)
      std::fprintf(stderr, "usage: scatter_engine [--device sim|cuda] [--transport T] [--steps N] "
                           "[--ranks-per-node N]\n");
    MPI_Finalize();
    return 2;
  }
  // A seed every rank agrees on, fresh for every run.
  uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

  Tally tally;
  try {
    run_engine(args, seed, rank, P, tally);
  } catch (const uipc::Error& e) {
    std::fprintf(stderr, "scatter_engine: rank %d: ulysses_ipc error (kind %d): %s\n", rank, static_cast<int>(e.kind()),
                 e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  long long totals[2] = {0, 0}, mine[2] = {tally.mismatches, tally.checked};
  MPI_Allreduce(mine, totals, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  const bool pass = totals[0] == 0 && totals[1] > 0;
  if (rank == 0)
    std::printf("scatter_engine: %s: %lld of %lld elements differ from the reference over %d steps\n",
                pass ? "PASS" : "FAIL", totals[0], totals[1], args.steps);
  MPI_Finalize();
  return pass ? 0 : 1;
}
