// Helpers shared by the MPI tests: this process's rank, the world's size, a seed every
// rank agrees on.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <random>

namespace uipc::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A seed every rank agrees on, fresh for every test run.
inline uint64_t shared_seed() {
  uint64_t s = std::random_device{}();
  s = (s << 32) ^ std::random_device{}();
  MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return s;
}

}  // namespace uipc::testing
