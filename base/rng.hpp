// Counter-based random numbers: element i of tensor `stream` under `seed` is a pure
// function of (seed, stream, i), so every rank generates its own shard of an input or
// weight and the dense reference generates the whole, with no communication.
#pragma once

#include <cstdint>

namespace uipc {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), 24 bits of resolution.
inline float uniform_pm1(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = splitmix64(splitmix64(seed ^ (stream * 0xd1b54a32d192ed03ull)) + index);
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace uipc
