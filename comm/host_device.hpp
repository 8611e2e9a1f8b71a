// The host (simulation-mode) device: what kernels and tests need beyond comm/device.hpp.
// Device memory is process memory (exportable buffers: POSIX shared memory), every
// stream is an in-order queue served by its own worker thread, and the 64-bit epoch
// words are atomics in shared memory.
#pragma once

#include <functional>

#include "comm/device.hpp"

namespace uipc {

class HostStream : public Stream {
 public:
  // Runs `task` on the stream's worker, in order. An exception thrown by a task fails
  // the stream: later tasks are skipped and synchronize() rethrows it.
  virtual void enqueue(std::function<void()> task) = 0;
};

// The HostStream behind a Stream of the host device (throws if it is not one).
HostStream& host_stream(Stream& s);

// The prefix of every shared-memory name this program creates in /dev/shm; tests
// check that none is left behind.
const char* host_shm_prefix();

}  // namespace uipc
