// Parity: the checks every run makes of its own output, on every rank (nccl-tests'
// verifiable/ in spirit): the dense reference distributed to its shard owners, the
// errors against it agreed across ranks, and a digest of the whole distributed output.
#include "lib/run/parity.hpp"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "comm/bootstrap.hpp"

namespace uipc {

// The reference rows of every rank's shard, sent from rank 0 (which computed the dense
// layer) to their owners. Returns this rank's (B, S_local, C) reference values (shards
// may differ by a token: a scatter of variable counts).
std::vector<float> distribute_reference(const std::vector<float>& full, const Case& c, const Layout& l,
                                        double timeout_s) {
  const int64_t C = c.width(), S = c.seq_len;
  const size_t shard = static_cast<size_t>(l.batch * l.seq_local * C);
  std::vector<float> sendbuf, mine(shard);
  std::vector<int> counts(static_cast<size_t>(l.world)), displs(static_cast<size_t>(l.world));
  int64_t at = 0;
  for (int r = 0; r < l.world; ++r) {
    const Layout lr = make_layout(c, l.world, r);
    const int64_t n = l.batch * lr.seq_local * C;
    UIPC_CHECK(at + n <= static_cast<int64_t>(INT32_MAX), "reference too large for MPI_Scatterv");
    counts[static_cast<size_t>(r)] = static_cast<int>(n);
    displs[static_cast<size_t>(r)] = static_cast<int>(at);
    if (l.rank == 0) {
      sendbuf.resize(static_cast<size_t>(at + n));
      for (int64_t b = 0; b < l.batch; ++b)
        std::copy_n(full.begin() + (b * S + lr.seq_offset) * C, lr.seq_local * C,
                    sendbuf.begin() + at + b * lr.seq_local * C);
    }
    at += n;
  }
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iscatterv(sendbuf.data(), counts.data(), displs.data(), MPI_FLOAT, mine.data(),
                               static_cast<int>(shard), MPI_FLOAT, 0, MPI_COMM_WORLD, &req));
  wait_bounded(&req, 1, timeout_s, "the dense reference of case '" + c.name + "' (computed by rank 0)", {0});
  return mine;
}


Parity check_parity(Device& dev, const DeviceBuffer& y, DType t, const std::vector<float>& ref, double timeout_s) {
  std::vector<unsigned char> raw(ref.size() * dtype_size(t));
  dev.copy_to_host(raw.data(), y.get(), raw.size());
  double sums[2] = {0, 0};  // ||y - ref||^2, ||ref||^2
  double max_abs = 0, nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = load_as_float(t, raw.data(), i), r = ref[i];
    if (!std::isfinite(v)) {
      nonfinite += 1;
      continue;
    }
    const double d = v - r;
    sums[0] += d * d;
    sums[1] += r * r;
    max_abs = std::max(max_abs, std::fabs(d));
  }
  double gsums[2], gmax[2], local_max[2] = {max_abs, nonfinite};
  MPI_Request reqs[2];
  UIPC_MPI_CHECK(MPI_Iallreduce(sums, gsums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[0]));
  UIPC_MPI_CHECK(MPI_Iallreduce(local_max, gmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &reqs[1]));
  wait_bounded(reqs, 2, timeout_s, "the parity check", {});
  Parity p;
  p.max_abs = gmax[0];
  p.finite = gmax[1] == 0;
  p.rel_l2 = gsums[1] > 0 ? std::sqrt(gsums[0] / gsums[1]) : std::sqrt(gsums[0]);
  return p;
}

// A digest of the whole distributed output: every rank's bytes hashed, the hashes of all
// ranks combined in rank order, the same on every rank. Runs with equal digests produced
// bit-identical outputs (what "bit-exact against the nccl path" is checked with).
std::string output_digest(Device& dev, const DeviceBuffer& y, size_t bytes, double timeout_s) {
  std::vector<unsigned char> raw(bytes);
  dev.copy_to_host(raw.data(), y.get(), bytes);
  uint64_t h = splitmix64(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, raw.data() + i, std::min<size_t>(8, bytes - i));
    h = splitmix64(h ^ w);
  }
  int world = 1;
  UIPC_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::vector<uint64_t> all(static_cast<size_t>(world));
  allgather_bounded(MPI_COMM_WORLD, &h, sizeof(h), all.data(), timeout_s, "the output digest");
  uint64_t d = 0;
  for (uint64_t v : all) d = splitmix64(d ^ v);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
  return buf;
}

// This rank's output as fp32 values of the dtype.
std::vector<float> output_values(Device& dev, const DeviceBuffer& y, DType t, size_t n) {
  std::vector<unsigned char> raw(n * dtype_size(t));
  dev.copy_to_host(raw.data(), y.get(), raw.size());
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load_as_float(t, raw.data(), i);
  return v;
}

// Test hook: a rank named by this variable adds 1 to its first output element before
// the parity check, so tests can see a parity failure end to end.
constexpr const char* kCorruptRankEnv = "ULYSSES_TEST_CORRUPT_RANK";

void corrupt_output_for_tests(Device& dev, const DeviceBuffer& y, DType t, int rank) {
  const char* v = std::getenv(kCorruptRankEnv);
  if (!v || !*v || std::atoi(v) != rank) return;
  unsigned char e[4];
  dev.copy_to_host(e, y.get(), dtype_size(t));
  store_from_float(t, e, 0, load_as_float(t, e, 0) + 1.0f);
  dev.copy_to_device(y.get(), e, dtype_size(t));
}

// Test hook: a rank named by this variable issues a copy of two rows, each more than half
// its output buffer, so tests can see the device layer's reach check end the run on that
// rank (exit 3, no report) instead of a copy past the buffer.
constexpr const char* kOverreachRankEnv = "ULYSSES_TEST_OVERREACH_RANK";

void overreach_for_tests(Device& dev, Stream& s, const DeviceBuffer& y, int rank) {
  const char* v = std::getenv(kOverreachRankEnv);
  if (!v || !*v || std::atoi(v) != rank) return;
  const size_t row = y.bytes() / 2 + 1;
  dev.copy_2d(s, y.get(), row, y.get(), row, row, 2);
}

}  // namespace uipc
