// Stream-ordered collectives over one communicator group: the NCCL baseline's data
// path, the output gather and the TP all-reduce. Two implementations: NCCL on GPUs
// (comm/nccl_collectives.*) and MPI on the host device (simulation mode, where device
// memory is host memory: the stream is drained, then MPI moves the bytes).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/device.hpp"

namespace uipc {

// One peer's part of a grouped point-to-point exchange: `send_bytes` from `send` go to
// `peer`, and `recv_bytes` from `peer` land at `recv` (either may be 0: nothing that way).
// The peer's matching transfer names us with the sizes swapped.
struct PeerTransfer {
  int peer = 0;
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "nccl" or "mpi"
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // send holds size() chunks of bytes_per_peer; chunk p goes to rank p, whose chunk
  // from us lands at recv + rank()*bytes_per_peer. Ordered on s.
  virtual void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) = 0;
  // Every transfer at once (NCCL: one group of sends and receives; MPI: non-blocking
  // point to point, bounded by the device watchdog). Ordered on s. The all-to-all-v of
  // the hierarchical transport's inter-node phase: one message per peer, any sizes.
  virtual void send_recv(Stream& s, const std::vector<PeerTransfer>& transfers) = 0;
  // In place: buf[i] = sum over ranks of buf[i], fp32. Ordered on s.
  virtual void all_reduce_sum_f32(Stream& s, float* buf, size_t n) = 0;
};

// MPI over `comm` (duplicated; the caller keeps its own), staged through host memory
// with the device's synchronous copies: the host device's collectives in simulation
// mode, and on GPUs the path that works where NCCL cannot (several ranks on one GPU).
std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev);

}  // namespace uipc
