// Layers replayed as graphs (--graphs, the ablation no-graphs): the layer pipeline's
// work captured once and launched as one graph every layer, instead of issued op by op
// from the host. The pipeline is unchanged: each layer still runs its host logic, and
// the device's recording decorator (comm/device/tracing_device.hpp) checks that logic's
// operations against the captured ones, holds them back, and launches the graph with the
// layer's own epoch values; a layer that differs (a target-cache miss or eviction, a
// fallback, anything a graph cannot hold) runs op by op and the graph is captured anew.
//
//   watch   a layer op by op; when it made only stream work, the next is captured
//   capture the layer recorded by the device, then launched with its own values
//   replay  every later layer, while it matches the capture; else back to watch
#pragma once

#include <string>
#include <vector>

#include "comm/device/tracing_device.hpp"
#include "lib/run/pipeline.hpp"

namespace uipc {

struct GraphStats {
  int64_t captures = 0, replays = 0, divergences = 0;
  std::string last_divergence;  // why the last replay fell back to op by op
  std::string unsteady;         // the first call a graph cannot hold, of the last watched layer that made one
};

class GraphedLayer {
 public:
  // why_not: "" to use graphs, else why every layer runs op by op (e.g. "--graphs off").
  GraphedLayer(TracingDevice& dev, LayerPipeline& pipe, Stream& compute, std::string why_not);
  // Enqueues one layer (as LayerPipeline::enqueue_layer), measuring the host's time.
  void enqueue_layer();
  // The host's wall time of the last enqueue_layer(), milliseconds.
  double last_enqueue_ms() const { return last_enqueue_ms_; }
  // Whether the last enqueue_layer() was a replayed graph (not watched, captured or
  // fallen back to op by op).
  bool last_replayed() const { return last_replayed_; }
  // "on", or "off: <why>".
  std::string mode() const { return why_not_.empty() ? "on" : "off: " + why_not_; }
  const GraphStats& stats() const { return stats_; }

 private:
  enum class State { kWatch, kCapture, kReplay };
  void watch();
  void capture();
  void replay();

  TracingDevice& dev_;
  LayerPipeline& pipe_;
  Stream& compute_;
  std::string why_not_;
  State state_ = State::kWatch;
  CapturedLayer captured_;
  GraphStats stats_;
  double last_enqueue_ms_ = 0;
  bool last_replayed_ = false;
};

}  // namespace uipc
