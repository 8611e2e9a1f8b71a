// Names and IEEE half conversions for DType.
#include "base/dtype.hpp"

#include <cmath>

#include "base/error.hpp"

namespace uipc {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "?";
}

DType parse_dtype(const std::string& name, const std::string& field) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kFP16;
  if (name == "fp32") return DType::kFP32;
  throw InputError(field + ": unknown dtype '" + name + "' (allowed: bf16, fp16, fp32)");
}

float fp16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      float f = std::ldexp(static_cast<float>(mant), -24);
      return (h & 0x8000u) ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;         // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;        // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                              // below the smallest normal: subnormal or 0
    float a;
    std::memcpy(&a, &abs, 4);
    // Scale so that one fp16 subnormal ulp (2^-24) becomes 1, round to nearest even.
    float scaled = a * 16777216.0f;
    float r = std::nearbyint(scaled);  // default rounding mode: to nearest even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112u;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;  // may carry into the exponent
  return sign | static_cast<uint16_t>(half);
}

}  // namespace uipc
