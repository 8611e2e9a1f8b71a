// How the device layer's owned memory is given back: through the device that made it.
#include "comm/device.hpp"

namespace uipc {

void FreeBuffer::release(Device& d, void* ptr, size_t bytes, void* impl) { d.free_buffer(ptr, bytes, impl); }

void CloseMapping::release(Device& d, void* ptr, size_t bytes, void* impl) { d.close_mapping(ptr, bytes, impl); }

}  // namespace uipc
