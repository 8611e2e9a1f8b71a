// Seeded generation of inputs and weights (docs/math.md), per rank.
#include "lib/run/layer_data.hpp"

#include <cmath>

#include "base/rng.hpp"

namespace uipc {

namespace {
enum : uint64_t {
  kStreamX = 1, kStreamWqkv = 2, kStreamWo = 3, kStreamGq = 4, kStreamGk = 5, kStreamBq = 6, kStreamBk = 7,
  kStreamStepNoise = 8
};

int64_t norm_width(const Case& c) {
  return c.qk_norm == NormKind::kRmsAcrossHeads ? c.width() : c.head_dim;
}
}  // namespace

std::vector<float> generate_layer_input(const Case& c, const Layout& l, int step) {
  const int64_t C = c.width(), S = c.seq_len, Sl = l.seq_local, B = l.batch;
  const uint64_t seed = c.seed;
  std::vector<float> x(static_cast<size_t>(B * Sl * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < Sl; ++s) {
      const int64_t sg = l.pos_offset() + s;
      // Token sg keeps similarity rho(sg) from step to step: 1 - 2(1 - rho)(sg + 1/2)/S,
      // whose mean over the tokens is the case's step_similarity.
      const float rho = static_cast<float>(1.0 - 2.0 * (1.0 - c.step_similarity) * (static_cast<double>(sg) + 0.5) /
                                                     static_cast<double>(S));
      const float keep = rho, fresh = std::sqrt(std::max(0.0f, 1.0f - rho * rho));
      for (int64_t k = 0; k < C; ++k) {
        const uint64_t e = static_cast<uint64_t>((b * S + sg) * C + k);
        float v = uniform_pm1(seed, kStreamX, e);
        for (int t = 1; t <= step; ++t)
          v = keep * v + fresh * uniform_pm1(seed, kStreamStepNoise, static_cast<uint64_t>(t - 1) *
                                                                     static_cast<uint64_t>(B * S * C) + e);
        x[static_cast<size_t>((b * Sl + s) * C + k)] = round_to(c.dtype, v);
      }
    }
  return x;
}

HostLayerData generate_layer_data(const Case& c, const Layout& l) {
  HostLayerData h;
  const int64_t C = c.width(), H = c.heads, D = c.head_dim;
  const int64_t Ht = l.heads_tp, h0 = l.first_head_tp();
  const uint64_t seed = c.seed;
  const DType t = c.dtype;

  h.x = generate_layer_input(c, l, 0);

  const float wscale = 1.0f / std::sqrt(static_cast<float>(C));
  h.w_qkv.resize(static_cast<size_t>(C * 3 * Ht * D));
  for (int64_t k = 0; k < C; ++k)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t hl = 0; hl < Ht; ++hl)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t hg = h0 + hl;
          float v = uniform_pm1(seed, kStreamWqkv, static_cast<uint64_t>(((k * 3 + j) * H + hg) * D + d)) * wscale;
          h.w_qkv[static_cast<size_t>(((k * 3 + j) * Ht + hl) * D + d)] = round_to(t, v);
        }

  const float oscale = 1.0f / std::sqrt(static_cast<float>(H * D));
  h.w_o.resize(static_cast<size_t>(Ht * D * C));
  for (int64_t hl = 0; hl < Ht; ++hl)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t cc = 0; cc < C; ++cc) {
        const int64_t row = (h0 + hl) * D + d;
        h.w_o[static_cast<size_t>((hl * D + d) * C + cc)] =
            round_to(t, uniform_pm1(seed, kStreamWo, static_cast<uint64_t>(row * C + cc)) * oscale);
      }

  if (c.qk_norm != NormKind::kNone) {
    const int64_t n = norm_width(c);
    h.gamma_q.resize(n);
    h.gamma_k.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      h.gamma_q[i] = 1.0f + 0.25f * uniform_pm1(seed, kStreamGq, i);
      h.gamma_k[i] = 1.0f + 0.25f * uniform_pm1(seed, kStreamGk, i);
    }
    if (c.qk_norm == NormKind::kLayerPerHead) {
      h.beta_q.resize(n);
      h.beta_k.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        h.beta_q[i] = 0.25f * uniform_pm1(seed, kStreamBq, i);
        h.beta_k[i] = 0.25f * uniform_pm1(seed, kStreamBk, i);
      }
    }
  }
  return h;
}

DeviceBuffer upload_as(Device& dev, const std::vector<float>& v, DType t) {
  if (v.empty()) return DeviceBuffer();
  std::vector<unsigned char> bytes(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_from_float(t, bytes.data(), i, v[i]);
  DeviceBuffer b = dev.alloc(bytes.size());
  dev.copy_to_device(b.get(), bytes.data(), bytes.size());
  return b;
}

LayerData upload_layer_data(Device& dev, const Case& c, const Layout& l, const HostLayerData& h) {
  LayerData d;
  const DType t = c.dtype;
  const int64_t C = c.width(), Ht = l.heads_tp, D = c.head_dim;
  d.x = upload_as(dev, h.x, t);
  d.w_qkv = upload_as(dev, h.w_qkv, t);
  // Separate projections: the Q, K, V column blocks of the fused weight, contiguous.
  std::vector<float> part(static_cast<size_t>(C * Ht * D));
  DeviceBuffer* parts[3] = {&d.w_q, &d.w_k, &d.w_v};
  for (int j = 0; j < 3; ++j) {
    for (int64_t k = 0; k < C; ++k)
      for (int64_t e = 0; e < Ht * D; ++e)
        part[static_cast<size_t>(k * Ht * D + e)] = h.w_qkv[static_cast<size_t>((k * 3 + j) * Ht * D + e)];
    *parts[j] = upload_as(dev, part, t);
  }
  d.w_o = upload_as(dev, h.w_o, t);
  d.gamma_q = upload_as(dev, h.gamma_q, DType::kFP32);
  d.gamma_k = upload_as(dev, h.gamma_k, DType::kFP32);
  d.beta_q = upload_as(dev, h.beta_q, DType::kFP32);
  d.beta_k = upload_as(dev, h.beta_k, DType::kFP32);
  return d;
}

LayerData allocate_layer_data(Device& dev, const Case& c, const Layout& l) {
  LayerData d;
  const size_t es = dtype_size(c.dtype);
  const int64_t C = c.width(), Ct = static_cast<int64_t>(l.heads_tp) * c.head_dim;
  auto buf = [&](int64_t elems, size_t elem_size) { return dev.alloc(static_cast<size_t>(elems) * elem_size); };
  d.x = buf(l.batch * l.seq_local * C, es);
  d.w_qkv = buf(C * 3 * Ct, es);
  d.w_q = buf(C * Ct, es);
  d.w_k = buf(C * Ct, es);
  d.w_v = buf(C * Ct, es);
  d.w_o = buf(Ct * C, es);
  if (c.qk_norm != NormKind::kNone) {
    d.gamma_q = buf(norm_width(c), sizeof(float));
    d.gamma_k = buf(norm_width(c), sizeof(float));
    if (c.qk_norm == NormKind::kLayerPerHead) {
      d.beta_q = buf(norm_width(c), sizeof(float));
      d.beta_k = buf(norm_width(c), sizeof(float));
    }
  }
  return d;
}

}  // namespace uipc
