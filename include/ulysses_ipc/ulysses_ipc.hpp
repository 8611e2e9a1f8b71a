// ulysses_ipc: the Ulysses scatter of ulysses-ipc as a library, for an inference engine
// of one's own (docs/library.md). A Communicator over an MPI communicator and a Device
// moves each rank's sequence shard (B, S/P, H, D) of Q, K and V, from any row pitch,
// into the head-parallel layout (B, S, H/P, D) on every rank, and back (the output
// gather): tagged submissions, one completion handshake per group (the barrier on its
// last submission), a consumer stream that waits only where it uses a result, and an
// explicit release before peers may write into the targets again.
//
// On GPUs the transport is the node-local CUDA-IPC copy-engine path (`ipc`, or `vmm` on
// library-owned memory) with NCCL as the fallback; on the simulated device every rank is
// a simulated GPU on the CPU running the same protocol. Errors are ulysses_ipc::Error.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace ulysses_ipc {

// What went wrong, as the ulysses-ipc program's exit codes say it.
enum class ErrorKind : int {
  kBadInput = 2,     // a bad argument (unknown transport, shapes that do not divide)
  kRuntime = 3,      // a device, transport or MPI call failed
  kPeerTimeout = 4,  // a peer did not arrive within the device's watchdog
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

enum class DType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };
enum class Tag : int { kQ = 0, kK = 1, kV = 2, kO = 3 };
enum class Direction : int { kScatter = 0, kGather = 1 };

// -------------------------------------------------------------------- the device

// An in-order queue of device work. On a CUDA device it is a CUDA stream (native() is
// its cudaStream_t: launch your kernels on it); on the simulated device it is a queue
// served by a worker thread of this process (native() is nullptr).
class Stream {
 public:
  struct Impl;
  explicit Stream(std::unique_ptr<Impl> impl);
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  ~Stream();
  // Blocks until the work enqueued so far is done; bounded by the device's watchdog.
  void synchronize();
  void* native() const;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Device memory of this rank, freed when it goes.
class Buffer {
 public:
  struct Impl;
  explicit Buffer(std::unique_ptr<Impl> impl);
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  ~Buffer();
  void* data() const;
  size_t bytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// The GPU a rank runs on: a CUDA device, or a simulated GPU on the CPU.
class Device {
 public:
  struct Impl;
  // This rank's simulated GPU: device memory is process memory that the ranks of a node
  // share, streams are worker threads, the epoch words are atomics. `comm` names this
  // rank (its rank there keeps shared-memory names apart).
  static Device simulated(MPI_Comm comm = MPI_COMM_WORLD);
  // CUDA device `ordinal`, made current. Error (kRuntime) when it cannot be used or the
  // library was built without CUDA.
  static Device cuda(int ordinal);
  // CUDA devices this process can use: 0 without CUDA in the library, a driver or a GPU.
  static int cuda_device_count();

  explicit Device(std::unique_ptr<Impl> impl);
  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  ~Device();

  std::string name() const;  // "NVIDIA H200 (0)", "simulated GPU (host, rank 1)"
  bool is_cuda() const;
  Buffer alloc(size_t bytes);
  // Synchronous copies between host memory and this device's memory.
  void copy_to_device(void* dst, const void* src, size_t bytes);
  void copy_to_host(void* dst, const void* src, size_t bytes);
  Stream create_stream(bool high_priority = false);
  // `waiter` waits for the work enqueued on `on` so far (an event between the two).
  void stream_wait(Stream& waiter, Stream& on);
  // The bound on every wait for a peer (seconds; 60 by default).
  void set_watchdog_seconds(double s);
  double watchdog_seconds() const;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// -------------------------------------------------------------------- the exchange

// The exchanged tensor, the same for both directions: a scatter takes (B, S/P, H, D)
// and yields (B, S, H/P, D) on each of the P ranks; a gather the other way round.
struct Shape {
  int64_t batch = 0;
  int64_t seq_local = 0;  // S / P: the tokens of each rank
  int heads = 0;          // H: every head (a multiple of P)
  int head_dim = 0;
  DType dtype = DType::kBF16;
};

struct Submission {
  Tag tag = Tag::kQ;
  Direction dir = Direction::kScatter;
  const void* src = nullptr;   // device memory of this rank
  int64_t src_row_pitch = 0;   // elements between token rows of src (scatter; 0 = dense)
  Shape shape;
  bool barrier = false;        // the last submission of its group
};

// The result of one submission. data() is this rank's part of the result in its final
// layout, in device memory; use it only on a stream that wait() was enqueued on, after
// the group's barrier has been submitted. Valid until the next group of the same tag
// and direction, and never after its Communicator.
class Exchange {
 public:
  struct Impl;
  explicit Exchange(std::unique_ptr<Impl> impl);
  Exchange(Exchange&&) noexcept;
  Exchange& operator=(Exchange&&) noexcept;
  ~Exchange();
  void* data() const;
  void wait(Stream& consumer);

 private:
  std::unique_ptr<Impl> impl_;
};

struct Options {
  // ipc (then nccl), vmm (then nccl), nccl, nccl-ce (NCCL's copy-engine all-to-all where
  // NCCL offers it, then nccl), or hier (a communicator over several nodes: IPC inside
  // each node, one message per remote node between same-index ranks; on one node, ipc)
  std::string transport = "ipc";
  int cache_entries = 12;  // final-layout targets kept (tag, direction, shape, dtype)
  int hier_chunks = 4;     // token chunks per batch in hier's pipeline
  // 0: nodes are the ranks that share a host (MPI's shared-memory split); N: blocks of N
  // consecutive ranks, each within one host (several nodes tested on one machine)
  int ranks_per_node = 0;
};

struct Stats {
  int64_t groups = 0, handshakes = 0;
  int64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
};

class Communicator {
 public:
  struct Impl;
  // Collective over `comm`: every rank calls it with its own device. Picks the first of
  // the transports `opt.transport` names that can serve every rank (IPC needs one node,
  // peer access and 64-bit stream memory operations), before any group starts; a later
  // failure is raised, never a fallback. `dev` must outlive the communicator.
  static Communicator create(MPI_Comm comm, Device& dev, const Options& opt = {});

  explicit Communicator(std::unique_ptr<Impl> impl);
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  // Without close(): frees this rank's resources only (error paths; peers may still map them).
  ~Communicator();

  // `producer` is the stream on which src becomes ready. Every rank submits the same
  // sequence of tags and shapes.
  Exchange submit(const Submission& sub, Stream& producer);
  // `consumer` has finished reading the results of the last group: peers may write into
  // those targets again once `consumer` reaches this point. Call it once per group,
  // before the next group of the same tags is submitted.
  void release(Stream& consumer);
  // Collective: closes this rank's mappings of its peers' memory, waits (bounded) for
  // every rank to have done so, then frees. Streams must be idle. Idempotent.
  void close();

  std::string transport() const;        // the one that serves: ipc, vmm or nccl
  std::string fallback_reason() const;  // why it is not the requested one ("" = it is)
  Stats stats() const;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// "0.1.0 (git revision)".
std::string version();

}  // namespace ulysses_ipc
