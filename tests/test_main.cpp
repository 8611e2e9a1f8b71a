// The main of every test binary: MPI and Kokkos up, full output from rank 0, failures
// only from the others (each line tagged with its rank, so a test that fails on rank 1
// alone says where and why), and one verdict agreed across ranks (a test that fails on
// any rank fails everywhere).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <string>

#include "base/error.hpp"

namespace {

// Prints what failed on this rank, and nothing else: the full progress comes from rank 0.
class FailuresOfThisRank : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOfThisRank(int rank) : tag_("[rank " + std::to_string(rank) + "] ") {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string message = result.message();  // every line of it tagged
    for (size_t at = message.find('\n'); at != std::string::npos; at = message.find('\n', at + 1 + tag_.size()))
      message.insert(at + 1, tag_);
    std::fprintf(stderr, "%s%s:%d: Failure\n%s%s\n", tag_.c_str(), result.file_name() ? result.file_name() : "?",
                 result.line_number(), tag_.c_str(), message.c_str());
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "%sFAILED %s.%s\n", tag_.c_str(), info.test_suite_name(), info.name());
  }

 private:
  std::string tag_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  uipc::set_error_rank(rank);
  Kokkos::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOfThisRank(rank));
  }
  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return global;
}
