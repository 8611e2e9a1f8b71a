// The host (simulation-mode) device: what kernels and tests need beyond comm/device/device.hpp.
// Device memory is process memory (exportable buffers: POSIX shared memory, named in
// /dev/shm; descriptor-shared buffers: memfd, named nowhere), every stream is an
// in-order queue served by its own worker thread, and the 64-bit epoch words are
// atomics in shared memory.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "comm/device/device.hpp"

namespace uipc {

class HostStream : public Stream {
 public:
  // Runs `task` on the stream's worker, in order. An exception thrown by a task fails
  // the stream: later tasks are skipped and synchronize() rethrows it.
  virtual void enqueue(std::function<void()> task) = 0;
  // The same for a kernel: work that ends by itself, however long it runs (a full-size
  // layer on a CPU takes minutes). Host waits count a running kernel as progress, as the
  // watchdog is for peers that never arrive; a plain enqueue()d task that stops moving for
  // the watchdog's time is taken as stuck. `what` names it in messages. The default
  // (test streams) is a plain enqueue.
  virtual void enqueue_kernel(const char* what, std::function<void()> task) {
    (void)what;
    enqueue(std::move(task));
  }
};

// The HostStream behind a Stream of the host device (throws if it is not one).
HostStream& host_stream(Stream& s);

// The prefix of every shared-memory name this program creates in /dev/shm; tests
// check that none is left behind.
const char* host_shm_prefix();

// The prefix of the names created by the process `pid` ("/uipc-<pid>-"): a check for
// leftovers that looks only at its own ranks is not disturbed by other runs on the node.
std::string host_shm_process_prefix(long pid);

// Drops the /dev/shm name of an exportable buffer of the host device once every peer has
// opened it: existing mappings stay valid, later open_handle() calls fail, and nothing is
// left behind even if the process is killed. Idempotent; throws RuntimeError if `dev` is
// not the host device or `buf` is not exportable. Same as dev.seal_export(buf), which
// the host device overrides; this form also insists that `dev` is the host device.
void seal_export(Device& dev, const DeviceBuffer& buf);

// Unlinks every shared-memory name this process created and has not unlinked yet
// (mappings stay valid). Meant for signal handlers and atexit: no allocation, no locks.
void host_unlink_all_shm() noexcept;

}  // namespace uipc
