// Descriptor passing between the ranks of a node over abstract-namespace Unix datagram
// sockets (see comm/fd_exchange.hpp). Datagrams, not connections: no accept order to
// agree on, and each message is self-describing (nonce, exchange number, sender), so a
// descriptor that arrives early is kept for the exchange it belongs to.
#include "comm/fd_exchange.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"

namespace uipc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kWireMagic = 0x75697063'66647831ull;  // "uipcfdx1"
// Descriptors accepted per datagram: one is expected; room for more means a stray
// message with several is received whole (and all of them closed) rather than truncated.
constexpr int kMaxFdsPerMessage = 4;

// The payload of every datagram; the descriptor rides in the control message.
struct Wire {
  uint64_t magic = kWireMagic;
  uint64_t nonce = 0;
  uint64_t seq = 0;
  int32_t sender = -1;
  int32_t reserved = 0;
};

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s);
  return buf;
}

// The abstract address for `name`: a leading NUL, then the name (no terminator).
sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  UIPC_CHECK(name.size() + 1 < sizeof(addr.sun_path), "socket name too long: " + name);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

FdExchange::FdExchange(MPI_Comm comm, double timeout_s) {
  UIPC_MPI_CHECK(MPI_Comm_rank(comm, &me_));
  UIPC_MPI_CHECK(MPI_Comm_size(comm, &size_));
  // Rank 0's nonce, shared over MPI (an allgather, so that the step is bounded).
  uint64_t mine = 0;
  if (me_ == 0) {
    std::random_device rd;
    mine = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<uint64_t>(getpid()) << 16);
  }
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  allgather_bounded(comm, &mine, sizeof(mine), all.data(), timeout_s, "the descriptor-exchange nonce");
  nonce_ = all[0];

  int err = 0;
  sock_.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock_) err = errno;
  // Credentials on every datagram: messages from another user's process are dropped.
  int on = 1;
  if (!err && setsockopt(sock_.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) err = errno;
  if (!err) {
    socklen_t len = 0;
    sockaddr_un addr = abstract_address(socket_name(me_), &len);
    if (bind(sock_.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) err = errno;
  }
  // The barrier: no rank sends before every socket is bound, and all fail alike.
  std::vector<int> errs(static_cast<size_t>(size_));
  allgather_bounded(comm, &err, sizeof(err), errs.data(), timeout_s, "the descriptor-exchange sockets (bound)");
  for (int r = 0; r < size_; ++r) {
    if (errs[r] != 0)
      throw RuntimeError("rank " + std::to_string(r) + " could not bind its descriptor-exchange socket @" +
                         socket_name(r) + ": " + errno_text(errs[r]));
  }
}

std::string FdExchange::socket_name(int r) const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "uipc-fdx-%016llx-%d", static_cast<unsigned long long>(nonce_), r);
  return buf;
}

FdExchange::SendResult FdExchange::try_send(int peer, int fd, uint64_t seq, const std::string& what) {
  Wire w;
  w.nonce = nonce_;
  w.seq = seq;
  w.sender = me_;
  iovec iov{&w, sizeof(w)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  socklen_t len = 0;
  sockaddr_un addr = abstract_address(socket_name(peer), &len);
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    if (sendmsg(sock_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(w)))
      return SendResult::kSent;
    const int err = errno;
    if (err == EINTR) continue;
    // The peer's queue is full: it drains it while it waits in the same exchange.
    if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) return SendResult::kBusy;
    // Every socket was bound before the first exchange, so a refusal means the peer's
    // socket is gone with its process: as good as a peer that never arrives.
    if (err == ECONNREFUSED || err == ENOENT)
      throw PeerTimeout("rank " + std::to_string(me_) + ": rank " + std::to_string(peer) +
                        " no longer listens on its descriptor socket at " + what + " (it exited?)");
    throw RuntimeError("rank " + std::to_string(me_) + ": sending a descriptor to rank " + std::to_string(peer) +
                       " at " + what + " failed: " + errno_text(err));
  }
}

void FdExchange::drain() {
  for (;;) {
    Wire w{};
    iovec iov{&w, sizeof(w)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage) + CMSG_SPACE(sizeof(ucred))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(sock_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      throw RuntimeError("rank " + std::to_string(me_) + ": receiving on the descriptor socket failed: " +
                         errno_text(err));
    }
    // Own every descriptor that came along first, so that whatever is dropped is closed.
    std::vector<UniqueFd> fds;
    bool same_user = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.emplace_back(fd);
        }
      } else if (c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred{};
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        same_user = cred.uid == getuid();
      }
    }
    const bool ours = n == static_cast<ssize_t>(sizeof(w)) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
                      same_user && w.magic == kWireMagic && w.nonce == nonce_ && w.sender >= 0 &&
                      w.sender < size_ && w.sender != me_ && w.seq >= seq_ && fds.size() == 1;
    if (!ours) continue;  // not from this exchange group: dropped, its descriptors closed
    stash_[{w.seq, static_cast<int>(w.sender)}] = std::move(fds[0]);
  }
}

std::vector<UniqueFd> FdExchange::allgather(int mine, double timeout_s, const std::string& what) {
  UIPC_CHECK(mine >= 0, "FdExchange::allgather: invalid descriptor " + std::to_string(mine));
  const uint64_t seq = ++seq_;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(timeout_s, 0.0)));
  std::vector<UniqueFd> result(static_cast<size_t>(size_));
  std::vector<int> unsent;
  for (int i = 1; i < size_; ++i) unsent.push_back((me_ + i) % size_);  // next rank first: spreads the load
  int missing = size_ - 1;
  for (;;) {
    // Send to whoever has room; a full queue is retried after our own queue is drained,
    // so two ranks sending to each other can never block one another.
    unsent.erase(std::remove_if(unsent.begin(), unsent.end(),
                                [&](int p) { return try_send(p, mine, seq, what) == SendResult::kSent; }),
                 unsent.end());
    for (auto it = stash_.lower_bound({seq, 0}); it != stash_.end() && it->first.first == seq;) {
      result[static_cast<size_t>(it->first.second)] = std::move(it->second);
      --missing;
      it = stash_.erase(it);
    }
    if (unsent.empty() && missing == 0) return result;

    const auto now = Clock::now();
    if (now >= deadline) {
      std::vector<int> absent;
      for (int p = 0; p < size_; ++p)
        if (p != me_ && !result[static_cast<size_t>(p)]) absent.push_back(p);
      std::string msg = "rank " + std::to_string(me_) + ": ";
      if (!absent.empty()) msg += "rank(s) " + rank_list(absent) + " did not send their descriptor";
      if (!unsent.empty())
        msg += std::string(absent.empty() ? "" : "; ") + "rank(s) " + rank_list(unsent) +
               " did not take this rank's descriptor (their socket queue stayed full)";
      throw PeerTimeout(msg + " within " + seconds_text(timeout_s) + " s at " + what +
                        " (a peer died, hangs, or runs another exchange)");
    }
    // Sleep on the socket; with sends pending, wake soon to retry them.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    if (!unsent.empty()) left = std::min<long long>(left, 1);
    pollfd pfd{sock_.get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR) {
      const int err = errno;
      throw RuntimeError("rank " + std::to_string(me_) + ": poll on the descriptor socket failed: " + errno_text(err));
    }
    drain();
  }
}

}  // namespace uipc
