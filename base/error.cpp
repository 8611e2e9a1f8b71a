// Error helpers: where an error happened (file, line, host, rank) and MPI error text.
#include "base/error.hpp"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace uipc {
namespace {
std::atomic<int> g_rank{-1};
}

// Error text that reached rank 0 from a deck may quote the deck's own bytes (names,
// string values): control characters and invalid UTF-8 are shown as \xNN so that every
// rank prints one line of valid UTF-8 and a deck cannot send terminal escape sequences.
std::string printable(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = at(0);
    size_t len = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >> 4) == 0xe ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (at(k) & 0xc0) == 0x80;
    if (ok && len == 1) ok = c >= 0x20 && c != 0x7f;
    if (ok && len == 2) ok = !(c == 0xc2 && at(1) < 0xa0);                                   // C1 controls
    if (ok && len == 3) ok = !(c == 0xe0 && at(1) < 0xa0) && !(c == 0xed && at(1) >= 0xa0);  // overlong, surrogates
    if (ok && len == 4) ok = !(c == 0xf0 && at(1) < 0x90) && !(c == 0xf4 && at(1) >= 0x90);
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
    }
  }
  return out;
}

namespace {
std::atomic<const char*> g_activity{"starting"};
}  // namespace

const char* exit_code_meaning(int code) {
  switch (code) {
    case kExitOk: return "success";
    case kExitBadInput: return "bad command line, deck, or layout";
    case kExitRuntime: return "a device, transport, MPI or HDF5 failure";
    case kExitPeerTimeout: return "a peer timed out";
    case kExitParityFailed: return "parity failed";
    case kExitModelOnly: return "modelled figures only";
    default: return code > kExitSignalBase ? "ended by a signal" : "unknown";
  }
}

void set_activity(const char* literal) { g_activity.store(literal, std::memory_order_relaxed); }
const char* current_activity() { return g_activity.load(std::memory_order_relaxed); }

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
