// The inputs of the check that failed NormRopeVectorKernelPipelinedWalk (seed 980215271, fp32 LayerNorm,
// head_dim 128, pipelined walk 8; call1-gpu-tests.txt), rebuilt on the CPU: the test draws every input
// from std::mt19937 through std::uniform_real_distribution<float> (one draw a value in libstdc++), so
// the draws of the 23 + 8 + 8 checks before it are skipped and its own repeated. Prints the failing
// element's float64 reference, its rotated pair's length, and the angle error that the measured error
// implies. Build and run: g++ -O2 -o r replay-seed-980215271.cpp && ./r (about 8 s).
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
int main() {
  std::mt19937 rng(980215271u);
  auto uni = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  const unsigned long long d128 = 5000ull * 9216 + 256, d72 = 5000ull * 1080 + 144, d64 = 5000ull * 448 + 128;
  rng.discard(23 * d128 + 8 * d72 + 8 * d64);
  const int H = 24, D = 128, width = H * D, pitch = 3 * width;
  const long rows = 5000;
  std::vector<float> qkv(rows * pitch);
  for (auto& x : qkv) x = uni(-2, 2);
  std::vector<float> gamma(D), beta(D);
  for (auto& g : gamma) g = 1.0f + 0.25f * uni(-1, 1);
  for (auto& b : beta) b = 0.25f * uni(-1, 1);
  const long m = 142;
  const int S = 50, tok = m % S, pos = 100 + tok;  // view 0 = K (slot 1), pos_offset 100
  const int h = 2946 / D;
  double v[128];
  for (int i = 0; i < D; ++i) v[i] = qkv[m * pitch + 1 * width + h * D + i];
  double mu = 0, var = 0;
  for (int i = 0; i < D; ++i) mu += v[i];
  mu /= D;
  for (int i = 0; i < D; ++i) var += (v[i] - mu) * (v[i] - mu);
  var /= D;
  const double d = std::sqrt(var + 1e-6f);
  for (int i = 0; i < D; ++i) v[i] = (v[i] - mu) / d * gamma[i] + beta[i];
  double pre[2] = {v[2], v[3]};
  const int i = 1;
  const float th = std::pow(10000.0f, -(2.0f * i) / static_cast<float>(D));
  const double a = static_cast<double>(static_cast<float>(pos) * th);
  const double c = std::cos(a), s = std::sin(a);
  const double r0 = v[2] * c - v[3] * s, r1 = v[2] * s + v[3] * c;
  std::printf("pos %d angle %.9g th %.9g\nelement 2946 ref %.6g (element 2947 %.6g), pair length %.6g (before rotation %.6g %.6g)\n",
              pos, a, th, r0, r1, std::hypot(r0, r1), pre[0], pre[1]);
  std::printf("old tolerance %.6g, pair-length tolerance %.6g; angle error that gives 4.12554e-05: %.3g rad\n",
              4e-5 * (1 + std::fabs(r0)),  // fp32 output: no rounding term (unit_roundoff 0)
              4e-5 * (1 + std::hypot(r0, r1)), 4.12554e-05 / std::hypot(r0, r1));
  // The frequency one float ulp either side (the device's powf against the reference's pow):
  // how far each moves the float angle.
  for (float t2 : {std::nextafter(th, 0.0f), std::nextafter(th, 2.0f)})
    std::printf("frequency %.9g: angle moves by %.3g rad\n", t2,
                static_cast<double>(static_cast<float>(pos) * t2) - static_cast<double>(static_cast<float>(pos) * th));
}
