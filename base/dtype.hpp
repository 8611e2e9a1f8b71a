// Element types the layer stores (bf16, fp16, fp32) and exact host conversions.
// Math is always fp32; storage follows the deck's dtype. Conversions round to
// nearest even, as the GPU's __float2bfloat16 / __float2half do.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace uipc {

enum class DType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

inline size_t dtype_size(DType t) { return t == DType::kFP32 ? 4 : 2; }
const char* dtype_name(DType t);
// Throws InputError naming the field on an unknown name.
DType parse_dtype(const std::string& name, const std::string& field);

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);

// Element i of an array of type t, as float.
inline float load_as_float(DType t, const void* base, size_t i) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFP16: return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Stores v (rounded to t) as element i.
inline void store_from_float(DType t, void* base, size_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); break;
    case DType::kFP16: static_cast<uint16_t*>(base)[i] = float_to_fp16(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}

// v rounded to t and back: what storing in t keeps of v.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(float_to_bf16(v));
    case DType::kFP16: return fp16_to_float(float_to_fp16(v));
    default: return v;
  }
}

}  // namespace uipc
