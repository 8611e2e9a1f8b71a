// The recording decorator of the device layer at 2 and 4 ranks, on the host device under
// the real IPC and vmm protocols: the trace names each copy's destination rank from the
// memory's identity alone (no help from the transport), every handshake wait is matched
// to the peer's write (the simulator replays the traces with no deadlock and each wait
// ends after the write it waits for), waits on an earlier group's epochs are satisfied
// by the words' values before the trace, measured times come back in stream order, the
// data is the same with and without the decorator, and with data work elided no copy
// lands while the protocol still completes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "tests/mpi_testing.hpp"
#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/collectives/tracing_collectives.hpp"
#include "comm/device/tracing_device.hpp"
#include "comm/transport/transport.hpp"
#include "model/machine.hpp"
#include "model/simulator.hpp"

using namespace uipc;

namespace {

using uipc::testing::world_rank;
using uipc::testing::world_size;

struct Traced {
  std::vector<model::RankTrace> traces;
  std::vector<uint16_t> result;  // this rank's V result after the traced group
  double traced_wall_us = 0;     // this rank's host time from begin_trace to end_trace
};

// Two groups of Q, K, V scatters (the first fills the target cache and makes the
// second's release waits refer to it), the second one traced.
Traced run_groups(const std::string& transport, bool elide, bool measure, TransportOptions topts = {}) {
  const int me = world_rank(), P = world_size();
  TracingDevice dev(make_host_device(me), me, P, elide);
  dev.set_watchdog_seconds(20);
  auto compute = dev.create_stream(StreamPriority::kNormal);
  auto coll = make_tracing_collectives(make_mpi_collectives(MPI_COMM_WORLD, dev.inner()), dev, MPI_COMM_WORLD);
  std::unique_ptr<Transport> t = transport == "ipc"   ? make_ipc_transport(dev, MPI_COMM_WORLD, topts)
                                 : transport == "vmm" ? make_vmm_transport(dev, MPI_COMM_WORLD, topts)
                                                      : make_nccl_transport(dev, *coll);
  ExchangeShape shape{1, 16, 4 * P, 8, DType::kBF16};
  const size_t elems = static_cast<size_t>(shape.batch * shape.seq_local * shape.heads * shape.head_dim);
  std::vector<uint16_t> src(elems);
  for (size_t i = 0; i < elems; ++i) src[i] = static_cast<uint16_t>(me * 1000 + i);
  DeviceBuffer buf = dev.alloc(elems * 2);
  dev.copy_to_device(buf.get(), src.data(), elems * 2);
  Traced out;
  for (int group = 0; group < 2; ++group) {
    const auto t0 = std::chrono::steady_clock::now();
    if (group == 1) dev.begin_trace(measure);
    std::vector<std::unique_ptr<Exchange>> ex;
    for (Tag tag : {Tag::kQ, Tag::kK, Tag::kV}) {
      Submission s;
      s.tag = tag;
      s.src = buf.get();
      s.shape = shape;
      s.barrier = tag == Tag::kV;
      ex.push_back(t->submit(s, *compute));
    }
    for (auto& e : ex) e->wait(*compute);
    t->release(*compute);
    compute->synchronize();
    if (group == 1) {
      model::RankTrace mine = dev.end_trace();
      out.traced_wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      for (const std::string& b : allgather_strings(MPI_COMM_WORLD, model::serialize(mine), 20, "test traces"))
        out.traces.push_back(model::deserialize(b));
      out.result.resize(elems);
      dev.copy_to_host(out.result.data(), ex[2]->data(), elems * 2);
    }
  }
  t->close_peer_mappings();
  MPI_Barrier(MPI_COMM_WORLD);
  return out;
}

model::Machine prior_machine() {
  return model::load_machine(std::string(ULYSSES_SOURCE_DIR) + "/inputs/machines/h200-nvlink-prior.json");
}

class Tracing : public ::testing::TestWithParam<std::string> {};

TEST_P(Tracing, CopiesNameTheirPeerAndEveryWaitMeetsItsWrite) {
  const int me = world_rank(), P = world_size();
  Traced tr = run_groups(GetParam(), false, true);
  ASSERT_EQ(static_cast<int>(tr.traces.size()), P);
  std::map<uint64_t, int> owner;
  for (const auto& t : tr.traces)
    for (uint64_t e : t.exported) owner[e] = t.rank;
  const model::RankTrace& mine = tr.traces[me];
  if (GetParam() != "nccl") {
    // One copy per tag to every rank (the peers' into their mapped targets, mine local).
    std::map<int, int> copies_to;
    for (const auto& op : mine.ops) {
      if (op.kind != model::OpKind::kCopy) continue;
      ASSERT_TRUE(op.dst_mem == 0 || owner.count(op.dst_mem)) << "a copy into memory no rank exported";
      const int dst = op.dst_mem == 0 ? me : owner[op.dst_mem];
      ++copies_to[dst];
      if (dst != me) {
        EXPECT_EQ(op.dst_via, GetParam() == "ipc" ? model::Via::kIpcHandle : model::Via::kFileDescriptor);
      }
    }
    for (int p = 0; p < P; ++p) EXPECT_EQ(copies_to[p], 3) << "copies to rank " << p;
  }
  // Measured times: present, and in order along each stream.
  std::map<int, double> last_end;
  for (const auto& op : mine.ops) {
    if (op.stream < 0) continue;
    ASSERT_TRUE(std::isfinite(op.measured_start_ms) && std::isfinite(op.measured_end_ms));
    EXPECT_LE(op.measured_start_ms, op.measured_end_ms + 1e-9);
    if (last_end.count(op.stream)) {
      EXPECT_GE(op.measured_end_ms, last_end[op.stream] - 1e-9);
    }
    last_end[op.stream] = op.measured_end_ms;
  }
  // The replay: no deadlock; each ready wait ends after the matching peer write.
  model::Timeline tl = model::simulate(tr.traces, prior_machine());
  if (GetParam() == "nccl") return;
  int ready_waits = 0;
  for (size_t i = 0; i < mine.ops.size(); ++i) {
    const auto& w = mine.ops[i];
    if (w.kind != model::OpKind::kWaitValue || w.value != 2) continue;  // group 2's epoch
    const int peer = w.label_peer;
    ASSERT_GE(peer, 0);
    if (peer == me) continue;
    bool found = false;
    const auto& pt = tr.traces[peer];
    for (size_t j = 0; j < pt.ops.size(); ++j) {
      const auto& wr = pt.ops[j];
      if (wr.kind == model::OpKind::kWriteValue && wr.word_mem == w.word_mem && wr.word_offset == w.word_offset &&
          wr.value >= w.value) {
        found = true;
        EXPECT_GE(tl.ranks[me][i].end_ms, tl.ranks[peer][j].end_ms) << "a wait ended before the write it waits for";
      }
    }
    EXPECT_TRUE(found) << "the wait for peer " << peer << "'s epoch has no matching write";
    ++ready_waits;
  }
  EXPECT_EQ(ready_waits, P - 1);
  // The first group's release (epoch 1) was written before the trace: those waits are
  // satisfied at once, not matched to this group's release.
  EXPECT_EQ(tl.waits_before_trace, P * P) << "release waits of every rank on every slot";
}

TEST_P(Tracing, TheDecoratorDoesNotChangeTheDataAndElidedCopiesDoNotLand) {
  const int me = world_rank(), P = world_size();
  Traced full = run_groups(GetParam(), false, false);
  // Rank p's V slice for me: heads [me*4, +4) of its rows; element (s, h, d) of p = p*1000 + i.
  const int hl = 4, H = 4 * P, D = 8, Sl = 16;
  for (int p = 0; p < P; ++p)
    for (int s = 0; s < Sl; ++s)
      for (int h = 0; h < hl; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t at = (static_cast<size_t>(p * Sl + s) * hl + h) * D + d;
          const uint16_t want = static_cast<uint16_t>(p * 1000 + (s * H + me * hl + h) * D + d);
          ASSERT_EQ(full.result[at], want) << "rank " << me << " element " << at;
        }
  // With data elided the nccl transport's all-to-all still moves one 8-byte chunk (so
  // that the ranks meet in it): only the mapped copies of ipc and vmm land nothing.
  if (GetParam() == "nccl") return;
  Traced elided = run_groups(GetParam(), true, false);
  for (uint16_t v : elided.result) ASSERT_EQ(v, 0) << "a copy landed with data work elided";
  ASSERT_EQ(static_cast<int>(elided.traces.size()), P);
}

INSTANTIATE_TEST_SUITE_P(Transports, Tracing, ::testing::Values("ipc", "vmm", "nccl"));

// A free of memory from alloc() is cudaFree on a GPU, which waits for the whole device
// (bench_kernels' alloc rows): the trace holds a host wait for every stream's last op; a
// free of CUDA-VMM memory (alloc_fd_shareable) does not wait, and the trace holds none.
// Each allocation and free is itself a host call of the trace (kHostCall), after the wait.
TEST(TracingFree, ARuntimeFreeWaitsForEveryStreamAVmmFreeForNone) {
  const int me = world_rank(), P = world_size();
  TracingDevice dev(make_host_device(me), me, P, false);
  auto a = dev.create_stream(StreamPriority::kNormal), b = dev.create_stream(StreamPriority::kHigh);
  auto scratch = dev.alloc(4096);
  dev.begin_trace(false);
  dev.memset(*a, scratch.get(), 1, 2048);
  dev.memset(*b, static_cast<char*>(scratch.get()) + 2048, 2, 2048);
  const size_t before = 2;
  { DeviceBuffer runtime = dev.alloc(1 << 20); }
  const bool vmm = dev.vmm_ineligible_reason().empty();
  if (vmm) { DeviceBuffer shared = dev.alloc_fd_shareable(1 << 20); }
  a->synchronize();
  b->synchronize();
  model::RankTrace all = dev.end_trace();
  // The memory calls, in order, and where the runtime free's stands: after its waits.
  std::vector<model::HostCall> calls;
  model::RankTrace t = all;
  t.ops.clear();
  for (size_t i = 0; i < all.ops.size(); ++i) {
    const model::Op& op = all.ops[i];
    if (op.kind != model::OpKind::kHostCall) {
      t.ops.push_back(op);
      continue;
    }
    EXPECT_EQ(op.stream, -1);
    EXPECT_EQ(op.bytes, 1 << 20);
    calls.push_back(static_cast<model::HostCall>(op.dims[0]));
    if (calls.back() == model::HostCall::kFreeRuntime) {
      ASSERT_GE(i, before + 3);
      EXPECT_EQ(all.ops[i - 1].kind, model::OpKind::kHostSync) << "the free's cost after its wait";
    }
  }
  using HC = model::HostCall;
  EXPECT_EQ(calls, (vmm ? std::vector<HC>{HC::kAllocRuntime, HC::kFreeRuntime, HC::kAllocVmm, HC::kFreeVmm}
                        : std::vector<HC>{HC::kAllocRuntime, HC::kFreeRuntime}));
  ASSERT_GE(t.ops.size(), before + 2);
  std::set<int> waited;
  for (size_t i = before; i < before + 2; ++i) {
    EXPECT_EQ(t.ops[i].kind, model::OpKind::kHostSync) << "op " << i;
    waited.insert(t.ops[i].waits_for);
  }
  EXPECT_EQ(waited, (std::set<int>{0, 1})) << "the free waits for both streams' memsets";
  // What follows are the two stream synchronizations only: the VMM free added no wait.
  EXPECT_EQ(t.ops.size(), before + 2 + 2) << (vmm ? "a VMM free waited for the device" : "");
  EXPECT_TRUE(vmm) << "the host device offers VMM memory: " << dev.vmm_ineligible_reason();
}

// The vmm transport without its target cache (the no-target-cache ablation) allocates,
// exports and imports its targets again in every layer: the traced (second) group holds
// each target's allocation and export and an import per peer, and those host calls hold
// the modelled host for their measured costs. With the cache the second group is steady:
// no memory call at all. The ipc transport opens IPC handles in the same places.
TEST(TracingHostCalls, WithoutTheTargetCacheEveryLayerImportsItsTargetsWithItNone) {
  const int me = world_rank(), P = world_size();
  const model::Machine m = prior_machine();
  for (const std::string transport : {"vmm", "ipc"}) {
    for (const bool cache : {true, false}) {
      TransportOptions topts;
      topts.cache_targets = cache;
      Traced tr = run_groups(transport, true, false, topts);
      ASSERT_EQ(static_cast<int>(tr.traces.size()), P);
      const model::RankTrace& mine = tr.traces[me];
      std::map<model::HostCall, int> n;
      for (const model::Op& op : mine.ops)
        if (op.kind == model::OpKind::kHostCall) ++n[static_cast<model::HostCall>(op.dims[0])];
      const std::string what = transport + (cache ? " with" : " without") + " its target cache";
      if (cache) {
        EXPECT_TRUE(n.empty()) << what << ": a steady layer made a memory call";
        continue;
      }
      const bool vmm = transport == "vmm";
      const int targets = 3;  // Q, K and V's
      EXPECT_EQ(n[vmm ? model::HostCall::kAllocVmm : model::HostCall::kAllocRuntime], targets) << what;
      EXPECT_EQ(n[vmm ? model::HostCall::kExportFd : model::HostCall::kExportHandle], targets) << what;
      EXPECT_EQ(n[vmm ? model::HostCall::kImportFd : model::HostCall::kOpenHandle], targets * (P - 1)) << what;
      // The first group's targets go before the second's come: their frees and closes.
      EXPECT_EQ(n[vmm ? model::HostCall::kFreeVmm : model::HostCall::kFreeRuntime], targets) << what;
      EXPECT_EQ(n[vmm ? model::HostCall::kCloseFd : model::HostCall::kCloseHandle], targets * (P - 1)) << what;
      // The exporter closes its own descriptor once the peers have theirs (at one rank: one no
      // peer imported); an IPC handle has nothing to close.
      EXPECT_EQ(n[model::HostCall::kCloseExport], vmm ? targets : 0) << what;
      // Each export holds the modelled host for host_export_us, each close of one
      // host_close_export_us and each import host_import_us (an IPC handle's export and open:
      // host_api_us).
      const model::Timeline tl = model::simulate(tr.traces, m);
      const std::map<model::HostCall, double> cost_ms = {
          {vmm ? model::HostCall::kExportFd : model::HostCall::kExportHandle,
           m.p(vmm ? "host_export_us" : "host_api_us") * 1e-3},
          {vmm ? model::HostCall::kImportFd : model::HostCall::kOpenHandle,
           m.p(vmm ? "host_import_us" : "host_api_us") * 1e-3},
          {model::HostCall::kCloseExport, m.p("host_close_export_us") * 1e-3}};
      int checked = 0;
      for (size_t i = 0; i < mine.ops.size(); ++i) {
        const model::Op& op = mine.ops[i];
        if (op.kind != model::OpKind::kHostCall) continue;
        const auto c = cost_ms.find(static_cast<model::HostCall>(op.dims[0]));
        if (c == cost_ms.end()) continue;
        EXPECT_NEAR(tl.ranks[me][i].end_ms - tl.ranks[me][i].start_ms, c->second, 1e-9) << what << " op " << i;
        ++checked;
      }
      EXPECT_EQ(checked, targets * P + (vmm ? targets : 0)) << what;  // exports, imports, closes: every one
    }
  }
}

// A measured trace times each call on the host (Op::measured_host_us): every memory call (the
// allocations, exports, mappings and frees of a layer without the target cache) and every
// stream op's enqueue carry a time (a copy batch's one call on its first copy), host syncs
// none. The calls run one after another on the host, so their times sum to no more than the
// traced group's wall time. The byte form keeps them; an unmeasured trace has none.
TEST(TracingHostCalls, AMeasuredTraceTimesEachCallOnTheHost) {
  const int me = world_rank();
  for (const std::string transport : {"vmm", "ipc"}) {
    TransportOptions topts;
    topts.cache_targets = false;
    const Traced tr = run_groups(transport, false, true, topts);
    const model::RankTrace& mine = tr.traces[me];
    double sum_us = 0;
    int calls = 0, stream_ops = 0;
    for (const model::Op& op : mine.ops) {
      if (op.kind == model::OpKind::kHostSync || (op.kind == model::OpKind::kCopy && op.dims[2] > 0)) {
        EXPECT_TRUE(std::isnan(op.measured_host_us)) << transport << ": a host sync or a copy after a batch's first "
                                                     << "with a host time";
        continue;
      }
      ASSERT_TRUE(std::isfinite(op.measured_host_us) && op.measured_host_us >= 0)
          << transport << ": op of kind " << static_cast<int>(op.kind) << " without a host time";
      sum_us += op.measured_host_us;
      (op.kind == model::OpKind::kHostCall ? calls : stream_ops) += 1;
    }
    EXPECT_GE(calls, 9) << transport;  // each of Q, K and V's targets: a free, an allocation, an export
    EXPECT_GT(stream_ops, 0) << transport;
    EXPECT_LE(sum_us, tr.traced_wall_us) << transport;
    EXPECT_GT(sum_us, 0) << transport;
    const model::RankTrace back = model::deserialize(model::serialize(mine));
    ASSERT_EQ(back.ops.size(), mine.ops.size());
    for (size_t i = 0; i < mine.ops.size(); ++i) {
      if (std::isnan(mine.ops[i].measured_host_us)) EXPECT_TRUE(std::isnan(back.ops[i].measured_host_us)) << i;
      else EXPECT_EQ(back.ops[i].measured_host_us, mine.ops[i].measured_host_us) << i;
    }
    const Traced unmeasured = run_groups(transport, false, false, topts);
    for (const model::Op& op : unmeasured.traces[me].ops)
      EXPECT_TRUE(std::isnan(op.measured_host_us)) << transport << ": an unmeasured trace with a host time";
  }
}

}  // namespace
