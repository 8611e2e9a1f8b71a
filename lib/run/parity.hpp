// Parity: how a run checks its own output against the dense single-rank reference,
// agreed across ranks, and the digest that shows two runs' outputs bit-identical.
#pragma once

#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "comm/device/device.hpp"
#include "lib/deck/deck.hpp"
#include "lib/run/layout.hpp"

namespace uipc {

// Rank 0's dense reference (`full`, (B, S, C)) sent to every rank: returns this rank's
// (B, S_local, C) rows. Collective over MPI_COMM_WORLD.
std::vector<float> distribute_reference(const std::vector<float>& full, const Case& c, const Layout& l,
                                        double timeout_s);

struct Parity {
  double max_abs = 0, rel_l2 = 0;
  bool finite = true;
};

// The output `y` (dtype t) against `ref`, over every rank's shard. Collective.
Parity check_parity(Device& dev, const DeviceBuffer& y, DType t, const std::vector<float>& ref, double timeout_s);

// 16 hex digits over every rank's output bytes, combined in rank order. Collective.
std::string output_digest(Device& dev, const DeviceBuffer& y, size_t bytes, double timeout_s);

// This rank's output as fp32 values of the dtype.
std::vector<float> output_values(Device& dev, const DeviceBuffer& y, DType t, size_t n);

// Test hook (ULYSSES_TEST_CORRUPT_RANK=R): rank R spoils its first output element.
void corrupt_output_for_tests(Device& dev, const DeviceBuffer& y, DType t, int rank);
// Test hook (ULYSSES_TEST_OVERREACH_RANK): a copy past the output buffer on that rank.
void overreach_for_tests(Device& dev, Stream& s, const DeviceBuffer& y, int rank);

}  // namespace uipc
