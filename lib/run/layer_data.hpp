// A rank's layer inputs and weights, generated from the case seed exactly as
// docs/math.md ("Inputs and weights") says, and placed in device memory.
#pragma once

#include <vector>

#include "comm/device/device.hpp"
#include "lib/deck/deck.hpp"
#include "lib/run/layout.hpp"

namespace uipc {

struct LayerData {
  // (B, S_local, C) input shard, dtype
  DeviceBuffer x;
  // fused (C, 3, Ht, D) and separate (C, Ht, D) x3 projection weights for my heads
  DeviceBuffer w_qkv, w_q, w_k, w_v;
  // (Ht*D, C) output projection rows of my heads
  DeviceBuffer w_o;
  // norm weights (fp32); empty when the norm has none
  DeviceBuffer gamma_q, gamma_k, beta_q, beta_k;
};

// Host values of the generated tensors (fp32, already rounded to the dtype where the
// tensor is stored in it): used to build LayerData and for --dump.
struct HostLayerData {
  std::vector<float> x, w_qkv, w_o, gamma_q, gamma_k, beta_q, beta_k;
};

// The tensors of layout `l` (tp_rank's heads, u_rank's tokens). A Layout with
// tp = ulysses = 1 gives the whole layer (the dense reference's inputs).
HostLayerData generate_layer_data(const Case& c, const Layout& l);
// The (B, S_local, C) input rows of `l` at denoising step `step` (docs/math.md, "Steps"),
// rounded to the dtype: step 0 is generate_layer_data's x, each later step mixes the
// previous one with fresh noise so that consecutive steps have the case's mean cosine
// similarity, high on early tokens and lower on late ones.
std::vector<float> generate_layer_input(const Case& c, const Layout& l, int step);
LayerData upload_layer_data(Device& dev, const Case& c, const Layout& l, const HostLayerData& h);

// The same buffers, allocated at full size but never written (--mode model: the layer
// runs its protocol without data).
LayerData allocate_layer_data(Device& dev, const Case& c, const Layout& l);

// Host values -> device buffer of dtype t.
DeviceBuffer upload_as(Device& dev, const std::vector<float>& v, DType t);

}  // namespace uipc
