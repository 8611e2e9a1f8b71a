// The recording decorator of the collectives (comm/collectives/tracing_collectives.hpp).
#include "comm/collectives/tracing_collectives.hpp"

#include "base/error.hpp"

namespace uipc {
namespace {

class TracingCollectives final : public Collectives {
 public:
  TracingCollectives(std::unique_ptr<Collectives> inner, TracingDevice& dev, MPI_Comm comm)
      : inner_(std::move(inner)), dev_(dev) {
    MPI_Group mine, world;
    UIPC_MPI_CHECK(MPI_Comm_group(comm, &mine));
    UIPC_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int n = 0;
    UIPC_MPI_CHECK(MPI_Group_size(mine, &n));
    std::vector<int> local(n), global(n);
    for (int i = 0; i < n; ++i) local[i] = i;
    UIPC_MPI_CHECK(MPI_Group_translate_ranks(mine, n, local.data(), world, global.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    group_ = dev_.group_index(global);
  }
  std::string name() const override { return inner_->name(); }
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }

  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) override {
    model::Op op = collective(model::CollectiveKind::kAllToAll, static_cast<double>(bytes_per_peer));
    dev_.record_op(
        s, op, false,
        [=, this](Stream& in) {
          inner_->all_to_all(in, send, recv, dev_.elides_data() ? std::min<size_t>(bytes_per_peer, 8) : bytes_per_peer);
        },
        op_key(send, recv, bytes_per_peer));
  }

  void send_recv(Stream& s, const std::vector<PeerTransfer>& transfers) override {
    double sent = 0;
    for (const auto& t : transfers) sent += static_cast<double>(t.send_bytes);
    model::Op op = collective(model::CollectiveKind::kSendRecv, sent);
    op.dims[1] = static_cast<int64_t>(transfers.size());
    uint64_t key = op_key(transfers.size());
    for (const auto& t : transfers) key = op_key(key, t.peer, t.send, t.send_bytes, t.recv, t.recv_bytes);
    dev_.record_op(s, op, false, [this, transfers](Stream& in) {
      if (!dev_.elides_data()) return inner_->send_recv(in, transfers);
      std::vector<PeerTransfer> small = transfers;  // the same pattern, 8 bytes a message
      for (auto& t : small) {
        t.send_bytes = std::min<size_t>(t.send_bytes, 8);
        t.recv_bytes = std::min<size_t>(t.recv_bytes, 8);
      }
      inner_->send_recv(in, small);
    }, key);
  }

  std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) override { return inner_->alloc_registered(bytes); }
  std::string copy_engine_note() const override { return inner_->copy_engine_note(); }
  // In --mode model (data elided) the collectives stand for NCCL on the modelled machine,
  // which a graph captures: the run is modelled as the GPU run would issue it.
  std::string graph_ineligible_reason() const override {
    return dev_.elides_data() ? std::string() : inner_->graph_ineligible_reason();
  }

  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override {
    model::Op op = collective(model::CollectiveKind::kAllReduce, static_cast<double>(n * sizeof(float)));
    dev_.record_op(s, op, false,
                   [=, this](Stream& in) { inner_->all_reduce_sum_f32(in, buf, dev_.elides_data() ? std::min<size_t>(n, 2) : n); },
                   op_key(buf, n));
  }

 private:
  model::Op collective(model::CollectiveKind kind, double bytes) {
    model::Op op;
    op.kind = model::OpKind::kCollective;
    op.collective = kind;
    op.bytes = bytes;
    op.group = group_;
    op.sequence = dev_.next_sequence(group_);
    op.dims[0] = size();
    return op;
  }

  std::unique_ptr<Collectives> inner_;
  TracingDevice& dev_;
  int group_ = 0;
};

}  // namespace

std::unique_ptr<Collectives> make_tracing_collectives(std::unique_ptr<Collectives> inner, TracingDevice& dev,
                                                      MPI_Comm comm) {
  return std::make_unique<TracingCollectives>(std::move(inner), dev, comm);
}

}  // namespace uipc
