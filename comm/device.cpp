// Ownership types of the device layer: freeing buffers and closing mappings through
// the device that made them.
#include "comm/device.hpp"

namespace uipc {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    impl_ = o.impl_;
    o.owner_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.impl_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ && (ptr_ || impl_)) owner_->free_buffer(ptr_, bytes_, impl_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
  impl_ = nullptr;
}

PeerMapping& PeerMapping::operator=(PeerMapping&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    impl_ = o.impl_;
    o.owner_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.impl_ = nullptr;
  }
  return *this;
}

void PeerMapping::reset() {
  if (owner_ && (ptr_ || impl_)) owner_->close_mapping(ptr_, bytes_, impl_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
  impl_ = nullptr;
}

}  // namespace uipc
