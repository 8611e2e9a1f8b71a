// One check of Device::copy_2d_batch (comm/device/device.hpp), run on the host device
// (tests/test_host_device.cpp) and on a GPU (tests/test_cuda_device.cpp): four strided
// slices of each row into four pitched targets as one batch (the copies of a scatter to
// four peers), plus an empty copy that is skipped; every target holds its slice bit for
// bit and its padding stays untouched.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/device/device.hpp"

namespace uipc::testing {

inline void check_copy_2d_batch_is_every_copy_exactly(Device& dev) {
  auto s = dev.create_stream(StreamPriority::kHigh);
  const size_t rows = 77, slice = 3 * 64 * 2, src_pitch = 5 * slice, dst_pitch = slice + 32;
  std::vector<unsigned char> src(rows * src_pitch);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 11);
  auto dsrc = dev.alloc(src.size());
  dev.copy_to_device(dsrc.get(), src.data(), src.size());
  std::vector<DeviceBuffer> dst;
  std::vector<Copy2DOp> ops;
  for (int j = 0; j < 4; ++j) {
    dst.push_back(dev.alloc(rows * dst_pitch));
    dev.memset(*s, dst.back().get(), 0xEE, rows * dst_pitch);
    ops.push_back({dst.back().get(), dst_pitch, dsrc.as<unsigned char>() + (j + 1) * slice, src_pitch, slice, rows});
  }
  ops.push_back({dst[0].get(), dst_pitch, dsrc.get(), src_pitch, 0, rows});  // empty: skipped
  dev.copy_2d_batch(*s, ops);
  s->synchronize();
  for (int j = 0; j < 4; ++j) {
    std::vector<unsigned char> got(rows * dst_pitch);
    dev.copy_to_host(got.data(), dst[j].get(), got.size());
    for (size_t r = 0; r < rows; ++r) {
      ASSERT_EQ(0, std::memcmp(&got[r * dst_pitch], &src[r * src_pitch + (j + 1) * slice], slice)) << j << " row " << r;
      for (size_t b = slice; b < dst_pitch; ++b) ASSERT_EQ(got[r * dst_pitch + b], 0xEE) << "padding, " << j << " row " << r;
    }
  }
}

}  // namespace uipc::testing
