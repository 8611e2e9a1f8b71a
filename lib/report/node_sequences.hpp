// What bench_kernels' graph-node rows issue around each of their empty kernels (or copies), as data: the
// bench issues these steps on the GPU (benchmarks/bench_kernels.cpp, graph_node_rows), and
// `ulysses-ipc model nodes --gpu` builds the same steps into a trace and replays it on the
// machine with that GPU's own costs (lib/report/model_bench.hpp, replay_node_rows), so that
// the model's rules for records, hops and the handshake's memory operations are checked
// against the micro-benchmark that times their composites, one sequence at a time.
#pragma once

#include <vector>

#include "lib/report/model_bench.hpp"

namespace uipc {

// The streams a sequence uses: the kernels' own, a second one of normal priority, and a
// high-priority one (the transports' copy stream).
enum class NodeStream : int { kCompute = 0, kSecond = 1, kCopy = 2 };
inline constexpr int kNodeStreams = 3;

// One call behind (or before) a kernel. Events are the kernel's own, numbered 0 ..
// kNodeEvents - 1: a record records event `event` (timed, or ordering: created without timing;
// one event is one or the other throughout a variant), a wait waits on its last record. The
// word is one 64-bit word already holding 1: every wait on it is met at once, so what is timed
// is the fixed cost.
struct NodeStep {
  enum Kind { kRecordTimed, kRecordOrdering, kWaitEvent, kWriteWord, kWaitWord };
  Kind kind;
  NodeStream stream;
  int event = 0;
};
inline constexpr int kNodeEvents = 10;

// Empty kernels a chain (one graph) holds, times a graph is launched (and chains issued op by
// op, by default), and the runs whose median is a row's figure where one run is not enough.
inline constexpr int kNodeKernels = 20;
inline constexpr int kNodeLaunches = 20;
inline constexpr int kNodeMedianRuns = 9;

// What a chain holds kNodeKernels of: an empty kernel (one block that ends at once), or a
// same-device copy of kNodeCopyBytes (kNodeCopyRow-byte rows, contiguous): work that reads and
// writes memory, as the layer's producers do, behind which an event may reach a waiting
// stream later than behind an empty kernel (docs/model.md, "Events behind work").
enum class NodeWork { kEmptyKernel, kCopy };
inline constexpr long long kNodeCopyBytes = 1 << 20, kNodeCopyRow = 1024;

struct NodeVariant {
  const char* what;              // the row's name, after "graph: " or "streams: "
  std::vector<NodeStep> before;  // issued before each kernel that has steps (has_steps)
  std::vector<NodeStep> after;   // issued after it
  // Chains op by op in one gated run, runs (the figure is their median), and the gate in
  // multiples of the bench's: a kernel with a handshake is ten calls, with a staged scatter 24,
  // whose enqueue must stay inside the gate.
  int chains = kNodeLaunches, trials = 1, gate_multiple = 1;
  NodeWork work = NodeWork::kEmptyKernel;
  int kernels = kNodeKernels;  // kernels a chain (a graph) holds
  // The steps go around one kernel in `every` (the last of each `every`): as a layer's graph
  // holds one scatter among some fifty nodes, most of them kernels.
  int every = 1;
};

// Whether kernel i of a chain of v has v's steps before and after it.
inline bool has_steps(const NodeVariant& v, int i) { return (i + 1) % v.every == 0; }

// Every graph-node variant, in the bench's order. Two timed records back to back: what a
// record behind a record costs (1.36 us on the H200 at 9d2ed1a, against 2.34 behind a
// kernel; docs/model.md, "A record behind a record").
inline const std::vector<NodeVariant>& node_variants() {
  using S = NodeStep;
  constexpr NodeStream a = NodeStream::kCompute, b = NodeStream::kSecond, hp = NodeStream::kCopy;
  // The one-rank IPC handshake as the ipc and vmm transports issue it at Ulysses1: Q's, K's and
  // V's submissions (the one event recorded again), each waited on by the copy stream, which
  // writes its word, waits on it and records; the compute stream waits on that.
  const std::vector<S> handshake = {
      {S::kRecordOrdering, a, 0}, {S::kWaitEvent, hp, 0}, {S::kRecordOrdering, a, 0}, {S::kWaitEvent, hp, 0},
      {S::kRecordOrdering, a, 0}, {S::kWaitEvent, hp, 0}, {S::kWriteWord, hp},        {S::kWaitWord, hp},
      {S::kRecordOrdering, hp, 1}, {S::kWaitEvent, a, 1}};
  // The scatter of a layer whose every stage is timed, as its traced layer issues it at
  // Ulysses1 (`model ops` on docs/measured/2026-12-06-h100-54ff11e's graphs-floor-u1): a timed
  // record (the previous stage's end); the copy stream's wait on the release word; Q's, K's and
  // V's ordering records each waited on by the copy stream, a timed record on the compute
  // stream after Q's and K's; on the copy stream V's interval (two timed records), the word's
  // write and wait and an ordering record; on the compute stream a timed record, three waits on
  // that record and a timed record (the scatter's end). Before the kernel the copy stream waits
  // on an ordering record: it follows the layer from its start (begin_layer).
  auto staged = [&](bool v_interval) {
    std::vector<S> s = {{S::kRecordTimed, a, 3},    {S::kWaitWord, hp},        {S::kRecordOrdering, a, 0},
                        {S::kWaitEvent, hp, 0},     {S::kRecordTimed, a, 4},   {S::kRecordOrdering, a, 0},
                        {S::kWaitEvent, hp, 0},     {S::kRecordTimed, a, 5},   {S::kRecordOrdering, a, 0},
                        {S::kWaitEvent, hp, 0}};
    if (v_interval) s.insert(s.end(), {{S::kRecordTimed, hp, 6}, {S::kRecordTimed, hp, 7}});
    s.insert(s.end(), {{S::kWriteWord, hp},
                       {S::kWaitWord, hp},
                       {S::kRecordOrdering, hp, 1},
                       {S::kRecordTimed, a, 8},
                       {S::kWaitEvent, a, 1},
                       {S::kWaitEvent, a, 1},
                       {S::kWaitEvent, a, 1},
                       {S::kRecordTimed, a, 9}});
    return s;
  };
  const std::vector<S> follow = {{S::kRecordOrdering, a, 2}, {S::kWaitEvent, hp, 2}};
  static const std::vector<NodeVariant> v = {
      {kEmptyKernels, {}, {}},
      {kEmptyKernelsRecorded, {}, {{S::kRecordTimed, a, 0}}},
      {"empty kernels, two events recorded after each", {}, {{S::kRecordTimed, a, 0}, {S::kRecordTimed, a, 1}}},
      {"empty kernels, an ordering event recorded after each", {}, {{S::kRecordOrdering, a, 0}}},
      {"empty kernels, a hop to a second stream and back after each",
       {},
       {{S::kRecordTimed, a, 0}, {S::kWaitEvent, b, 0}, {S::kRecordTimed, b, 1}, {S::kWaitEvent, a, 1}}},
      {"empty kernels, a hop through ordering events after each",
       {},
       {{S::kRecordOrdering, a, 0}, {S::kWaitEvent, b, 0}, {S::kRecordOrdering, b, 1}, {S::kWaitEvent, a, 1}}},
      {kEmptyKernelsMemop, {}, {{S::kWriteWord, a}, {S::kWaitWord, a}}, 4, kNodeMedianRuns},
      {kEmptyKernelsHandshake, {}, handshake, 2, kNodeMedianRuns},
      {kEmptyKernelsStagedScatter, follow, staged(true), 1, kNodeMedianRuns, 4},
      {kEmptyKernelsStagedScatterNoV, follow, staged(false), 1, kNodeMedianRuns, 4},
      // A timed record behind a wait: on a word, and on another stream's event.
      {"empty kernels, a stream write and wait, then an event recorded after each",
       {},
       {{S::kWriteWord, a}, {S::kWaitWord, a}, {S::kRecordTimed, a, 2}},
       4,
       kNodeMedianRuns},
      {"empty kernels, a hop through ordering events, then an event recorded after each",
       {},
       {{S::kRecordOrdering, a, 0},
        {S::kWaitEvent, b, 0},
        {S::kRecordOrdering, b, 1},
        {S::kWaitEvent, a, 1},
        {S::kRecordTimed, a, 2}},
       4,
       kNodeMedianRuns},
      // The same behind a copy of 1 MB: does what an event follows decide when it is met?
      {"1 MB copies", {}, {}, 4, kNodeMedianRuns, 1, NodeWork::kCopy},
      {"1 MB copies, an event recorded after each", {}, {{S::kRecordTimed, a, 0}}, 4, kNodeMedianRuns, 2,
       NodeWork::kCopy},
      {"1 MB copies, a hop through ordering events after each",
       {},
       {{S::kRecordOrdering, a, 0}, {S::kWaitEvent, b, 0}, {S::kRecordOrdering, b, 1}, {S::kWaitEvent, a, 1}},
       2,
       kNodeMedianRuns,
       2,
       NodeWork::kCopy},
      {"1 MB copies, a staged layer's one-rank IPC scatter after each", follow, staged(true), 1, kNodeMedianRuns, 4,
       NodeWork::kCopy},
      // One kernel a graph, as a layer's graph holds one scatter: does a graph of twenty cost
      // each its records as a graph of one does?
      {"one empty kernel a graph", {}, {}, kNodeLaunches, kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 1},
      {"one empty kernel a graph, two events recorded after it", {}, {{S::kRecordTimed, a, 0}, {S::kRecordTimed, a, 1}},
       kNodeLaunches, kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 1},
      {"one empty kernel a graph, a staged layer's one-rank IPC scatter after it", follow, staged(true), kNodeLaunches,
       kNodeMedianRuns, 2, NodeWork::kEmptyKernel, 1},
      {"one empty kernel a graph, the one-rank IPC handshake after it", {}, handshake, kNodeLaunches, kNodeMedianRuns, 1,
       NodeWork::kEmptyKernel, 1},
      {"one empty kernel a graph, an event recorded after it", {}, {{S::kRecordTimed, a, 0}}, kNodeLaunches,
       kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 1},
      // Between one and twenty: how an event node's cost grows with the graph's event nodes.
      {"two empty kernels a graph, a staged layer's one-rank IPC scatter after each", follow, staged(true), 10,
       kNodeMedianRuns, 2, NodeWork::kEmptyKernel, 2},
      {"five empty kernels a graph, a staged layer's one-rank IPC scatter after each", follow, staged(true), 4,
       kNodeMedianRuns, 2, NodeWork::kEmptyKernel, 5},
      {"five empty kernels a graph, two events recorded after each", {}, {{S::kRecordTimed, a, 0}, {S::kRecordTimed, a, 1}},
       4, kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 5},
      {"five empty kernels a graph", {}, {}, 4, kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 5},
      // Forty kernels a graph, the steps after the last only: does an event node cost what it
      // costs in a graph of one when the graph is large but holds few events (a layer's graph:
      // one scatter among its kernels), or what it costs among twenty of its kind?
      {"forty empty kernels a graph", {}, {}, 2, kNodeMedianRuns, 1, NodeWork::kEmptyKernel, 40},
      {"forty empty kernels a graph, two events recorded after the last",
       {},
       {{S::kRecordTimed, a, 0}, {S::kRecordTimed, a, 1}},
       2,
       kNodeMedianRuns,
       1,
       NodeWork::kEmptyKernel,
       40,
       40},
      {"forty empty kernels a graph, a staged layer's one-rank IPC scatter after the last", follow, staged(true), 2,
       kNodeMedianRuns, 2, NodeWork::kEmptyKernel, 40, 40}};
  return v;
}

}  // namespace uipc
