// The per-rank memory estimate of a case (lib/run/memory_estimate.cpp says what it counts).
#pragma once

#include <cstddef>

#include "lib/deck/deck.hpp"

namespace uipc {

// Peak bytes one rank holds while running case c on `world` ranks: device buffers and
// host vectors together (in simulation mode both are the same RAM). rank0 adds the
// dense reference that rank 0 computes and scatters. sim_mode adds the host device's
// kernel and MPI-collective temporaries (simulation mode only; on GPUs those buffers
// do not exist and the estimate is then of device buffers plus host-side vectors).
// Saturates at SIZE_MAX instead of overflowing. The case should fit `world`
// (validate_case_for_world); ulysses is resolved as the run resolves it.
size_t estimate_case_bytes_per_rank(const Case& c, int world, bool rank0, bool sim_mode = true);

}  // namespace uipc
