// Mode selection and the one place that knows which device layer exists: simulation
// (host device, Kokkos kernels, MPI collectives) or GPU (CUDA device, CUDA kernels,
// NCCL collectives). Nothing else in the code asks whether CUDA was built.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/collectives/collectives.hpp"
#include "comm/device/device.hpp"
#include "comm/device/tracing_device.hpp"
#include "kernels/kernels.hpp"
#include "lib/run/run_shape.hpp"

namespace uipc {

struct BackendOptions {
  std::string mode = "auto";     // auto | sim | gpu | model
  bool allow_shared_gpu = false; // several ranks on one GPU (functional testing only)
};

struct Backend {
  Mode mode = Mode::kSim;        // gpu, sim or model (host device, no data, no arithmetic)
  // The device layer, wrapped in its recording decorator (`tracer` is the same object):
  // every mode can trace a layer.
  std::unique_ptr<Device> device;
  TracingDevice* tracer = nullptr;
  std::unique_ptr<LayerKernels> kernels;
  bool nccl_usable = false;      // NCCL needs one GPU per rank
  std::string nccl_unusable_reason;
  std::string versions_cuda, versions_nccl;  // "" where not present
  // Collectives over `comm`: NCCL where usable, else MPI staged through the host.
  std::unique_ptr<Collectives> make_collectives(MPI_Comm comm) const;
  // The nccl-ce transport's collectives over `comm`: a zero-CTA NCCL communicator on
  // GPUs where NCCL is usable, MPI in simulation mode; nullptr with `why` where NCCL
  // cannot run (ranks sharing a GPU). Collective over comm.
  std::unique_ptr<Collectives> make_ce_collectives(MPI_Comm comm, std::string* why) const;
  // The implementation the last attention call used ("host", "cudnn-sdpa", "reference").
  std::string attention_path() const;
};

// Picks the mode (auto: gpu when CUDA devices are usable, else sim; model only when
// asked) and builds the
// backend for this rank. Collective over `world`. Throws InputError / RuntimeError
// with a clear message (e.g. --mode gpu without a GPU).
Backend make_backend(const BackendOptions& opt, MPI_Comm world);

// Whether this binary has the CUDA device layer, and how many usable GPUs it sees
// (0 without a driver or a GPU; never throws).
bool cuda_built();
int usable_gpu_count();

}  // namespace uipc
