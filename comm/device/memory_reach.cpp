// The table of device memory regions behind the reach checks (comm/device/memory_reach.hpp).
#include "comm/device/memory_reach.hpp"

#include <cstdio>
#include <map>
#include <mutex>

#include "base/error.hpp"

namespace uipc {
namespace {

struct Region {
  size_t bytes = 0;
  const char* kind = "";
};

struct RegionTable {
  std::mutex mu;
  std::map<uintptr_t, Region> regions;  // by base address
};

// Never destroyed: buffers held by static objects may be freed after main returns.
RegionTable& table() {
  static RegionTable* t = new RegionTable;
  return *t;
}

std::string hex(uintptr_t p) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(p));
  return text;
}

}  // namespace

void record_region(const void* base, size_t bytes, const char* kind) {
  if (base == nullptr) return;
  RegionTable& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  t.regions[reinterpret_cast<uintptr_t>(base)] = Region{bytes, kind};
}

void forget_region(const void* base) {
  if (base == nullptr) return;
  RegionTable& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  t.regions.erase(reinterpret_cast<uintptr_t>(base));
}

size_t span_bytes(const char* op, const char* what, size_t elems, size_t elem_size) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(elems, elem_size, &bytes))
    throw RuntimeError(std::string(op) + ": the " + what + " of " + std::to_string(elems) + " elements of " +
                       std::to_string(elem_size) + " bytes overflows a 64-bit byte count");
  return bytes;
}

size_t span_2d(const char* op, const char* what, size_t rows, size_t pitch, size_t width) {
  if (rows == 0 || width == 0) return 0;
  size_t head = 0, span = 0;
  if (__builtin_mul_overflow(rows - 1, pitch, &head) || __builtin_add_overflow(head, width, &span))
    throw RuntimeError(std::string(op) + ": the " + what + " of " + std::to_string(rows) + " rows of " +
                       std::to_string(width) + " bytes, pitch " + std::to_string(pitch) +
                       ", overflows a 64-bit byte count");
  return span;
}

namespace {

// The check behind both public forms; `shape` describes the region for the message.
void check_span(const char* op, const char* what, const void* ptr, size_t bytes, const std::string& shape) {
  if (bytes == 0 || ptr == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t base = 0;
  Region r;
  {
    RegionTable& t = table();
    std::lock_guard<std::mutex> lk(t.mu);
    auto it = t.regions.upper_bound(p);
    if (it == t.regions.begin()) return;
    --it;
    base = it->first;
    r = it->second;
  }
  const size_t offset = p - base;
  // A pointer past the end of the nearest region below it lies in no recorded region
  // (the start of an empty region is in it: any byte from there is past its end).
  const bool inside = offset < r.bytes || (offset == 0 && r.bytes == 0);
  if (!inside) return;
  if (bytes <= r.bytes - offset) return;
  throw RuntimeError(std::string(op) + ": the " + what + " reaches " + std::to_string(bytes) + " bytes from offset " +
                     std::to_string(offset) + " of a " + r.kind + " of " + std::to_string(r.bytes) + " bytes at " +
                     hex(base) + " (" + std::to_string(offset + bytes - r.bytes) + " bytes past its end)" + shape);
}

}  // namespace

void check_reach(const char* op, const char* what, const void* ptr, size_t bytes) {
  check_span(op, what, ptr, bytes, "");
}

void check_reach_2d(const char* op, const char* what, const void* ptr, size_t rows, size_t pitch, size_t width) {
  check_span(op, what, ptr, span_2d(op, what, rows, pitch, width),
             ": " + std::to_string(rows) + " rows of " + std::to_string(width) + " bytes, pitch " +
                 std::to_string(pitch));
}

size_t recorded_region_count() {
  RegionTable& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  return t.regions.size();
}

}  // namespace uipc
