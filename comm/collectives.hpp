// Stream-ordered collectives over one communicator group: the NCCL baseline's data
// path, the output gather and the TP all-reduce. Two implementations: NCCL on GPUs
// (comm/nccl_collectives.*) and MPI on the host device (simulation mode, where device
// memory is host memory: the stream is drained, then MPI moves the bytes).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/device.hpp"

namespace uipc {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual std::string name() const = 0;  // "nccl" or "mpi"
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // send holds size() chunks of bytes_per_peer; chunk p goes to rank p, whose chunk
  // from us lands at recv + rank()*bytes_per_peer. Ordered on s.
  virtual void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) = 0;
  // In place: buf[i] = sum over ranks of buf[i], fp32. Ordered on s.
  virtual void all_reduce_sum_f32(Stream& s, float* buf, size_t n) = 0;
};

// MPI over `comm` (duplicated; the caller keeps its own), staged through host memory
// with the device's synchronous copies: the host device's collectives in simulation
// mode, and on GPUs the path that works where NCCL cannot (several ranks on one GPU).
std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev);

}  // namespace uipc
