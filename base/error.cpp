// Error helpers: where an error happened (file, line, host, rank) and MPI error text.
#include "base/error.hpp"

#include <mpi.h>
#include <unistd.h>

#include <atomic>

namespace uipc {
namespace {
std::atomic<int> g_rank{-1};
}

void set_error_rank(int rank) { g_rank.store(rank); }
int error_rank() { return g_rank.load(); }

std::string error_where(const char* file, int line) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
  std::string f(file);
  auto slash = f.rfind('/');
  if (slash != std::string::npos) {
    auto prev = f.rfind('/', slash - 1);
    if (prev != std::string::npos) f = f.substr(prev + 1);
  }
  return f + ":" + std::to_string(line) + " [" + host + " rank " + std::to_string(error_rank()) + "]";
}

void throw_runtime(const std::string& what, const char* file, int line) {
  throw RuntimeError(what + " (" + error_where(file, line) + ")");
}

void collective_phase(MPI_Comm comm, const std::function<void()>& fn) {
  int code = 0;
  std::string what;
  try {
    fn();
  } catch (const Error& e) {
    code = e.exit_code();
    what = e.what();
  } catch (const std::exception& e) {
    code = kExitRuntime;
    what = e.what();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The lowest failing rank speaks for all.
  int mine = code != 0 ? rank : size, first = size;
  UIPC_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return;
  int len = static_cast<int>(what.size());
  UIPC_MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, first, comm));
  UIPC_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, comm));
  what.resize(static_cast<size_t>(len));
  UIPC_MPI_CHECK(MPI_Bcast(&what[0], len, MPI_CHAR, first, comm));
  throw CollectiveError(what, code);
}

void throw_mpi_error(int rc, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof(text), "code %d", rc);
  throw RuntimeError(std::string("MPI call failed: ") + expr + ": " + text + " (" +
                     error_where(file, line) + ")");
}

}  // namespace uipc
