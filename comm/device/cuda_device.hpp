// The CUDA implementation of the device layer (comm/device/device.hpp), and the questions the
// transports ask before choosing the IPC path: is there a GPU, may this process use
// stream memory operations, can two GPUs reach each other.
#pragma once

#include <memory>
#include <string>

#include "comm/device/device.hpp"

namespace uipc {

// The CUDA device `ordinal` of this process (made current). Throws RuntimeError when it
// cannot be used.
std::unique_ptr<Device> make_cuda_device(int ordinal);

// "runtime 13.0, driver 13.0" (driver part absent without a driver): for provenance.
std::string cuda_version_string();

// Number of CUDA devices this process can use; 0 on a machine without a driver or a GPU.
// Never throws, never prints. `reason`, when given, receives why it is 0.
int cuda_usable_device_count(std::string* reason = nullptr);

// Empty when `dev` can take part in the IPC transport as far as this process can tell
// (a CUDA device whose driver offers 64-bit stream memory operations and the
// cuStreamWriteValue64/cuStreamWaitValue64 entry points); otherwise why not.
std::string cuda_ipc_ineligible_reason(Device& dev);

// True when device dev_a can access memory of dev_b (always true for dev_a == dev_b).
// False, never throwing, when it cannot be determined.
bool cuda_can_access_peer(int dev_a, int dev_b);

}  // namespace uipc
