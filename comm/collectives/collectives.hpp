// Stream-ordered collectives over one communicator group: the NCCL baseline's data
// path, the output gather and the TP all-reduce. Two implementations: NCCL on GPUs
// (comm/nccl_collectives.*) and MPI on the host device (simulation mode, where device
// memory is host memory: the stream is drained, then MPI moves the bytes).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/device/device.hpp"

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

// Device memory registered with a communicator, which its collectives move without
// staging: on NCCL a symmetric window (ncclMemAlloc + ncclCommWindowRegister), the
// memory NCCL 2.28's copy-engine collectives take; plain device memory on MPI.
class RegisteredBuffer {
 public:
  virtual ~RegisteredBuffer() = default;
  virtual void* get() const = 0;
  virtual size_t bytes() const = 0;
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
  // `bytes` of registered memory. Collective: every rank allocates the same size at the
  // same point. Freed (deregistered) when the buffer goes; every rank must drop its
  // buffers before the communicator.
  virtual std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) = 0;
  // Why an all_to_all between registered buffers does not run on copy engines ("": it
  // does, as far as the library lets us tell).
  virtual std::string copy_engine_note() const = 0;
  // Why these collectives cannot be captured into a graph ("" = they can): MPI's are
  // staged through the host.
  virtual std::string graph_ineligible_reason() const = 0;
};

// MPI over `comm` (duplicated; the caller keeps its own), staged through host memory
// with the device's synchronous copies: the host device's collectives in simulation
// mode, and on GPUs the path that works where NCCL cannot (several ranks on one GPU).
std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev);

// A RegisteredBuffer over plain device memory (what MPI collectives register).
std::unique_ptr<RegisteredBuffer> plain_registered_buffer(Device& dev, size_t bytes);

}  // namespace uipc
