// The NCCL implementation of the stream-ordered collectives (comm/collectives/collectives.hpp):
// the `nccl` transport's data path, the output gather and the TP all-reduce on GPUs.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/collectives/collectives.hpp"

namespace uipc {

// Collective over `comm` (every rank calls it; the current CUDA device of each rank is
// the one used). NCCL needs one GPU per rank: two ranks of `comm` on one GPU give a
// RuntimeError saying so, on every rank, before NCCL is asked. A rank that does not
// join within timeout_s is a PeerTimeout on the others; so is a communicator that takes
// longer than that to enqueue a collective.
// zero_cta: the communicator's CTA policy is NCCL_CTA_POLICY_ZERO, under which NCCL
// (2.28 and later) runs all-to-alls between registered windows on copy engines, with no
// kernel on the SMs (the nccl-ce transport's communicator).
std::unique_ptr<Collectives> make_nccl_collectives(MPI_Comm comm, double timeout_s, bool zero_cta = false);

// "2.28.3": the NCCL library loaded at run time, for provenance.
std::string nccl_version_string();

}  // namespace uipc
