// The run's console lines: printed by rank 0 only (never interleaved), none with --quiet.
#pragma once

#include <mpi.h>

#include <cstdio>

namespace uipc {

class Printer {
 public:
  explicit Printer(bool quiet) : quiet_(quiet) { MPI_Comm_rank(MPI_COMM_WORLD, &rank_); }
  template <typename... A>
  void line(const char* fmt, A... a) const {
    if (rank_ == 0 && !quiet_) {
      std::printf(fmt, a...);
      std::fflush(stdout);
    }
  }

 private:
  bool quiet_;
  int rank_ = 0;
};

}  // namespace uipc
