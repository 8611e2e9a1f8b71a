// The discrete-event simulator: a pure function of (every rank's trace, a machine) ->
// when each op started and ended, in ms from the start of the layer. Deterministic: the
// same traces and machine give the same timeline, bit for bit.
//
// What it models (docs/model.md says more, and what it leaves out):
//  - the host issuing each rank's ops in trace order at a cost per call (a device op
//    starts no earlier than its issue), blocked by host syncs and held by memory calls
//    (allocation, descriptor import and map, free: their measured host times);
//  - in-order streams; event waits end an event hop after the record; a wait on a word
//    ends no earlier than the modelled time of the write it waits for (plus the link's
//    latency when the writer is another GPU);
//  - kernels (GEMM and attention by rate and wave quantisation, memory-bound kernels by
//    bytes) and same-device copies sharing each GPU's SMs; an SM copy beside a kernel
//    runs at a share of its own rate while the kernel is held back;
//  - peer copies as flows over each GPU's link egress and ingress, shared max-min fairly,
//    each on a copy engine (finite) or on SMs, per the machine;
//  - NCCL collectives as a rendezvous of their group with a latency + bandwidth cost over
//    NVLink inside a node and the NIC across nodes.
#pragma once

#include <vector>

#include "model/machine.hpp"
#include "model/trace/trace.hpp"

namespace uipc::model {

struct Timeline {
  std::vector<std::vector<OpTime>> ranks;  // [rank][op], as the traces' ops
  // Value waits satisfied by a write from before the trace (RankTrace::prior_writes:
  // an earlier layer's release epoch, say): they end as soon as they start.
  int waits_before_trace = 0;
};

// How the layer was issued: op by op from the host (each op costs the host its call), or
// replayed as one captured graph (lib/run/layer_graph.hpp: the host launches it once; the
// GPU then meets every op's own latencies, but no host call stands between two ops).
enum class Issue { kOpByOp, kGraphReplay };

// traces[r] must be rank r's (every rank of one world). Throws InputError for traces
// that do not fit together or do not fit the machine, and RuntimeError for a deadlock
// (no op can make progress), naming the stuck ops.
Timeline simulate(const std::vector<RankTrace>& traces, const Machine& machine, Issue issue = Issue::kOpByOp);

// The time `op` takes on its own on an idle GPU of `machine`, after its fixed latency
// (for tests and the docs). Peer copies at the link's rate; collectives and waits: 0.
double standalone_work_ms(const Op& op, const Machine& machine, bool peer);

}  // namespace uipc::model
