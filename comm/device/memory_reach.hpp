// The reach check of the device layer: every buffer a device hands out (an allocation,
// an IPC-opened peer mapping, an imported descriptor) is recorded here with its size,
// and every copy and kernel checks the bytes it will touch against the buffer its
// pointer lies in, on the host, before the work is issued. A view that runs past its
// buffer is then a RuntimeError naming the op, the buffer and the sizes (exit 3), not
// a segfault on a worker thread (host device) or a silent overwrite (CUDA). One
// process-wide table serves both devices and the kernels of both; a lookup is one
// ordered-map search, cheap enough to stay on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uipc {

// Records [base, base + bytes) as device memory of the kind named (e.g. "buffer",
// "peer mapping"); forget_region drops it when the memory goes. Both are called by the
// device implementations only.
void record_region(const void* base, size_t bytes, const char* kind);
void forget_region(const void* base);

// The bytes a 2-D region spans from its first byte: rows of `width` bytes, `pitch`
// apart; 0 when it is empty. Formed in 64 bits; a span that overflows size_t is an
// error naming `op` and `what`.
size_t span_2d(const char* op, const char* what, size_t rows, size_t pitch, size_t width);
// Elements * element size, checked the same way.
size_t span_bytes(const char* op, const char* what, size_t elems, size_t elem_size);

// Checks that [ptr, ptr + bytes) lies inside the recorded region that holds ptr. A
// pointer in no recorded region (host memory, or memory of another library) is not
// checked: the device layer only knows the sizes of what it handed out. `op` names the
// operation ("copy_2d", "gemm"), `what` the operand ("destination", "input view").
void check_reach(const char* op, const char* what, const void* ptr, size_t bytes);
// The same for a 2-D region (rows of width bytes, pitch apart).
void check_reach_2d(const char* op, const char* what, const void* ptr, size_t rows, size_t pitch, size_t width);

// The number of recorded regions (tests: nothing left behind).
size_t recorded_region_count();

}  // namespace uipc
