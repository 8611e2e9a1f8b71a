// Helpers shared by the MPI tests: this process's rank and the world's size.
#pragma once

#include <mpi.h>

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

}  // namespace uipc::testing
