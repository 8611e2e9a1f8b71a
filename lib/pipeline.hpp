// The one layer pipeline: QKV projection -> Q/K norm + RoPE -> Ulysses scatter ->
// attention -> output gather -> output projection (+ TP all-reduce), in the order a
// Schedule gives, on any device and transport. Also the dense single-rank reference.
#pragma once

#include <memory>
#include <vector>

#include "comm/collectives.hpp"
#include "comm/transport.hpp"
#include "kernels/kernels.hpp"
#include "lib/layer_data.hpp"
#include "lib/report.hpp"
#include "lib/schedule.hpp"

namespace uipc {

struct LayerTiming {
  double stage_ms[kNumStages] = {};
  double v_overlap_ms = 0;  // V scatter copies running during Q/K norm + RoPE
  double v_copy_ms = -1;    // V's copies on the copy stream, start to end; -1: not measured
};

class LayerPipeline {
 public:
  // `tp_coll` may be null when tp == 1. `gather` may be the same object as `scatter`.
  LayerPipeline(Device& dev, LayerKernels& kernels, const Case& c, const Layout& l, const LayerData& data,
                const Schedule& schedule, Transport& scatter, Transport& gather, Collectives* tp_coll,
                Stream& compute);
  // Enqueues one layer on the compute stream (host work for host-side collectives
  // happens inside).
  void enqueue_layer();
  // The timing of the last layer; call after the compute stream has drained.
  LayerTiming last_timing();
  // This rank's output (B, S/U, C) in the case dtype.
  const DeviceBuffer& output() const { return y_; }
  // Poisons the output (NaN bit patterns) so a layer that writes nothing fails parity.
  void poison_output();

 private:
  void run_step(Step step, bool last_submit);
  QkView qk_view(bool q) const;
  DeviceBuffer& attn_out();

  Device& dev_;
  LayerKernels& kernels_;
  const Case& c_;
  Layout l_;
  const LayerData& data_;
  Schedule schedule_;
  Transport& scatter_;
  Transport& gather_;
  Collectives* tp_coll_;
  Stream& compute_;
  DeviceBuffer qkv_, q_, k_, v_, attn_, out_f32_, y_;
  std::unique_ptr<Exchange> ex_q_, ex_k_, ex_v_, ex_o_;
  std::unique_ptr<Event> ev_start_, ev_waited_, ev_attn_, ev_gather_, ev_end_;
  std::vector<std::unique_ptr<Event>> ev_steps_;
};

// Dense single-rank execution of the whole layer (tp = ulysses = 1, all tokens) on
// `dev`: the parity reference. Returns y (B, S, C) as fp32 values of the dtype.
std::vector<float> dense_reference(Device& dev, LayerKernels& kernels, const Case& c, Stream& s);

}  // namespace uipc
