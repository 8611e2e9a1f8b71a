// Rates for the machine model read from bench_kernels' HDF5 output (docs/model.md,
// "Rates from benchmarks"): the norm+RoPE profile by norm kind, dtype and head_dim, the
// GEMM profile by shape and the attention profile by shape, so that `ulysses-ipc model calibrate|validate|loo` take the rates the measured code had
// rather than typed-in ones.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/machine.hpp"

namespace uipc {

// How a bench file says its code's layer launched Q's and K's norm+RoPE: this attribute of
// its bench_kernels group, this value for Q and K in one launch, and the suffix of those
// rows' names (bench_kernels writes them; read_norm_rope_profile picks rows by them).
inline constexpr const char* kNormRopeLayerLaunchAttr = "norm_rope_layer_launch";
inline constexpr const char* kNormRopeQkOneLaunch = "qk_one_launch";
inline constexpr const char* kNormRopeQkRowSuffix = " (the pick, Q+K one launch)";

// The `what` of bench_kernels' GEMM-by-shape rows (section gemm_shapes; shape "M<m> K<k>
// N<n> bf16", rate in TFLOP/s): written by the bench, read as the GEMM profile.
inline constexpr const char* kGemmShapeRowWhat = "GEMM by shape (cuBLASLt, bf16 in and out)";

// The `what` of bench_kernels' attention-by-shape rows (section attention_shapes: every
// shipped deck's attention at Ulysses 1, 2, 4 and 8, sequences to 119k; shape "B<b> H<h>
// S<s> D<d> bf16", rate in TFLOP/s): written by the bench, read as the attention profile.
inline constexpr const char* kAttentionShapeRowWhat = "attention by shape (cuDNN SDPA, bf16)";

// bench_kernels' floor-op rows (section latency): the latency floor deck's own ops, one of the
// names below each, in three rows (floor_op_what): as a graph node (kGraphRows: the GPU's time
// per op), issued op by op (kStreamRows: the GPU's), and the host's enqueue per call
// (kHostRows); us. Written by the bench, the host rows read as a host's call costs.
inline constexpr const char* kGraphRows = "graph";
inline constexpr const char* kStreamRows = "streams";
inline constexpr const char* kHostRows = "host";
inline constexpr const char* kFloorOpPrefix = "floor op: ";
inline constexpr const char* kFloorOpQkProjection = "QK projection (cuBLASLt)";
inline constexpr const char* kFloorOpOutProjection = "output projection (cuBLASLt, fp32 out)";
inline constexpr const char* kFloorOpNormRope = "norm+RoPE, Q and K in one launch";
inline constexpr const char* kFloorOpAttention = "attention";
inline constexpr const char* kFloorOpConversion = "fp32 -> bf16 conversion";
inline constexpr const char* kFloorOpCopy = "V's 2-D copy out of the QKV rows";
// The scatter's own fixed costs at one rank: the nccl transport's all-to-all (a copy to the
// rank itself) and one end of the IPC handshake (a write of a 64-bit word, a wait on it).
inline constexpr const char* kFloorOpNcclOneRank = "NCCL all-to-all at one rank";
inline constexpr long long kFloorOpNcclOneRankBytes = 256LL * 3 * 512 * 2;  // the floor's Q, K and V, bf16
inline constexpr const char* kFloorOpMemop = "a stream write and wait of a 64-bit word";
// The graph-node rows' variants (each "<way>: <variant>") that a GPU's own costs read: empty
// kernels alone, and each with a timed event recorded after it.
inline constexpr const char* kEmptyKernels = "empty kernels";
inline constexpr const char* kEmptyKernelsRecorded = "empty kernels, an event recorded after each";
// The IPC handshake at one rank behind each empty kernel, as the ipc and vmm transports issue it
// at Ulysses1 (comm/transport/ipc_transport.cpp): three ordering records on the compute stream,
// each waited on by a high-priority stream, which writes its word and waits on it, records, and
// the compute stream waits on that record. And the word's write and wait on the compute stream
// itself, no stream crossed: the two differ by the hops.
inline constexpr const char* kEmptyKernelsHandshake = "empty kernels, the one-rank IPC handshake after each";
inline constexpr const char* kEmptyKernelsMemop = "empty kernels, a stream write and wait after each";
// The scatter of a layer whose every stage is timed (--stage-timing on), at Ulysses1 over ipc or
// vmm, behind each empty kernel: the handshake above with the stage events the layer records
// around it (seven timed records, two of them V's interval on the high-priority stream); and the
// same without V's interval.
inline constexpr const char* kEmptyKernelsStagedScatter = "empty kernels, a staged layer's one-rank IPC scatter after each";
inline constexpr const char* kEmptyKernelsStagedScatterNoV =
    "empty kernels, a staged layer's one-rank IPC scatter without V's interval after each";
// The `what` of the floor-op row of `op` timed `way` (kGraphRows, kStreamRows or kHostRows).
inline std::string floor_op_what(const char* way, const char* op) {
  return std::string(way) + ": " + kFloorOpPrefix + op;
}
// The latency section's event-hop row, whose note gives the host's enqueue of a record and a
// wait ("host enqueue <x> us per hop").
inline constexpr const char* kEventHopRowWhat = "event hop between two streams (record + wait)";

// The host's call costs that `path` (a bench_kernels -o file with the floor-op rows, code
// f5ae572 on) measured, as the machine's parameters (us): host_gemm_us (the mean of the two
// cuBLASLt calls), host_attention_us, host_launch_us (the mean of norm+RoPE's and the
// conversion's launches), host_copy_us and, where the event-hop row's note gives it,
// host_api_us (half a record + wait). Throws InputError for a file without those rows.
std::map<std::string, double> read_host_costs(const std::string& path);

// The GPU's own device costs that `path` (a bench_kernels -o file with the empty-kernel and
// floor-op rows, code f5ae572 on) measured, op by op and as graph nodes (model/machine.hpp,
// DeviceCosts); the NCCL and memory-op rows where it has them (code db07774 on). Throws
// InputError for a file without the others, or with a figure outside [0.01, 1000] us.
model::DeviceCosts read_device_costs(const std::string& path);

// Each graph-node variant (lib/report/node_sequences.hpp) that `path` measured, beside the
// same steps replayed on `machine` with that GPU's own costs (read_device_costs) and no host
// in the way (the bench times the GPU alone: its chains are enqueued behind a gate): us per
// kernel, op by op and as a graph. Variants the file has no rows of are left out. Throws as
// read_device_costs.
struct NodeRowReplay {
  std::string what;
  model::IssueCost measured, modelled;
};
std::vector<NodeRowReplay> replay_node_rows(const model::Machine& machine, const std::string& path);

// The dispatched norm+RoPE kernel's rate of every norm kind, dtype and head_dim that
// `path` (a bench_kernels -o file) measured in the fused QKV view, each point's source
// naming the file and the code it measured (its `revision` attribute). Throws InputError
// for a file that is not bench_kernels' or holds no such row.
std::vector<model::NormRopePoint> read_norm_rope_profile(const std::string& path);

// The profiles a machine takes from `--rates` files: each file gives what it holds (its
// norm+RoPE rows, its GEMM-by-shape rows, its attention-by-shape rows); empty where no
// file gave one. Throws InputError for a file that holds none, or for two files giving
// the same profile.
struct BenchRates {
  std::vector<model::NormRopePoint> norm_rope;
  std::vector<model::GemmPoint> gemm;
  std::vector<model::AttentionPoint> attention;
};
BenchRates read_bench_rates(const std::vector<std::string>& paths);

}  // namespace uipc
