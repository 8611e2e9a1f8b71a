// Replay of stored traces and the fit of a machine's free parameters (model/calibrate.hpp).
#include "model/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <system_error>
#include <thread>

#include "base/error.hpp"

namespace uipc::model {

namespace {

// The machine a case replays on: `machine` itself, or a copy with the case's own norm+RoPE
// profile (the code that measured it), its host's own call costs and its GPU's own device
// costs (both measured beside it).
Machine with_own_profile(const ReplayCase& c, const Machine& machine) {
  Machine own = machine;
  if (!c.norm_rope.empty()) own.norm_rope = c.norm_rope;
  if (!c.device.empty()) own.device = c.device;
  for (const auto& [name, us] : c.host_costs) {
    const auto p = own.params.find(name);
    if (p == own.params.end()) throw InputError(c.label + ": host cost of an unknown parameter '" + name + "'");
    p->second.value = us;
  }
  return own;
}

// modeled_stages on the machine the case replays on (with_own_profile's, already made).
std::vector<double> stages_on(const ReplayCase& c, const Machine& m, int num_stages) {
  Timeline tl = simulate(c.traces, m, c.issue);
  std::vector<double> crit(num_stages, -std::numeric_limits<double>::infinity());
  std::vector<bool> timed(num_stages, false);  // a stage without terms was not timed (--stage-timing off)
  for (size_t r = 0; r < c.terms.size() && r < tl.ranks.size(); ++r) {
    std::vector<double> mine(num_stages, 0.0);
    for (const StageTerm& t : c.terms[r]) {
      if (t.stage < 0 || t.stage >= num_stages || t.op < 0 || t.op >= static_cast<int>(tl.ranks[r].size()))
        throw InputError(c.label + ": stage term out of range (stage " + std::to_string(t.stage) + ", op " +
                         std::to_string(t.op) + ")");
      mine[t.stage] += t.coef * tl.ranks[r][t.op].end_ms;
      timed[t.stage] = true;
    }
    for (int s = 0; s < num_stages; ++s) crit[s] = std::max(crit[s], mine[s]);
  }
  for (int s = 0; s < num_stages; ++s)
    if (!timed[s]) crit[s] = std::numeric_limits<double>::quiet_NaN();
  return crit;
}

}  // namespace

std::vector<double> modeled_stages(const ReplayCase& c, const Machine& machine, int num_stages) {
  if (c.norm_rope.empty() && c.host_costs.empty() && c.device.empty()) return stages_on(c, machine, num_stages);
  return stages_on(c, with_own_profile(c, machine), num_stages);
}

namespace {

bool same_profile(const std::vector<NormRopePoint>& a, const std::vector<NormRopePoint>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const NormRopePoint& x, const NormRopePoint& y) {
    return x.norm == y.norm && x.dtype == y.dtype && x.head_dim == y.head_dim && x.gbs == y.gbs;
  });
}

// The mean squared log ratio of modelled to measured stages over every case, at a point u of
// the unit box. Each case replays on the machine of its norm+RoPE profile, made once (one per
// distinct profile; set() moves the free parameters of all of them), not copied per replay.
// The cases are shared among `jobs` threads; each case's sum is kept apart and they are added
// in case order, so the value is the same, bit for bit, at any number of threads.
struct Objective {
  const std::vector<ReplayCase>& cases;
  std::vector<std::string> names;  // the free parameters, in order
  int num_stages;
  int jobs = 1;
  std::vector<Machine> machines;   // [0]: the start machine; then one per distinct own profile
  std::vector<size_t> machine_of;  // [case]
  int evaluations = 0;

  Objective(const std::vector<ReplayCase>& cs, const Machine& start, int stages, int threads)
      : cases(cs), num_stages(stages), jobs(std::max(1, threads)), machines{start} {
    for (const ReplayCase& c : cases) {
      size_t m = 0;
      if (!c.norm_rope.empty()) {
        m = 1;
        while (m < machines.size() && !same_profile(machines[m].norm_rope, c.norm_rope)) ++m;
        if (m == machines.size()) machines.push_back(with_own_profile(c, start));
      }
      machine_of.push_back(m);
    }
  }
  Machine& machine() { return machines.front(); }

  void set(const std::vector<double>& u) {
    for (Machine& mc : machines)
      for (size_t i = 0; i < names.size(); ++i) {
        Param& p = mc.params.at(names[i]);
        p.value = p.lo + std::clamp(u[i], 0.0, 1.0) * (p.hi - p.lo);
      }
  }
  double operator()(const std::vector<double>& u) {
    ++evaluations;
    set(u);
    std::vector<double> sums(cases.size(), 0.0);
    std::vector<int> counts(cases.size(), 0);
    auto replay = [&](size_t i) {
      const ReplayCase& c = cases[i];
      const std::vector<double> m = stages_on(c, machines[machine_of[i]], num_stages);
      for (int s = 0; s < num_stages; ++s) {
        if (!(c.measured[s] > 0) || !(m[s] > 0)) continue;
        const double e = std::log(m[s] / c.measured[s]);
        sums[i] += e * e;
        ++counts[i];
      }
    };
    const size_t threads = std::min<size_t>(static_cast<size_t>(jobs), cases.size());
    if (threads <= 1) {
      for (size_t i = 0; i < cases.size(); ++i) replay(i);
    } else {
      std::vector<std::exception_ptr> failed(threads);
      std::vector<std::thread> pool;
      try {
        for (size_t t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            try {
              for (size_t i = t; i < cases.size(); i += threads) replay(i);
            } catch (...) {
              failed[t] = std::current_exception();
            }
          });
      } catch (const std::system_error& e) {  // no thread to be had: those started finish first
        for (std::thread& th : pool) th.join();
        throw RuntimeError(std::string("calibrate: cannot start a replay thread (--jobs ") + std::to_string(jobs) +
                           "): " + e.what());
      }
      for (std::thread& th : pool) th.join();
      for (const std::exception_ptr& e : failed)
        if (e) std::rethrow_exception(e);
    }
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < cases.size(); ++i) sum += sums[i], n += counts[i];
    // Leaving the box costs: the clamped point is evaluated, plus the distance out.
    double out = 0;
    for (double x : u) out += x < 0 ? -x : x > 1 ? x - 1 : 0;
    return (n > 0 ? sum / n : 0) + out;
  }
};

// One Nelder-Mead descent from x0 with simplex size `step` (standard coefficients).
std::vector<double> nelder_mead(Objective& f, std::vector<double> x0, double step, int max_evals, double* best) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> x(n + 1, x0);
  for (size_t i = 0; i < n; ++i) x[i + 1][i] += x0[i] + step <= 1 ? step : -step;
  std::vector<double> fx(n + 1);
  for (size_t i = 0; i <= n; ++i) fx[i] = f(x[i]);
  for (int it = 0; f.evaluations < max_evals; ++it) {
    std::vector<size_t> order(n + 1);
    for (size_t i = 0; i <= n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fx[a] < fx[b]; });
    std::vector<std::vector<double>> xs(n + 1);
    std::vector<double> fs(n + 1);
    for (size_t i = 0; i <= n; ++i) xs[i] = x[order[i]], fs[i] = fx[order[i]];
    x = xs;
    fx = fs;
    if (fx[n] - fx[0] < 1e-10 * (1 + fx[0])) break;
    std::vector<double> c(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) c[j] += x[i][j] / n;
    auto along = [&](double t) {
      std::vector<double> y(n);
      for (size_t j = 0; j < n; ++j) y[j] = c[j] + t * (x[n][j] - c[j]);
      return y;
    };
    std::vector<double> r = along(-1);
    const double fr = f(r);
    if (fr < fx[0]) {
      std::vector<double> e = along(-2);
      const double fe = f(e);
      x[n] = fe < fr ? e : r;
      fx[n] = std::min(fe, fr);
    } else if (fr < fx[n - 1]) {
      x[n] = r;
      fx[n] = fr;
    } else {
      std::vector<double> k = along(fr < fx[n] ? -0.5 : 0.5);
      const double fk = f(k);
      if (fk < std::min(fr, fx[n])) {
        x[n] = k;
        fx[n] = fk;
      } else {
        for (size_t i = 1; i <= n; ++i) {
          for (size_t j = 0; j < n; ++j) x[i][j] = x[0][j] + 0.5 * (x[i][j] - x[0][j]);
          fx[i] = f(x[i]);
        }
      }
    }
  }
  size_t b = std::min_element(fx.begin(), fx.end()) - fx.begin();
  *best = fx[b];
  return x[b];
}

}  // namespace

FitResult calibrate(const std::vector<ReplayCase>& cases, const Machine& start, int num_stages,
                    const std::string& fitted_from, int jobs) {
  if (cases.empty()) throw InputError("calibrate: no measured runs to fit to");
  for (const ReplayCase& c : cases)  // the fit sets the machine's host costs on every case
    if (!c.host_costs.empty() || !c.device.empty())
      throw InputError("calibrate: " + c.label + " carries its host's or its GPU's measured costs: only validate "
                       "replays those");
  Objective f(cases, start, num_stages, jobs);
  std::vector<double> u;
  for (const auto& [name, p] : start.params)
    if (p.free) {
      f.names.push_back(name);
      u.push_back(p.hi > p.lo ? (p.value - p.lo) / (p.hi - p.lo) : 0.0);
    }
  if (f.names.empty()) throw InputError("calibrate: machine '" + start.name + "' has no free parameter (\"fit\")");
  double best = f(u);
  // Restarts from the best point with a shrinking simplex, until one no longer helps.
  for (double step : {0.25, 0.1, 0.04, 0.015}) {
    double now = 0;
    std::vector<double> v = nelder_mead(f, u, step, f.evaluations + 400 * static_cast<int>(u.size()), &now);
    if (now < best) {
      best = now;
      u = v;
    }
  }
  f.set(u);
  FitResult r;
  r.machine = f.machine();
  for (const std::string& name : f.names) {
    Param& p = r.machine.params.at(name);
    // The box [lo, hi] lies inside the physical range (parse_machine), and the search
    // only evaluates clamped points: a fitted value outside it would be a bug here.
    if (p.value < p.range_lo || p.value > p.range_hi)
      throw RuntimeError("calibrate: " + name + " fitted to " + std::to_string(p.value) + ", outside its range");
    p.source = "fitted: " + fitted_from;
  }
  r.objective = best;
  r.evaluations = f.evaluations;
  return r;
}

}  // namespace uipc::model
