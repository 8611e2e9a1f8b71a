// The MPI collectives that stand in for NCCL on the host device (and where NCCL cannot
// run): device bytes staged through host memory, every wait bounded by the watchdog.
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"

namespace uipc {

namespace {

class MpiCollectives : public Collectives {
 public:
  MpiCollectives(MPI_Comm c, Device& dev) : comm_(dup_comm(c)), dev_(dev), world_rank_(world_ranks(c)) {}
  std::string name() const override { return "mpi"; }
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }

  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) override {
    UIPC_CHECK(bytes_per_peer <= static_cast<size_t>(INT32_MAX), "all-to-all chunk too large for MPI");
    const size_t total = bytes_per_peer * static_cast<size_t>(size());
    s.synchronize();  // the bytes are final once the stream has drained
    std::vector<unsigned char> out(total), in(total);
    dev_.copy_to_host(out.data(), send, total);
    alltoall_bounded(comm_.get(), out.data(), in.data(), bytes_per_peer, dev_.watchdog_seconds(),
                     "the all-to-all of the nccl transport (MPI emulation)");
    dev_.copy_to_device(recv, in.data(), total);
  }

  void send_recv(Stream& s, const std::vector<PeerTransfer>& transfers) override {
    s.synchronize();  // the bytes are final once the stream has drained
    std::vector<std::vector<unsigned char>> out(transfers.size()), in(transfers.size());
    std::vector<MPI_Request> reqs;
    std::vector<int> peer_of;  // world ranks: what a timeout names
    reqs.reserve(2 * transfers.size());
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      UIPC_CHECK(t.send_bytes <= static_cast<size_t>(INT32_MAX) && t.recv_bytes <= static_cast<size_t>(INT32_MAX),
                 "point-to-point message too large for MPI");
      UIPC_CHECK(t.peer >= 0 && t.peer < size(), "send_recv: no peer " + std::to_string(t.peer));
      if (t.recv_bytes == 0) continue;
      in[i].resize(t.recv_bytes);
      reqs.emplace_back();
      UIPC_MPI_CHECK(MPI_Irecv(in[i].data(), static_cast<int>(t.recv_bytes), MPI_BYTE, t.peer, kSendRecvTag,
                               comm_.get(), &reqs.back()));
      peer_of.push_back(world_rank_[static_cast<size_t>(t.peer)]);
    }
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      if (t.send_bytes == 0) continue;
      out[i].resize(t.send_bytes);
      dev_.copy_to_host(out[i].data(), t.send, t.send_bytes);
      reqs.emplace_back();
      UIPC_MPI_CHECK(MPI_Isend(out[i].data(), static_cast<int>(t.send_bytes), MPI_BYTE, t.peer, kSendRecvTag,
                               comm_.get(), &reqs.back()));
      peer_of.push_back(world_rank_[static_cast<size_t>(t.peer)]);
    }
    wait_bounded(reqs.data(), static_cast<int>(reqs.size()), dev_.watchdog_seconds(),
                 "the point-to-point exchange of the inter-node phase (MPI)", peer_of);
    for (size_t i = 0; i < transfers.size(); ++i)
      if (transfers[i].recv_bytes > 0) dev_.copy_to_device(transfers[i].recv, in[i].data(), transfers[i].recv_bytes);
  }

  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override {
    set_activity("in the TP all-reduce (MPI): draining the compute stream");
    s.synchronize();
    set_activity("in the TP all-reduce (MPI): exchanging");
    // Summed in rank order, so the result is the same on every rank (docs/math.md §7).
    const int size = comm_.size();
    std::vector<float> mine(n), all(n * static_cast<size_t>(size));
    dev_.copy_to_host(mine.data(), buf, n * sizeof(float));
    // An all-gather as an all-to-all of the same chunk: point to point, bounded.
    std::vector<float> same(n * static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) std::copy(mine.begin(), mine.end(), same.begin() + static_cast<size_t>(r) * n);
    alltoall_bounded(comm_.get(), same.data(), all.data(), n * sizeof(float), dev_.watchdog_seconds(),
                     "the TP all-reduce (MPI)");
    for (size_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int r = 0; r < size; ++r) acc += all[static_cast<size_t>(r) * n + i];
      mine[i] = acc;
    }
    dev_.copy_to_device(buf, mine.data(), n * sizeof(float));
  }

  std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) override {
    return plain_registered_buffer(dev_, bytes);
  }
  std::string graph_ineligible_reason() const override {
    return "MPI collectives (simulated NCCL) are staged through the host";
  }
  std::string copy_engine_note() const override {
    return "MPI collectives (simulation mode, or ranks sharing a GPU): staged through host memory, no copy engines";
  }

 private:
  static constexpr int kSendRecvTag = 11;  // apart from the all-to-all's
  MpiComm comm_;
  Device& dev_;
  std::vector<int> world_rank_;
};

class PlainRegisteredBuffer final : public RegisteredBuffer {
 public:
  explicit PlainRegisteredBuffer(DeviceBuffer b) : buf_(std::move(b)) {}
  void* get() const override { return buf_.get(); }
  size_t bytes() const override { return buf_.bytes(); }

 private:
  DeviceBuffer buf_;
};

}  // namespace

std::unique_ptr<RegisteredBuffer> plain_registered_buffer(Device& dev, size_t bytes) {
  return std::make_unique<PlainRegisteredBuffer>(dev.alloc(bytes));
}

std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev) {
  return std::make_unique<MpiCollectives>(comm, dev);
}

}  // namespace uipc
