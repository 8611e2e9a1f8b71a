// Passing file descriptors between the ranks of one node (the vmm transport's way of
// sharing memory: a CUDA VMM allocation or a memfd is a descriptor, and MPI cannot carry
// descriptors). Each rank binds a Unix datagram socket in the abstract namespace (nothing
// on the filesystem, nothing to clean up), named from a nonce rank 0 draws and the rank,
// so concurrent jobs and transports never clash; descriptors travel with SCM_RIGHTS.
// MPI carries only the nonce and one barrier. Every step is bounded: a peer that does
// not take part is a PeerTimeout naming it, never a hang.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace uipc {

// An owned file descriptor, closed in the destructor. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  // Hands the descriptor over; this object no longer closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the held descriptor (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept;
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class FdExchange {
 public:
  // Collective over `comm` (every rank on one node): rank 0's nonce goes to every rank,
  // each binds its socket, and a barrier that also carries each rank's bind status makes
  // every rank fail alike when one could not bind. MPI steps are bounded by timeout_s.
  FdExchange(MPI_Comm comm, double timeout_s);
  FdExchange(const FdExchange&) = delete;
  FdExchange& operator=(const FdExchange&) = delete;
  ~FdExchange() = default;

  // Collective: sends `mine` (which stays the caller's) to every other rank and receives
  // every other rank's descriptor: result[p] is rank p's, result[me] is empty. Throws
  // PeerTimeout naming the ranks that did not send (or could not be sent to) within
  // timeout_s, and `what` (the exchange, for the message).
  std::vector<UniqueFd> allgather(int mine, double timeout_s, const std::string& what);

  // The abstract socket name of rank r (without the leading NUL byte).
  std::string socket_name(int r) const;
  int rank() const { return me_; }
  int size() const { return size_; }

 private:
  enum class SendResult { kSent, kBusy };
  SendResult try_send(int peer, int fd, uint64_t seq, const std::string& what);
  // Receives every datagram already queued on the socket into stash_; never blocks.
  void drain();

  int me_ = 0, size_ = 1;
  uint64_t nonce_ = 0;
  uint64_t seq_ = 0;  // exchanges done; every rank counts alike (they are collective)
  UniqueFd sock_;
  // Descriptors that arrived ahead of the exchange that wants them, by (seq, sender).
  std::map<std::pair<uint64_t, int>, UniqueFd> stash_;
};

}  // namespace uipc
