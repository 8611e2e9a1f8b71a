// `ulysses-ipc model predict`: every run of --mode model reports replayed on a machine,
// with each run's most sensitive parameter (finite differences), for the predictions
// pages (scripts/model_predictions.sh, docs/predictions.md). MODELLED figures only.
#pragma once

#include <string>
#include <vector>

#include "model/machine.hpp"

namespace uipc {

// Writes JSON to `out`: per report path, per "case/run", the modelled critical-path
// stages (ms, the pipeline's stage order), the parameter whose +5% step moves the layer
// most, with its elasticity d log(layer) / d log(parameter) ("sensitive", "elasticity"),
// and the same for the scatter ("scatter_sensitive", "scatter_elasticity"); the median layer
// and scatter over five start skews, 0.8-1.2 times the machine's ("skew_median_ms"), and
// the smallest and largest over ten ("skew_layer_ms", "skew_scatter_ms"). Returns the exit
// code. And "_modelled_on": the machine's name, and the sources of a GPU's own costs
// ("gpu_costs", Machine::device) and of a host's ("host_costs": a parameter whose source
// starts with kHostCostsSource), each "" where the machine's own stood.
inline constexpr const char* kHostCostsSource = "measured on the host to predict: ";
int model_predict(const std::vector<std::string>& reports, const model::Machine& m, const std::string& out);

}  // namespace uipc
