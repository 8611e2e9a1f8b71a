// The layer pipeline (one, for every schedule, transport and device) and the dense
// reference it is checked against.
#include "lib/pipeline.hpp"

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
bool is_norm(Step s) { return s == Step::kNormQ || s == Step::kNormK; }
}  // namespace

LayerPipeline::LayerPipeline(Device& dev, LayerKernels& kernels, const Case& c, const Layout& l,
                             const LayerData& data, const Schedule& schedule, Transport& scatter,
                             Transport& gather, Collectives* tp_coll, Stream& compute)
    : dev_(dev), kernels_(kernels), c_(c), l_(l), data_(data), schedule_(schedule), scatter_(scatter),
      gather_(gather), tp_coll_(tp_coll), compute_(compute) {
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

void LayerPipeline::run_step(Step step, bool last_submit) {
  const int64_t M = l_.tokens_local(), C = l_.width(), Ct = l_.width_tp();
  const DType t = c_.dtype;
  switch (step) {
    case Step::kProjectQkv:
      kernels_.gemm(compute_, data_.x.get(), C, data_.w_qkv.get(), 3 * Ct, qkv_.get(), 3 * Ct, M, 3 * Ct, C, t, t);
      break;
    case Step::kProjectQ:
      kernels_.gemm(compute_, data_.x.get(), C, data_.w_q.get(), Ct, q_.get(), Ct, M, Ct, C, t, t);
      break;
    case Step::kProjectK:
      kernels_.gemm(compute_, data_.x.get(), C, data_.w_k.get(), Ct, k_.get(), Ct, M, Ct, C, t, t);
      break;
    case Step::kProjectV:
      kernels_.gemm(compute_, data_.x.get(), C, data_.w_v.get(), Ct, v_.get(), Ct, M, Ct, C, t, t);
      break;
    case Step::kNormQ:
    case Step::kNormK: {
      const bool q = step == Step::kNormQ;
      if (c_.qk_norm != NormKind::kNone || c_.rope != RopeKind::kNone)
        kernels_.norm_rope(compute_, qk_view(q), t, norm_params(c_, data_, q));
      break;
    }
    case Step::kSubmitQ:
    case Step::kSubmitK:
    case Step::kSubmitV: {
      Submission sub;
      sub.tag = step == Step::kSubmitQ ? Tag::kQ : step == Step::kSubmitK ? Tag::kK : Tag::kV;
      sub.dir = Direction::kScatter;
      if (schedule_.fused) {
        const int64_t col = sub.tag == Tag::kQ ? 0 : sub.tag == Tag::kK ? Ct : 2 * Ct;
        sub.src = static_cast<unsigned char*>(qkv_.get()) + bytes_of(col, t);
        sub.src_row_pitch = 3 * Ct;  // the strided view: no packing copy
      } else {
        sub.src = (sub.tag == Tag::kQ ? q_ : sub.tag == Tag::kK ? k_ : v_).get();
        sub.src_row_pitch = Ct;
      }
      sub.shape = ExchangeShape{l_.batch, l_.seq_local, l_.heads_tp, l_.head_dim, t};
      sub.barrier = last_submit;
      auto ex = scatter_.submit(sub, compute_);
      (sub.tag == Tag::kQ ? ex_q_ : sub.tag == Tag::kK ? ex_k_ : ex_v_) = std::move(ex);
      break;
    }
  }
}

void LayerPipeline::enqueue_layer() {
  const int64_t M = l_.tokens_local(), C = l_.width(), Ct = l_.width_tp();
  const DType t = c_.dtype;
  size_t last = 0;
  for (size_t i = 0; i < schedule_.steps.size(); ++i)
    if (is_submit(schedule_.steps[i])) last = i;

  ev_start_->record(compute_);
  for (size_t i = 0; i < schedule_.steps.size(); ++i) {
    set_activity(is_submit(schedule_.steps[i]) ? "submitting the scatter" : "enqueueing the projection and norms");
    run_step(schedule_.steps[i], i == last);
    ev_steps_[i]->record(compute_);
  }
  // Consumption: only now does the compute stream wait for the scatter.
  ex_q_->wait(compute_);
  ex_k_->wait(compute_);
  ex_v_->wait(compute_);
  ev_waited_->record(compute_);

  set_activity("enqueueing attention");
  DeviceBuffer& attn = attn_out();
  kernels_.attention(compute_, ex_q_->data(), ex_k_->data(), ex_v_->data(), attn.get(), l_.batch, l_.seq,
                     l_.heads_local, l_.head_dim, t, 1.0f / std::sqrt(static_cast<float>(l_.head_dim)));
  ev_attn_->record(compute_);
  scatter_.release(compute_);  // attention has read the scatter targets

  Submission g;
  g.tag = Tag::kO;
  g.dir = Direction::kGather;
  g.src = attn.get();
  g.shape = ExchangeShape{l_.batch, l_.seq_local, l_.heads_tp, l_.head_dim, t};
  g.barrier = true;
  set_activity("submitting the gather");
  ex_o_ = gather_.submit(g, compute_);
  ex_o_->wait(compute_);
  ev_gather_->record(compute_);

  set_activity("enqueueing the output projection");
  kernels_.gemm(compute_, ex_o_->data(), Ct, data_.w_o.get(), C, out_f32_.get(), C, M, C, Ct, t, DType::kFP32);
  set_activity("in the TP all-reduce");
  if (l_.tp > 1) tp_coll_->all_reduce_sum_f32(compute_, out_f32_.as<float>(), static_cast<size_t>(M * C));
  kernels_.convert_from_f32(compute_, out_f32_.as<float>(), y_.get(), M * C, t);
  gather_.release(compute_);  // the output projection has read the gather targets
  ev_end_->record(compute_);
  set_activity("waiting for a layer to finish");
}

DeviceBuffer& LayerPipeline::attn_out() {
  if (!attn_) attn_ = dev_.alloc(bytes_of(l_.batch * l_.seq * l_.heads_local * l_.head_dim, c_.dtype));
  return attn_;
}

LayerTiming LayerPipeline::last_timing() {
  LayerTiming t;
  auto at = [&](Event& e) { return dev_.elapsed_ms(*ev_start_, e); };
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

  // Overlap of V's copies with the norm steps, from events on both streams.
  auto [v0, v1] = scatter_.copy_interval(Tag::kV);
  if (v0 && v1) {
    const double vs = at(*v0), ve = at(*v1);
    t.v_copy_ms = ve - vs;
    prev = 0;
    for (size_t i = 0; i < schedule_.steps.size(); ++i) {
      const double now = at(*ev_steps_[i]);
      if (is_norm(schedule_.steps[i])) t.v_overlap_ms += std::max(0.0, std::min(now, ve) - std::max(prev, vs));
      prev = now;
    }
  }
  return t;
}

std::vector<float> dense_reference(Device& dev, LayerKernels& kernels, const Case& c, Stream& s) {
  Case dense = c;
  dense.tp = 1;
  dense.ulysses = 1;
  Layout l = make_layout(dense, 1, 0);
  HostLayerData h = generate_layer_data(dense, l);
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
