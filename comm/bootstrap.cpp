// MPI bootstrap: owned communicators, node discovery, handle and string exchange.
#include "comm/bootstrap.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "base/error.hpp"
#include "base/poll.hpp"

namespace uipc {

MpiComm& MpiComm::operator=(MpiComm&& o) noexcept {
  if (this != &o) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

int MpiComm::rank() const {
  int r = 0;
  UIPC_MPI_CHECK(MPI_Comm_rank(comm_, &r));
  return r;
}

int MpiComm::size() const {
  int s = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(comm_, &s));
  return s;
}

MpiComm dup_comm(MPI_Comm c) {
  MPI_Comm d;
  UIPC_MPI_CHECK(MPI_Comm_dup(c, &d));
  return MpiComm(d);
}

MpiComm split_comm(MPI_Comm parent, const std::vector<int>& ranks, int my_rank_in_parent) {
  int color = ranks.empty() ? MPI_UNDEFINED : ranks.front();
  int key = 0;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == my_rank_in_parent) key = static_cast<int>(i);
  MPI_Comm c;
  UIPC_MPI_CHECK(MPI_Comm_split(parent, color, key, &c));
  return MpiComm(c);
}

std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

std::string host_cpu() {
  std::string model = "unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    if (b != std::string::npos) model = line.substr(b);
    break;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return model;
  const int n = CPU_COUNT(&set);
  return model + ", " + std::to_string(n) + (n == 1 ? " CPU usable" : " CPUs usable");
}

NodeInfo node_info(MPI_Comm comm) {
  MPI_Comm node;
  UIPC_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MpiComm owned(node);
  return NodeInfo{owned.rank(), owned.size()};
}

std::vector<int> ranks_in(MPI_Comm comm, MPI_Comm parent) {
  MPI_Group g, w;
  UIPC_MPI_CHECK(MPI_Comm_group(comm, &g));
  UIPC_MPI_CHECK(MPI_Comm_group(parent, &w));
  int n = 0;
  UIPC_MPI_CHECK(MPI_Group_size(g, &n));
  std::vector<int> mine(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = i;
  UIPC_MPI_CHECK(MPI_Group_translate_ranks(g, n, mine.data(), w, out.data()));
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  return out;
}

void wait_bounded(MPI_Request* reqs, int n, double timeout_s, const std::string& what,
                  const std::vector<int>& peer_of_request, double spin_s) {
  int done = 0;
  const bool arrived = poll_until(
      [&] {
        UIPC_MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        return done != 0;
      },
      timeout_s, spin_s);
  if (arrived) return;
  // Name the peers whose messages never came (when the requests say who they are).
  std::set<int> absent;  // a peer has a receive and a send: name it once
  for (int i = 0; i < n && i < static_cast<int>(peer_of_request.size()); ++i) {
    int flag = 0;
    if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_get_status(reqs[i], &flag, MPI_STATUS_IGNORE);
    if (reqs[i] != MPI_REQUEST_NULL && !flag) absent.insert(peer_of_request[i]);
  }
  std::string missing;
  for (int p : absent) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
  char buf[64];
  snprintf(buf, sizeof(buf), "%.1f", timeout_s);
  // The requests cannot complete any more; the caller exits with this error.
  throw PeerTimeout("rank " + std::to_string(error_rank()) + ": " +
                    (missing.empty() ? std::string("not every rank arrived") : "rank(s) " + missing + " did not arrive") +
                    " within " + buf + " s at " + what + " (a peer died, hangs, or submitted something else)");
}

void allgather_bounded(MPI_Comm comm, const void* mine, int bytes, void* all, double timeout_s,
                       const std::string& what) {
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm, &req));
  wait_bounded(&req, 1, timeout_s, what, {});
}

void alltoall_bounded(MPI_Comm comm, const void* send, void* recv, size_t bytes_per_peer, double timeout_s,
                      const std::string& what, double spin_s) {
  int size = 0, rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(comm, &size));
  UIPC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  UIPC_CHECK(bytes_per_peer <= static_cast<size_t>(INT32_MAX), "all-to-all chunk too large for MPI");
  const int n = static_cast<int>(bytes_per_peer);
  // Receives first (named by peer, so a timeout says who is missing), then sends.
  std::vector<MPI_Request> reqs(2 * static_cast<size_t>(size), MPI_REQUEST_NULL);
  std::vector<int> peer_of(2 * static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    UIPC_MPI_CHECK(MPI_Irecv(static_cast<char*>(recv) + static_cast<size_t>(p) * bytes_per_peer, n, MPI_BYTE, p, 7,
                             comm, &reqs[p]));
    peer_of[p] = p;
  }
  for (int p = 0; p < size; ++p) {
    UIPC_MPI_CHECK(MPI_Isend(static_cast<const char*>(send) + static_cast<size_t>(p) * bytes_per_peer, n, MPI_BYTE,
                             p, 7, comm, &reqs[size + p]));
    peer_of[size + p] = p;
  }
  wait_bounded(reqs.data(), 2 * size, timeout_s, what, peer_of, spin_s);
}

void barrier_bounded(MPI_Comm comm, double timeout_s, const std::string& what, double spin_s) {
  // A byte to and from every rank rather than MPI_Ibarrier: point to point, so a timeout
  // names the ranks that did not arrive.
  int size = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<char> none(static_cast<size_t>(size), 0), all(static_cast<size_t>(size));
  alltoall_bounded(comm, none.data(), all.data(), 1, timeout_s, what, spin_s);
}

std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine, double timeout_s,
                                          const std::string& what) {
  int size = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(comm, &size));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), displs(size);
  allgather_bounded(comm, &len, sizeof(int), lens.data(), timeout_s, what);
  int total = 0;
  for (int i = 0; i < size; ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string buf(static_cast<size_t>(total), '\0');
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, &buf[0], lens.data(), displs.data(), MPI_CHAR, comm,
                                 &req));
  wait_bounded(&req, 1, timeout_s, what, {});
  std::vector<std::string> out(size);
  for (int i = 0; i < size; ++i) out[i] = buf.substr(displs[i], lens[i]);
  return out;
}

}  // namespace uipc
