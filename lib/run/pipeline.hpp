// The one layer pipeline: QKV projection -> Q/K norm + RoPE -> Ulysses scatter ->
// attention -> output gather -> output projection (+ TP all-reduce), in the order a
// Schedule gives, on any device and transport. Also the dense single-rank reference.
#pragma once

#include <memory>
#include <vector>

#include "comm/collectives/collectives.hpp"
#include "comm/transport/transport.hpp"
#include "kernels/kernels.hpp"
#include "lib/run/layer_data.hpp"
#include "lib/report/report.hpp"
#include "lib/run/schedule.hpp"

namespace uipc {

struct LayerTiming {
  double stage_ms[kNumStages] = {};
  double v_overlap_ms = 0;  // V scatter copies running beside the compute steps after V's submission
  double v_copy_ms = -1;    // V's copies on the copy stream, start to end; -1: not measured
};

// How a layer runs beyond its schedule. The defaults are the design; each other value is
// an ablation that measures what one part of it buys (a run of its own in the report).
struct PipelineOptions {
  // The kernel that produces each tensor writes this rank's own slice of the scatter
  // straight into its final-layout target (the norm+RoPE kernel for Q and K, the
  // projection for V and for Q/K without norm and RoPE), so no copy of it remains.
  // false: the transport copies it like the peers' slices (ablation own-slice-copy).
  bool own_slice_by_producer = true;
  // Strided views (Q, K, V of a fused projection) packed into contiguous buffers before
  // they are submitted (ablation no-pitched-copies).
  bool pack_strided = false;
  // One handshake for the group Q, K, V (false: one per tensor, ablation
  // no-grouped-handshake).
  bool grouped_handshake = true;
  // Each stage timed by an event at its end (false, --stage-timing off: only the layer's
  // start and end are recorded, its stages and V's copy NaN). In a captured graph each
  // event is a node of its own, ~2.2 us of GPU time on an H200 (bench_kernels' graph
  // rows): on a near-empty layer, about half of it.
  bool stage_timing = true;
};

class LayerPipeline {
 public:
  // `tp_coll` may be null when tp == 1. `gather` may be the same object as `scatter`.
  LayerPipeline(Device& dev, LayerKernels& kernels, const Case& c, const Layout& l, const LayerData& data,
                const Schedule& schedule, Transport& scatter, Transport& gather, Collectives* tp_coll,
                Stream& compute, const PipelineOptions& opts = {});
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
  // Records a stage's end event: only with stage timing (PipelineOptions::stage_timing).
  void mark_stage(Event& e) {
    if (opts_.stage_timing) e.record(compute_);
  }
  // A block of weight columns whose output is this rank's own slice of a tensor: it goes
  // straight to the tensor's final-layout target.
  struct OwnBlock {
    int64_t col = 0, width = 0;
    OwnSlice slice;
  };
  void run_step(Step step, bool last_submit);
  void project_fused(Step step);
  void project_separate(Tag tag);
  void submit(Tag tag, bool last_submit);
  QkView qk_view(bool q) const;
  QkView norm_view(bool q);
  DeviceBuffer& attn_out();
  ExchangeShape scatter_shape() const;
  // Whether Q/K norm + RoPE runs at all (else the projection writes Q's and K's own slices).
  bool norm_applies() const;
  // This layer's own slice of `tag` when its producer writes it (fetched once per layer;
  // data == nullptr when the producer does not, or the transport will not take it).
  const OwnSlice& own(Tag tag);
  bool own_by_projection(Tag tag) const;
  // Projects weight columns [c0, c1) of w (row pitch ldw) into out (row pitch ldo; out's
  // column 0 is weight column c0), the own blocks' columns into their targets instead.
  void project(const void* w, int64_t ldw, int64_t c0, int64_t c1, void* out, int64_t ldo,
               std::vector<OwnBlock> blocks);
  void add_own_block(std::vector<OwnBlock>& blocks, Tag tag, int64_t tag_col);

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
  PipelineOptions opts_;
  OwnSlice own_[3];
  bool own_fetched_[3] = {false, false, false};
  DeviceBuffer qkv_, q_, k_, v_, attn_, out_f32_, y_;
  DeviceBuffer packed_[3];  // the pack_strided ablation's contiguous copies of Q, K, V
  std::unique_ptr<Exchange> ex_q_, ex_k_, ex_v_, ex_o_;
  std::unique_ptr<Event> ev_start_, ev_waited_, ev_attn_, ev_gather_, ev_end_;
  std::vector<std::unique_ptr<Event>> ev_steps_;
};

// Dense single-rank execution of the whole layer (tp = ulysses = 1, all tokens) on
// `dev`: the parity reference. Returns y (B, S, C) as fp32 values of the dtype.
// `step`: the layer's inputs at that denoising step (generate_layer_input).
std::vector<float> dense_reference(Device& dev, LayerKernels& kernels, const Case& c, Stream& s, int step = 0);

}  // namespace uipc
