// The layer pipeline (one, for every schedule, transport and device) and the dense
// reference it is checked against.
#include "lib/run/pipeline.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"

namespace uipc {

namespace {
size_t bytes_of(int64_t elems, DType t) { return static_cast<size_t>(elems) * dtype_size(t); }

NormRopeParams norm_params(const Case& c, const LayerData& d, bool q) {
  NormRopeParams p;
  p.norm = c.qk_norm;
  p.rope = c.rope;
  p.eps = c.norm_eps;
  p.rope_theta = c.rope_theta;
  p.gamma = (q ? d.gamma_q : d.gamma_k).as<float>();
  p.beta = (q ? d.beta_q : d.beta_k).as<float>();
  return p;
}

bool is_submit(Step s) { return s == Step::kSubmitQ || s == Step::kSubmitK || s == Step::kSubmitV; }
bool is_norm(Step s) { return s == Step::kNormQ || s == Step::kNormK || s == Step::kNormQK; }
int tag_index(Tag t) { return static_cast<int>(t); }  // Q, K, V: 0, 1, 2
}  // namespace

LayerPipeline::LayerPipeline(Device& dev, LayerKernels& kernels, const Case& c, const Layout& l,
                             const LayerData& data, const Schedule& schedule, Transport& scatter,
                             Transport& gather, Collectives* tp_coll, Stream& compute, const PipelineOptions& opts)
    : dev_(dev), kernels_(kernels), c_(c), l_(l), data_(data), schedule_(schedule), scatter_(scatter),
      gather_(gather), tp_coll_(tp_coll), compute_(compute), opts_(opts) {
  UIPC_CHECK(l.tp == 1 || tp_coll != nullptr, "tp > 1 needs a TP collective");
  const int64_t M = l.tokens_local(), Ct = l.width_tp();
  if (schedule_.fused)
    qkv_ = dev_.alloc(bytes_of(M * 3 * Ct, c.dtype));
  else {
    q_ = dev_.alloc(bytes_of(M * Ct, c.dtype));
    k_ = dev_.alloc(bytes_of(M * Ct, c.dtype));
    v_ = dev_.alloc(bytes_of(M * Ct, c.dtype));
  }
  out_f32_ = dev_.alloc(bytes_of(M * l.width(), DType::kFP32));
  y_ = dev_.alloc(bytes_of(M * l.width(), c.dtype));
  for (auto* e : {&ev_start_, &ev_waited_, &ev_attn_, &ev_gather_, &ev_end_}) *e = dev_.create_event();
  for (size_t i = 0; i < schedule_.steps.size(); ++i) ev_steps_.push_back(dev_.create_event());
}

void LayerPipeline::poison_output() {
  dev_.memset(compute_, y_.get(), 0xff, y_.bytes());
  compute_.synchronize();
}

QkView LayerPipeline::qk_view(bool q) const {
  QkView v;
  const int64_t Ct = l_.width_tp();
  if (schedule_.fused) {
    v.data = static_cast<unsigned char*>(qkv_.get()) + bytes_of(q ? 0 : Ct, c_.dtype);
    v.row_pitch = 3 * Ct;
  } else {
    v.data = (q ? q_ : k_).get();
    v.row_pitch = Ct;
  }
  v.batch = l_.batch;
  v.tokens_per_batch = l_.seq_local;
  v.pos_offset = l_.pos_offset();
  v.heads = l_.heads_tp;
  v.head_dim = l_.head_dim;
  return v;
}

ExchangeShape LayerPipeline::scatter_shape() const {
  return ExchangeShape{l_.batch, l_.seq_local, l_.heads_tp, l_.head_dim, c_.dtype, l_.seq};
}

// Q's or K's view for its norm + RoPE, its own heads written straight to its own slice.
QkView LayerPipeline::norm_view(bool q) {
  QkView v = qk_view(q);
  const OwnSlice& o = own(q ? Tag::kQ : Tag::kK);
  if (o.data != nullptr) v.out = HeadSliceOut{o.data, o.head_begin, o.head_count, o.row_pitch, o.batch_pitch};
  return v;
}

bool LayerPipeline::norm_applies() const { return c_.qk_norm != NormKind::kNone || c_.rope != RopeKind::kNone; }

bool LayerPipeline::own_by_projection(Tag tag) const { return tag == Tag::kV || !norm_applies(); }

const OwnSlice& LayerPipeline::own(Tag tag) {
  const int i = tag_index(tag);
  if (!own_fetched_[i]) {
    own_[i] = opts_.own_slice_by_producer ? scatter_.own_slice(tag, scatter_shape()) : OwnSlice{};
    own_fetched_[i] = true;
  }
  return own_[i];
}

void LayerPipeline::add_own_block(std::vector<OwnBlock>& blocks, Tag tag, int64_t tag_col) {
  if (!own_by_projection(tag)) return;
  const OwnSlice& o = own(tag);
  if (o.data == nullptr) return;
  blocks.push_back({tag_col + static_cast<int64_t>(o.head_begin) * l_.head_dim,
                    static_cast<int64_t>(o.head_count) * l_.head_dim, o});
}

void LayerPipeline::project(const void* w, int64_t ldw, int64_t c0, int64_t c1, void* out, int64_t ldo,
                            std::vector<OwnBlock> blocks) {
  const int64_t M = l_.tokens_local(), C = l_.width();
  const DType t = c_.dtype;
  const size_t es = dtype_size(t);
  auto wcol = [&](int64_t col) { return static_cast<const unsigned char*>(w) + static_cast<size_t>(col) * es; };
  auto ocol = [&](int64_t col) { return static_cast<unsigned char*>(out) + static_cast<size_t>(col - c0) * es; };
  std::sort(blocks.begin(), blocks.end(), [](const OwnBlock& a, const OwnBlock& b) { return a.col < b.col; });
  int64_t cur = c0;
  for (const OwnBlock& b : blocks) {
    if (b.col > cur) kernels_.gemm(compute_, data_.x.get(), C, wcol(cur), ldw, ocol(cur), ldo, M, b.col - cur, C, t, t);
    // The own block, batch by batch: the target's rows of one batch are consecutive.
    for (int64_t bt = 0; bt < l_.batch; ++bt) {
      kernels_.gemm(compute_, static_cast<const unsigned char*>(data_.x.get()) + static_cast<size_t>(bt * l_.seq_local * C) * es,
                    C, wcol(b.col), ldw,
                    static_cast<unsigned char*>(b.slice.data) + static_cast<size_t>(bt * b.slice.batch_pitch) * es,
                    b.slice.row_pitch, l_.seq_local, b.width, C, t, t);
    }
    cur = b.col + b.width;
  }
  if (cur < c1) kernels_.gemm(compute_, data_.x.get(), C, wcol(cur), ldw, ocol(cur), ldo, M, c1 - cur, C, t, t);
}

// A step of the layer's schedule (lib/run/schedule): a projection, a norm or a submission.
void LayerPipeline::run_step(Step step, bool last_submit) {
  switch (step) {
    case Step::kProjectQkv:
    case Step::kProjectFusedV:
    case Step::kProjectFusedQK: return project_fused(step);
    case Step::kProjectQ: return project_separate(Tag::kQ);
    case Step::kProjectK: return project_separate(Tag::kK);
    case Step::kProjectV: return project_separate(Tag::kV);
    case Step::kNormQ:
    case Step::kNormK:
      if (norm_applies()) {
        const bool q = step == Step::kNormQ;
        kernels_.norm_rope(compute_, norm_view(q), c_.dtype, norm_params(c_, data_, q));
      }
      return;
    case Step::kNormQK:
      if (norm_applies()) {
        const QkView q = norm_view(true), k = norm_view(false);  // Q's own slice fetched first, as op by op
        kernels_.norm_rope_qk(compute_, q, norm_params(c_, data_, true), k, norm_params(c_, data_, false), c_.dtype);
      }
      return;
    case Step::kSubmitQ: return submit(Tag::kQ, last_submit);
    case Step::kSubmitK: return submit(Tag::kK, last_submit);
    case Step::kSubmitV: return submit(Tag::kV, last_submit);
  }
}

// The fused projection's columns for the step: Q at 0, K at Ct, V at 2Ct (all, V's or Q's and K's).
void LayerPipeline::project_fused(Step step) {
  const int64_t Ct = l_.width_tp();
  const int64_t c0 = step == Step::kProjectFusedV ? 2 * Ct : 0;
  const int64_t c1 = step == Step::kProjectFusedQK ? 2 * Ct : 3 * Ct;
  std::vector<OwnBlock> blocks;
  for (Tag tag : {Tag::kQ, Tag::kK, Tag::kV}) {
    const int64_t col = tag_index(tag) * Ct;
    if (col >= c0 && col < c1) add_own_block(blocks, tag, col);
  }
  project(data_.w_qkv.get(), 3 * Ct, c0, c1, static_cast<unsigned char*>(qkv_.get()) + bytes_of(c0, c_.dtype), 3 * Ct,
          std::move(blocks));
}

// One tensor's projection by its own weight (separate QKV).
void LayerPipeline::project_separate(Tag tag) {
  const int64_t Ct = l_.width_tp();
  const DeviceBuffer& w = tag == Tag::kQ ? data_.w_q : tag == Tag::kK ? data_.w_k : data_.w_v;
  DeviceBuffer& out = tag == Tag::kQ ? q_ : tag == Tag::kK ? k_ : v_;
  std::vector<OwnBlock> blocks;
  add_own_block(blocks, tag, 0);
  project(w.get(), Ct, 0, Ct, out.get(), Ct, std::move(blocks));
}

// One tensor's scatter handed to the transport: from the strided view of the fused output (or
// its own buffer), packed first under the pack-strided ablation; the last submission (or every
// one without the grouped handshake) carries the handshake.
void LayerPipeline::submit(Tag tag, bool last_submit) {
  const int64_t M = l_.tokens_local(), Ct = l_.width_tp();
  const DType t = c_.dtype;
  Submission sub;
  sub.tag = tag;
  sub.dir = Direction::kScatter;
  if (schedule_.fused) {
    const int64_t col = tag_index(sub.tag) * Ct;
    sub.src = static_cast<unsigned char*>(qkv_.get()) + bytes_of(col, t);
    sub.src_row_pitch = 3 * Ct;  // the strided view: no packing copy
  } else {
    sub.src = (sub.tag == Tag::kQ ? q_ : sub.tag == Tag::kK ? k_ : v_).get();
    sub.src_row_pitch = Ct;
  }
  if (opts_.pack_strided && sub.src_row_pitch != Ct) {
    // Ablation: the strided view copied into a contiguous buffer first.
    DeviceBuffer& packed = packed_[tag_index(sub.tag)];
    if (!packed) packed = dev_.alloc(bytes_of(M * Ct, t));
    dev_.copy_2d(compute_, packed.get(), bytes_of(Ct, t), sub.src, bytes_of(sub.src_row_pitch, t), bytes_of(Ct, t),
                 static_cast<size_t>(M));
    sub.src = packed.get();
    sub.src_row_pitch = Ct;
  }
  sub.shape = scatter_shape();
  sub.barrier = last_submit || !opts_.grouped_handshake;
  sub.own_slice_written = own(sub.tag).data != nullptr;
  auto ex = scatter_.submit(sub, compute_);
  (sub.tag == Tag::kQ ? ex_q_ : sub.tag == Tag::kK ? ex_k_ : ex_v_) = std::move(ex);
}

void LayerPipeline::enqueue_layer() {
  const int64_t M = l_.tokens_local(), C = l_.width(), Ct = l_.width_tp();
  const DType t = c_.dtype;
  size_t last = 0;
  for (size_t i = 0; i < schedule_.steps.size(); ++i)
    if (is_submit(schedule_.steps[i])) last = i;

  for (bool& f : own_fetched_) f = false;  // own slices: looked up again each layer
  ev_start_->record(compute_);
  scatter_.begin_layer(compute_);
  for (size_t i = 0; i < schedule_.steps.size(); ++i) {
    set_activity(is_submit(schedule_.steps[i]) ? "submitting the scatter" : "enqueueing the projection and norms");
    run_step(schedule_.steps[i], i == last);
    mark_stage(*ev_steps_[i]);
  }
  // Consumption: only now does the compute stream wait for the scatter.
  ex_q_->wait(compute_);
  ex_k_->wait(compute_);
  ex_v_->wait(compute_);
  mark_stage(*ev_waited_);

  set_activity("enqueueing attention");
  DeviceBuffer& attn = attn_out();
  kernels_.attention(compute_, ex_q_->data(), ex_k_->data(), ex_v_->data(), attn.get(), l_.batch, l_.seq,
                     l_.heads_local, l_.head_dim, t, 1.0f / std::sqrt(static_cast<float>(l_.head_dim)));
  mark_stage(*ev_attn_);
  scatter_.release(compute_);  // attention has read the scatter targets

  Submission g;
  g.tag = Tag::kO;
  g.dir = Direction::kGather;
  g.src = attn.get();
  g.shape = ExchangeShape{l_.batch, l_.seq_local, l_.heads_tp, l_.head_dim, t, l_.seq};
  g.barrier = true;
  set_activity("submitting the gather");
  ex_o_ = gather_.submit(g, compute_);
  ex_o_->wait(compute_);
  mark_stage(*ev_gather_);

  set_activity("enqueueing the output projection");
  kernels_.gemm(compute_, ex_o_->data(), Ct, data_.w_o.get(), C, out_f32_.get(), C, M, C, Ct, t, DType::kFP32);
  set_activity("in the TP all-reduce");
  if (l_.tp > 1) tp_coll_->all_reduce_sum_f32(compute_, out_f32_.as<float>(), static_cast<size_t>(M * C));
  kernels_.convert_from_f32(compute_, out_f32_.as<float>(), y_.get(), M * C, t);
  gather_.release(compute_);  // the output projection has read the gather targets
  ev_end_->record(compute_);
  // Every wait on the results is issued: drop them, so that the next layer's groups take
  // the same completion events as this one's (comm/transport/group_exchange.hpp).
  for (auto* ex : {&ex_q_, &ex_k_, &ex_v_, &ex_o_}) ex->reset();
  set_activity("waiting for a layer to finish");
}

DeviceBuffer& LayerPipeline::attn_out() {
  if (!attn_) attn_ = dev_.alloc(bytes_of(l_.batch * l_.seq * l_.heads_local * l_.head_dim, c_.dtype));
  return attn_;
}

LayerTiming LayerPipeline::last_timing() {
  LayerTiming t;
  auto at = [&](Event& e) { return dev_.elapsed_ms(*ev_start_, e); };
  if (!opts_.stage_timing) {  // the layer alone
    for (double& s : t.stage_ms) s = std::nan("");
    t.stage_ms[kStageLayer] = at(*ev_end_);
    return t;  // V's copy not measured (v_copy_ms -1)
  }
  double prev = 0;
  for (size_t i = 0; i < schedule_.steps.size(); ++i) {
    const double now = at(*ev_steps_[i]);
    const Step s = schedule_.steps[i];
    const int stage = is_submit(s) ? kStageScatter : is_norm(s) ? kStageNormRope : kStageProjection;
    t.stage_ms[stage] += now - prev;
    prev = now;
  }
  const double waited = at(*ev_waited_), attn = at(*ev_attn_), gathered = at(*ev_gather_), end = at(*ev_end_);
  t.stage_ms[kStageScatter] += waited - prev;
  t.stage_ms[kStageAttention] = attn - waited;
  t.stage_ms[kStageGather] = gathered - attn;
  t.stage_ms[kStageOutProjection] = end - gathered;
  t.stage_ms[kStageLayer] = end;

  // Overlap of V's copies with the compute steps that follow V's submission (the work
  // V hides behind: the Q/K norm, or the Q/K projection), from events on both streams.
  auto [v0, v1] = scatter_.copy_interval(Tag::kV);
  if (v0 && v1) {
    const double vs = at(*v0), ve = at(*v1);
    t.v_copy_ms = ve - vs;
    prev = 0;
    bool after_v = false;
    for (size_t i = 0; i < schedule_.steps.size(); ++i) {
      const double now = at(*ev_steps_[i]);
      const Step s = schedule_.steps[i];
      if (after_v && !is_submit(s)) t.v_overlap_ms += std::max(0.0, std::min(now, ve) - std::max(prev, vs));
      if (s == Step::kSubmitV) after_v = true;
      prev = now;
    }
  }
  return t;
}

std::vector<float> dense_reference(Device& dev, LayerKernels& kernels, const Case& c, Stream& s, int step) {
  Case dense = c;
  dense.tp = 1;
  dense.ulysses = 1;
  Layout l = make_layout(dense, 1, 0);
  HostLayerData h = generate_layer_data(dense, l);
  if (step > 0) h.x = generate_layer_input(dense, l, step);
  LayerData d = upload_layer_data(dev, dense, l, h);
  const int64_t M = l.tokens_local(), C = l.width();
  const DType t = c.dtype;
  DeviceBuffer qkv = dev.alloc(bytes_of(M * 3 * C, t));
  kernels.gemm(s, d.x.get(), C, d.w_qkv.get(), 3 * C, qkv.get(), 3 * C, M, 3 * C, C, t, t);
  if (c.qk_norm != NormKind::kNone || c.rope != RopeKind::kNone) {
    for (int j = 0; j < 2; ++j) {
      QkView v;
      v.data = static_cast<unsigned char*>(qkv.get()) + bytes_of(j * C, t);
      v.row_pitch = 3 * C;
      v.batch = l.batch;
      v.tokens_per_batch = l.seq;
      v.pos_offset = 0;
      v.heads = l.heads;
      v.head_dim = l.head_dim;
      kernels.norm_rope(s, v, t, norm_params(dense, d, j == 0));
    }
  }
  DeviceBuffer qkv_sep[3];
  for (int j = 0; j < 3; ++j) {
    qkv_sep[j] = dev.alloc(bytes_of(M * C, t));
    dev.copy_2d(s, qkv_sep[j].get(), bytes_of(C, t), static_cast<unsigned char*>(qkv.get()) + bytes_of(j * C, t),
                bytes_of(3 * C, t), bytes_of(C, t), static_cast<size_t>(M));
  }
  DeviceBuffer o = dev.alloc(bytes_of(M * C, t));
  kernels.attention(s, qkv_sep[0].get(), qkv_sep[1].get(), qkv_sep[2].get(), o.get(), l.batch, l.seq, l.heads,
                    l.head_dim, t, 1.0f / std::sqrt(static_cast<float>(l.head_dim)));
  DeviceBuffer out = dev.alloc(bytes_of(M * C, DType::kFP32));
  kernels.gemm(s, o.get(), C, d.w_o.get(), C, out.get(), C, M, C, C, t, DType::kFP32);
  DeviceBuffer y = dev.alloc(bytes_of(M * C, t));
  kernels.convert_from_f32(s, out.as<float>(), y.get(), M * C, t);
  s.synchronize();
  std::vector<unsigned char> raw(bytes_of(M * C, t));
  dev.copy_to_host(raw.data(), y.get(), raw.size());
  std::vector<float> ref(static_cast<size_t>(M * C));
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = load_as_float(t, raw.data(), i);
  return ref;
}

}  // namespace uipc
