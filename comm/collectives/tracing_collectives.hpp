// The recording decorator of the collectives (comm/collectives/collectives.hpp): each all-to-all and
// all-reduce becomes a trace record of the tracing device (its group of world ranks and
// its call number, so the simulator can make every member meet in it), then runs on the
// wrapped collectives; a grouped send/recv is recorded as one such meeting of the group. With the device's data work elided (--mode model) the wrapped
// collective still runs, on one 8-byte chunk, so that the ranks still meet in it.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/collectives/collectives.hpp"
#include "comm/device/tracing_device.hpp"

namespace uipc {

// `comm` is the communicator `inner` runs over (for the group's world ranks).
std::unique_ptr<Collectives> make_tracing_collectives(std::unique_ptr<Collectives> inner, TracingDevice& dev,
                                                      MPI_Comm comm);

}  // namespace uipc
