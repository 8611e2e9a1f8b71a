// Bootstrap over MPI: node discovery and IPC handle exchange. MPI is used for setup
// and handle exchange only, never for the IPC transport's data path.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/device/device.hpp"

namespace uipc {

// Owns an MPI communicator (freed in the destructor).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm c) : comm_(c) {}
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm();
  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

MpiComm dup_comm(MPI_Comm c);
// The sub-communicator of `ranks` (world ranks, in order) that contains the caller;
// every rank of `parent` calls it with its own group (color = first member).
MpiComm split_comm(MPI_Comm parent, const std::vector<int>& ranks, int my_rank_in_parent);

std::string host_name();
// The host's processor as the model needs it to tell hosts apart (host costs are the
// host's): /proc/cpuinfo's "model name" and the CPUs this process may run on, e.g.
// "AMD EPYC 9654 96-Core Processor, 16 CPUs usable"; "unknown" where Linux does not say.
std::string host_cpu();
// Rank within the node and ranks on the node.
struct NodeInfo {
  int local_rank = 0;
  int local_size = 1;
};
NodeInfo node_info(MPI_Comm comm);
// The rank in `parent` of every rank of `comm` (all of whose ranks are in `parent`;
// local, no messages), and the MPI_COMM_WORLD ranks: what messages about a peer name.
std::vector<int> ranks_in(MPI_Comm comm, MPI_Comm parent);
inline std::vector<int> world_ranks(MPI_Comm comm) { return ranks_in(comm, MPI_COMM_WORLD); }

// Waits for n requests, giving up after timeout_s with a PeerTimeout naming `what`
// and, where peer_of_request says whom each request talks to, the ranks missing. Polls
// as base/poll.hpp does, without sleeping for at least spin_s: a rank napping when
// the last request completes leaves up to one nap (1 ms, plus timer slack) late, which
// matters only where ranks must leave together (the barrier before a timed GPU layer).
void wait_bounded(MPI_Request* reqs, int n, double timeout_s, const std::string& what,
                  const std::vector<int>& peer_of_request, double spin_s = 0);
// All-to-all of bytes_per_peer per pair, point to point, bounded like wait_bounded.
void alltoall_bounded(MPI_Comm comm, const void* send, void* recv, size_t bytes_per_peer, double timeout_s,
                      const std::string& what, double spin_s = 0);
// MPI_Allgather of `bytes` per rank that gives up after `timeout_s` with a PeerTimeout
// naming `what` (not the missing ranks: a collective request does not say who they are),
// instead of hanging.
void allgather_bounded(MPI_Comm comm, const void* mine, int bytes, void* all, double timeout_s,
                       const std::string& what);
// A barrier, bounded likewise; point to point, so a timeout names the missing ranks.
void barrier_bounded(MPI_Comm comm, double timeout_s, const std::string& what, double spin_s = 0);

// Every rank's string, indexed by rank of comm; bounded like allgather_bounded.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine, double timeout_s,
                                          const std::string& what);

}  // namespace uipc
