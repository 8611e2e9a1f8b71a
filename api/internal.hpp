// The inside of the public API (include/ulysses_ipc/ulysses_ipc.hpp): what each handle
// holds, and the way in for the ulysses-ipc program itself, which brings its own device
// and collectives (lib/run/case_runner.cpp). Not installed.
#pragma once

#include <memory>

#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/device/device.hpp"
#include "comm/nodes.hpp"
#include "comm/transport/transport.hpp"
#include "ulysses_ipc/ulysses_ipc.hpp"

namespace ulysses_ipc {

struct Device::Impl {
  std::unique_ptr<uipc::Device> dev;
};

struct Stream::Impl {
  std::unique_ptr<uipc::Stream> stream;
};

struct Buffer::Impl {
  uipc::DeviceBuffer buf;
};

struct Exchange::Impl {
  std::unique_ptr<uipc::Exchange> exchange;
};

struct Communicator::Impl {
  uipc::Device* dev = nullptr;
  MPI_Comm group = MPI_COMM_NULL;             // close()'s barrier; the transport has its own
  // What create() owns for the transport (the program's open() brings its own):
  uipc::MpiComm own_group;                    // a duplicate of the caller's communicator
  uipc::NodeLayout nodes;                     // its ranks' nodes
  std::unique_ptr<uipc::Collectives> coll;    // the nccl transport's (and fallback's)
  std::unique_ptr<uipc::Collectives> ce_coll; // nccl-ce's zero-CTA ones, when asked for
  uipc::SelectedTransport sel;                // destroyed first: it may use the above
  bool closed = false;
};

namespace internal {

// A communicator of the `requested` transport over what `setup` names, which the caller
// owns and keeps alive (the program's run driver: its device, group, node layout and
// collectives): the same selection as Communicator::create. Collective over the group.
// Errors stay uipc::Error, so that the program's exit codes stay its own.
Communicator open(const std::string& requested, const uipc::TransportSetup& setup);
// The transport behind a communicator, for the program's layer pipeline, and the
// selection's outcome (which one serves, why it is not the requested one).
uipc::Transport& transport(Communicator& c);
const uipc::SelectedTransport& selected(const Communicator& c);

// Per build (api/device_cuda.cpp with CUDA, api/device_host_only.cpp without):
// the CUDA device `ordinal`, and the collectives a communicator falls back on: NCCL
// where every rank of group has a GPU of its own, else MPI staged through the host.
// And nccl-ce's copy-engine (zero-CTA) NCCL collectives: MPI on the simulated device,
// none (nullptr and why) where NCCL cannot run.
std::unique_ptr<uipc::Device> make_cuda(int ordinal);
int cuda_count();
std::unique_ptr<uipc::Collectives> make_fallback_collectives(uipc::Device& dev, MPI_Comm group);
std::unique_ptr<uipc::Collectives> make_ce_collectives(uipc::Device& dev, MPI_Comm group, std::string* why);

}  // namespace internal
}  // namespace ulysses_ipc
