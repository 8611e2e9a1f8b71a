// The public API (include/ulysses_ipc/ulysses_ipc.hpp): thin handles over the device
// layer (comm/device/device.hpp) and the transports (comm/transport/transport.hpp); the protocol is
// theirs. Every entry point turns the project's errors into ulysses_ipc::Error.
#include <utility>

#include "api/internal.hpp"
#include "base/error.hpp"
#include "comm/device/host_device.hpp"
#include "git_rev.h"

namespace ulysses_ipc {
namespace {

static_assert(static_cast<int>(DType::kFP32) == static_cast<int>(uipc::DType::kFP32), "DType mirrors uipc::DType");
static_assert(static_cast<int>(Tag::kO) == static_cast<int>(uipc::Tag::kO), "Tag mirrors uipc::Tag");
static_assert(static_cast<int>(Direction::kGather) == static_cast<int>(uipc::Direction::kGather),
              "Direction mirrors uipc::Direction");

ErrorKind kind_of(int exit_code) {
  if (exit_code == uipc::kExitBadInput) return ErrorKind::kBadInput;
  if (exit_code == uipc::kExitPeerTimeout) return ErrorKind::kPeerTimeout;
  return ErrorKind::kRuntime;
}

// Runs f, turning uipc::Error into ulysses_ipc::Error of the same kind and message.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const uipc::Error& e) {
    throw Error(kind_of(e.exit_code()), e.what());
  }
}

int rank_of(MPI_Comm comm) {
  int r = 0;
  UIPC_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

// The one selection behind create() and the program's open().
Communicator select(std::unique_ptr<Communicator::Impl> impl, const std::string& requested,
                    const uipc::TransportSetup& setup) {
  impl->dev = &setup.dev;
  impl->group = setup.group;
  impl->sel = uipc::select_transport(requested, setup);
  return Communicator(std::move(impl));
}

}  // namespace

// ------------------------------------------------------------------ Stream, Buffer

Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;
Stream::~Stream() = default;
void Stream::synchronize() {
  guarded([&] { impl_->stream->synchronize(); });
}
void* Stream::native() const { return impl_->stream->native(); }

Buffer::Buffer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Buffer::Buffer(Buffer&&) noexcept = default;
Buffer& Buffer::operator=(Buffer&&) noexcept = default;
Buffer::~Buffer() = default;
void* Buffer::data() const { return impl_->buf.get(); }
size_t Buffer::bytes() const { return impl_->buf.bytes(); }

// ------------------------------------------------------------------ Device

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;
Device::~Device() = default;

Device Device::simulated(MPI_Comm comm) {
  return guarded([&] {
    const int rank = rank_of(comm);
    uipc::set_error_rank(rank);
    auto impl = std::make_unique<Impl>();
    impl->dev = uipc::make_host_device(rank);
    return Device(std::move(impl));
  });
}

Device Device::cuda(int ordinal) {
  return guarded([&] {
    auto impl = std::make_unique<Impl>();
    impl->dev = internal::make_cuda(ordinal);
    return Device(std::move(impl));
  });
}

int Device::cuda_device_count() { return internal::cuda_count(); }

std::string Device::name() const { return impl_->dev->name(); }
bool Device::is_cuda() const { return impl_->dev->kind() == uipc::DeviceKind::kCuda; }

Buffer Device::alloc(size_t bytes) {
  return guarded([&] {
    auto b = std::make_unique<Buffer::Impl>();
    b->buf = impl_->dev->alloc(bytes);
    return Buffer(std::move(b));
  });
}

void Device::copy_to_device(void* dst, const void* src, size_t bytes) {
  guarded([&] { impl_->dev->copy_to_device(dst, src, bytes); });
}

void Device::copy_to_host(void* dst, const void* src, size_t bytes) {
  guarded([&] { impl_->dev->copy_to_host(dst, src, bytes); });
}

Stream Device::create_stream(bool high_priority) {
  return guarded([&] {
    auto s = std::make_unique<Stream::Impl>();
    s->stream = impl_->dev->create_stream(high_priority ? uipc::StreamPriority::kHigh : uipc::StreamPriority::kNormal);
    return Stream(std::move(s));
  });
}

void Device::stream_wait(Stream& waiter, Stream& on) {
  guarded([&] {
    std::unique_ptr<uipc::Event> e = impl_->dev->create_event();
    e->record(*on.impl().stream);
    impl_->dev->stream_wait_event(*waiter.impl().stream, *e);
  });
}

void Device::set_watchdog_seconds(double s) {
  if (!(s > 0)) throw Error(ErrorKind::kBadInput, "watchdog: must be > 0 seconds");
  impl_->dev->set_watchdog_seconds(s);
}
double Device::watchdog_seconds() const { return impl_->dev->watchdog_seconds(); }

// ------------------------------------------------------------------ Exchange

Exchange::Exchange(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Exchange::Exchange(Exchange&&) noexcept = default;
Exchange& Exchange::operator=(Exchange&&) noexcept = default;
Exchange::~Exchange() = default;
void* Exchange::data() const { return impl_->exchange->data(); }
void Exchange::wait(Stream& consumer) {
  guarded([&] { impl_->exchange->wait(*consumer.impl().stream); });
}

// ------------------------------------------------------------------ Communicator

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::create(MPI_Comm comm, Device& dev, const Options& opt) {
  return guarded([&] {
    UIPC_REQUIRE_INPUT(opt.ranks_per_node >= 0, "ranks_per_node: must be >= 0");
    UIPC_REQUIRE_INPUT(opt.hier_chunks >= 1, "hier_chunks: must be >= 1");
    // hier-vmajor compares V with the last step's on the device: the program's layer
    // kernels, which the library does not carry.
    UIPC_REQUIRE_INPUT(opt.transport != "hier-vmajor",
                       "transport 'hier-vmajor' needs the program's layer kernels; the library offers ipc, vmm, "
                       "nccl, nccl-ce and hier");
    uipc::Device& d = *dev.impl().dev;
    auto impl = std::make_unique<Impl>();
    impl->own_group = uipc::dup_comm(comm);  // our traffic apart from the caller's
    const MPI_Comm group = impl->own_group.get();
    impl->nodes = uipc::discover_nodes(group, opt.ranks_per_node, d.watchdog_seconds());
    impl->coll = internal::make_fallback_collectives(d, group);
    uipc::TransportSetup setup{d, group, impl->nodes, *impl->coll,
                               [&d](MPI_Comm c) { return internal::make_fallback_collectives(d, c); }, {}};
    setup.options.cache_capacity = opt.cache_entries;
    setup.hier_chunks = opt.hier_chunks;
    if (opt.transport == "nccl-ce") {  // its own communicator, made only when asked for
      impl->ce_coll = internal::make_ce_collectives(d, group, &setup.ce_unavailable);
      setup.ce_coll = impl->ce_coll.get();
    }
    return select(std::move(impl), opt.transport, setup);
  });
}

Exchange Communicator::submit(const Submission& sub, Stream& producer) {
  return guarded([&] {
    uipc::Submission s;
    s.tag = static_cast<uipc::Tag>(sub.tag);
    s.dir = static_cast<uipc::Direction>(sub.dir);
    s.src = sub.src;
    s.src_row_pitch = sub.src_row_pitch;
    s.shape = {sub.shape.batch, sub.shape.seq_local, sub.shape.heads, sub.shape.head_dim,
               static_cast<uipc::DType>(sub.shape.dtype)};
    s.barrier = sub.barrier;
    UIPC_REQUIRE_INPUT(!impl_->closed, "submit: the communicator is closed");
    auto x = std::make_unique<Exchange::Impl>();
    x->exchange = impl_->sel.transport->submit(s, *producer.impl().stream);
    return Exchange(std::move(x));
  });
}

void Communicator::release(Stream& consumer) {
  guarded([&] { impl_->sel.transport->release(*consumer.impl().stream); });
}

void Communicator::close() {
  guarded([&] {
    if (impl_->closed) return;
    impl_->closed = true;
    // Importers close before exporters free (comm/transport/transport.hpp).
    impl_->sel.transport->close_peer_mappings();
    uipc::barrier_bounded(impl_->group, impl_->dev->watchdog_seconds(), "the close of the communicator");
    impl_->sel.transport.reset();
    impl_->coll.reset();
  });
}

std::string Communicator::transport() const { return impl_->sel.used; }
std::string Communicator::fallback_reason() const { return impl_->sel.fallback_reason; }

Stats Communicator::stats() const {
  if (!impl_->sel.transport) return {};
  uipc::TransportStats t = impl_->sel.transport->stats();
  return {t.groups, t.handshakes, t.cache_hits, t.cache_misses, t.cache_evictions};
}

std::string version() { return std::string(ULYSSES_VERSION) + " (" + ULYSSES_GIT_REV + ")"; }

// ------------------------------------------------------------------ the program's way in

namespace internal {

Communicator open(const std::string& requested, const uipc::TransportSetup& setup) {
  return select(std::make_unique<Communicator::Impl>(), requested, setup);
}

uipc::Transport& transport(Communicator& c) {
  UIPC_CHECK(c.impl().sel.transport, "the communicator is closed");
  return *c.impl().sel.transport;
}

const uipc::SelectedTransport& selected(const Communicator& c) { return c.impl().sel; }

}  // namespace internal
}  // namespace ulysses_ipc
