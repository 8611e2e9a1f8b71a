// bench_kernels' HDF5 output as rates for the machine model (lib/model_bench.hpp).
#include "lib/report/model_bench.hpp"

#include <cstdio>
#include <sstream>

#include "base/error.hpp"
#include "lib/hdf5/hdf5_file.hpp"

namespace uipc {

std::vector<model::NormRopePoint> read_norm_rope_profile(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  const h5::Group root = f.root();
  if (!root.has_link("bench_kernels")) throw InputError(path + ": no group 'bench_kernels' (not bench_kernels -o output)");
  const h5::Group g = root.open_group("bench_kernels");
  const std::vector<std::string> section = g.read_string_list("section", 1 << 16), what = g.read_string_list("what", 1 << 16),
                                 shape = g.read_string_list("shape", 1 << 16), unit = g.read_string_list("unit", 1 << 16);
  const std::vector<double> rate = g.read_double_list("rate");
  if (what.size() != section.size() || shape.size() != section.size() || unit.size() != section.size() ||
      rate.size() != section.size())
    throw InputError(path + ": bench_kernels' section, what, shape, unit and rate differ in length");
  // The code the bench measured: its `revision` attribute, else the stored file's name
  // (docs/measured/ names them bench_kernels-<revision>.h5), else unknown.
  std::string revision = g.has_attr("revision") ? g.read_string("revision") : "";
  if (revision.empty()) {
    const size_t slash = path.find_last_of('/');
    const std::string file = path.substr(slash == std::string::npos ? 0 : slash + 1);
    const std::string pre = "bench_kernels-", post = ".h5";
    std::string rev = file.size() > pre.size() + post.size() && file.rfind(pre, 0) == 0 &&
                              file.compare(file.size() - post.size(), post.size(), post) == 0
                          ? file.substr(pre.size(), file.size() - pre.size() - post.size())
                          : "";
    const bool hex = rev.size() >= 7 && rev.find_first_not_of("0123456789abcdef") == std::string::npos;
    revision = hex ? rev + " (from the file name)" : "revision not recorded";
  }
  // The rows of the launch the measured code's layer ran: Q and K in one launch where the
  // file says so (norm_rope_layer_launch = qk_one_launch: "norm+RoPE <kind> (the pick, Q+K
  // one launch)"), else, as every bench of code before it, the dispatched kernel's two
  // launches ("norm+RoPE <kind>").
  const bool one_launch =
      g.has_attr(kNormRopeLayerLaunchAttr) && g.read_string(kNormRopeLayerLaunchAttr) == kNormRopeQkOneLaunch;
  const std::string suffix = one_launch ? kNormRopeQkRowSuffix : "";
  std::vector<model::NormRopePoint> out;
  for (size_t i = 0; i < section.size(); ++i) {
    if (section[i] != "norm+rope" || unit[i] != "TB/s") continue;
    // The dispatched kernel's rows read "norm+RoPE <kind>" (RoPE only: "none (RoPE only)");
    // the forced kernels' carry a parenthesis after the kind.
    model::NormRopePoint p;
    std::string kind = what[i].rfind("norm+RoPE ", 0) == 0 ? what[i].substr(10) : "";
    if (!suffix.empty()) {
      if (kind.size() <= suffix.size() || kind.compare(kind.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      kind.resize(kind.size() - suffix.size());
    }
    if (kind == "none (RoPE only)") kind = "none";
    bool known = false;
    for (const char* k : model::kNormKindNames) known = known || kind == k;
    if (!known) continue;
    long long m = 0, h = 0, d = 0;
    char dtype[16] = {0}, view[16] = {0};
    if (std::sscanf(shape[i].c_str(), "M%lld H%lld D%lld %15s %15s", &m, &h, &d, dtype, view) != 5) continue;
    if (std::string(view) != "fused") continue;
    p.norm = kind;
    p.dtype = dtype;
    p.head_dim = static_cast<int>(d);
    p.gbs = rate[i] * 1000.0;
    std::ostringstream src;
    src << "bench_kernels " << what[i] << " " << shape[i] << ": " << rate[i] << " TB/s read+write (" << path
        << ", code " << revision << ")";
    p.source = src.str();
    out.push_back(p);
  }
  if (out.empty()) throw InputError(path + ": bench_kernels holds no norm+RoPE row of the fused view");
  return out;
}

}  // namespace uipc
