// Layers replayed as graphs (lib/run/layer_graph.hpp).
#include "lib/run/layer_graph.hpp"

#include <chrono>
#include <exception>

namespace uipc {

namespace {
// Closes the decorator's graph window when the layer throws (the run is ending on that
// error; nothing captured or held survives it).
struct WindowGuard {
  TracingDevice& dev;
  bool open = true;
  ~WindowGuard() {
    if (open) dev.abandon_window();
  }
};
}  // namespace

GraphedLayer::GraphedLayer(TracingDevice& dev, LayerPipeline& pipe, Stream& compute, std::string why_not)
    : dev_(dev), pipe_(pipe), compute_(compute), why_not_(std::move(why_not)) {}

void GraphedLayer::enqueue_layer() {
  const auto t0 = std::chrono::steady_clock::now();
  last_replayed_ = false;
  if (!why_not_.empty()) {
    pipe_.enqueue_layer();
  } else {
    switch (state_) {
      case State::kWatch: watch(); break;
      case State::kCapture: capture(); break;
      case State::kReplay: replay(); break;
    }
  }
  last_enqueue_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void GraphedLayer::watch() {
  dev_.begin_watch();
  WindowGuard guard{dev_};
  pipe_.enqueue_layer();
  guard.open = false;
  const std::string unsteady = dev_.end_watch();
  if (unsteady.empty())
    state_ = State::kCapture;
  else
    stats_.unsteady = unsteady;
}

void GraphedLayer::capture() {
  dev_.begin_capture_layer(compute_);
  WindowGuard guard{dev_};
  pipe_.enqueue_layer();
  guard.open = false;
  captured_ = dev_.end_capture_layer(compute_);
  ++stats_.captures;
  // Nothing ran yet: the captured layer is this layer, with the values it was captured with.
  dev_.launch(captured_, compute_);
  state_ = State::kReplay;
}

void GraphedLayer::replay() {
  dev_.begin_replay(captured_);
  WindowGuard guard{dev_};
  pipe_.enqueue_layer();
  guard.open = false;
  std::string why;
  if (dev_.end_replay(compute_, &why)) {
    ++stats_.replays;
    last_replayed_ = true;
    return;
  }
  ++stats_.divergences;
  stats_.last_divergence = why;
  captured_ = CapturedLayer{};
  state_ = State::kWatch;
}

}  // namespace uipc
