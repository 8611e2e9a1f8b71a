// How the device layer's owned memory is given back (through the device that made it),
// and the defaults of the optional parts of the device interface.
#include "comm/device/device.hpp"

#include <unistd.h>

#include "base/error.hpp"

namespace uipc {

void require_timed(const Event& e, const char* what) {
  UIPC_CHECK(e.use() == EventUse::kTimed, std::string(what) +
                                             ": an ordering event (EventUse::kOrdering) only joins streams: it is never "
                                             "timed, queried or synchronized");
}

void FreeBuffer::release(Device& d, void* ptr, size_t bytes, void* impl) { d.free_buffer(ptr, bytes, impl); }

void CloseMapping::release(Device& d, void* ptr, size_t bytes, void* impl) { d.close_mapping(ptr, bytes, impl); }

// Defaults of the descriptor-shared memory: a device that does not override them has none.
void Device::copy_2d_batch(Stream& s, const std::vector<Copy2DOp>& ops) {
  for (const Copy2DOp& o : ops) copy_2d(s, o.dst, o.dst_pitch, o.src, o.src_pitch, o.width, o.height);
}

DeviceBuffer Device::alloc_fd_shareable(size_t bytes) {
  (void)bytes;
  throw RuntimeError("alloc_fd_shareable: not supported on this device (" + name() + ")");
}

int Device::export_fd(const DeviceBuffer& buf) {
  (void)buf;
  throw RuntimeError("export_fd: not supported on this device (" + name() + ")");
}

void Device::close_export(int fd, size_t bytes) {
  (void)bytes;
  if (fd >= 0) close(fd);
}

PeerMapping Device::import_fd(int fd, size_t bytes) {
  (void)bytes;
  if (fd >= 0) close(fd);  // ownership was passed to us, even on failure
  throw RuntimeError("import_fd: not supported on this device (" + name() + ")");
}

void Device::begin_capture(Stream& origin) {
  (void)origin;
  throw RuntimeError("begin_capture: graphs are " + graph_ineligible_reason() + " (" + name() + ")");
}

std::unique_ptr<Graph> Device::end_capture(Stream& origin) {
  (void)origin;
  throw RuntimeError("end_capture: graphs are " + graph_ineligible_reason() + " (" + name() + ")");
}

}  // namespace uipc
