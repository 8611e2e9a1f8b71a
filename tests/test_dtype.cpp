// bf16/fp16 conversions against float64-derived expectations on fresh random values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/dtype.hpp"

using namespace uipc;

namespace {
// The nearest value of a format with `mant` stored mantissa bits (ties to even), in double.
double round_to_format(double x, int mant, int min_exp) {
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, f in [0.5, 1)
  int exp = std::max(e - 1, min_exp);
  double ulp = std::ldexp(1.0, exp - mant);
  return std::nearbyint(x / ulp) * ulp;
}
}  // namespace

TEST(DType, Bf16RoundsToNearestEven) {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
  for (int i = 0; i < 100000; ++i) {
    float f = dist(gen) * std::pow(2.0f, static_cast<float>(static_cast<int>(gen() % 40) - 20));
    double want = round_to_format(f, 7, -126);
    ASSERT_EQ(static_cast<double>(bf16_to_float(float_to_bf16(f))), want) << "f=" << f;
  }
}

TEST(DType, Fp16RoundsToNearestEvenWithSubnormals) {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int i = 0; i < 100000; ++i) {
    float f = dist(gen) * std::pow(2.0f, static_cast<float>(static_cast<int>(gen() % 40) - 25));
    double want = round_to_format(f, 10, -14);
    if (std::fabs(want) >= 65520.0) continue;
    ASSERT_EQ(static_cast<double>(fp16_to_float(float_to_fp16(f))), want) << "f=" << f;
  }
  EXPECT_TRUE(std::isinf(fp16_to_float(float_to_fp16(70000.0f))));
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(DType, Fp16AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), h) << "h=" << h;
  }
}
