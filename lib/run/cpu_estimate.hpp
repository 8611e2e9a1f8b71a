// How long a case takes on the CPU in simulation mode, before it starts: the
// flops of its layer parts (projections and attention, per rank, and rank 0's
// dense reference) over host-kernel rates measured at startup on this machine.
// run_deck uses it to refuse a case that would run past the time limit, to
// print the estimate of a case expected to take more than a minute, and to
// widen the deck's watchdog where one layer of a full-size case takes longer on
// a CPU than the watchdog allows a peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc {

class Device;
class LayerKernels;
class Stream;

// The work of one case, from its shapes alone.
struct CaseFlops {
  double layer_gemm = 0;           // one layer of one rank: QKV and output projections
  double layer_attention = 0;      // one layer of one rank: attention of its heads
  double reference_gemm = 0;       // the dense reference (rank 0), one step
  double reference_attention = 0;  // the same, attention
  int64_t layers = 0;              // layers each rank runs over the case's runs, repeats and steps
  int64_t runs = 0;                // transport x schedule x ablation runs
  int steps = 1;                   // dense references (one per step)
};
CaseFlops case_flops(const Case& c, int world);

// Flop rates of the host kernels of one rank, measured with every rank of the
// node measuring at once (so the cores the ranks share, and other load, are in
// them).
struct HostRates {
  double gemm = 0;       // flop/s
  double attention = 0;  // flop/s
};
// Times a GEMM and an attention on `k` whose operands outgrow the caches as a full-size
// layer's do (about 3 GFLOP: a second or two).
HostRates measure_host_rates(Device& dev, LayerKernels& k, Stream& s);

struct CpuEstimate {
  double reference_s = 0;  // rank 0's dense references, alone on a core (the others wait)
  double layer_s = 0;      // one layer on one rank, beside the other ranks
  double total_s = 0;      // the references and every layer
  double minimum_s = 0;    // the references and one layer of each run: the size of the case
};
// `share`: ranks per core on this node (>= 1 when ranks outnumber cores), the
// factor between a rank's rate measured beside the others and its rate alone.
CpuEstimate estimate_case_cpu(const CaseFlops& f, const HostRates& r, double share);

// The dense reference and one layer of each run (CpuEstimate::minimum_s) with no
// measurement at hand, at a pessimistic fixed rate: cases whose layers take under a
// minute even so need no measurement (many small layers are not a size problem).
double pessimistic_case_seconds(const Case& c, int world, double share);

// The ways to run a case too large for the CPU: --mode model and, where a
// preset has one, the case's simulation-sized twin deck
// ("inputs/flux-dev-sim.h5").
std::string sim_alternatives(const Case& c);

// Ranks per core of this process's node (>= 1): `share` above.
double ranks_per_core(int ranks_on_node);

// Estimates each case's CPU time at rates `r`; throws InputError (exit 2) for the
// first case above `limit_s` whose reference and one layer per run alone take more
// than a minute, naming the estimate, the limit and the ways to go
// (sim_alternatives); prints through `print` the estimate of each case expected to
// take more than a minute. Local: the same on every rank given the same rates.
std::vector<CpuEstimate> check_case_cpu_times(const std::vector<Case>& cases, int world, int ranks_on_node,
                                              double limit_s, const HostRates& r,
                                              const std::function<void(const std::string&)>& print);

// The "--mode sim" check of every case before any runs (run_deck): measures the host
// rates (the slowest rank's, gathered within `watchdog_s` plus the probe's own time)
// only if some case's layers may take more than a minute at the pessimistic rate, then
// check_case_cpu_times, the refusal reported once for all ranks. Returns each case's
// estimate (zero where none was needed). Collective over MPI_COMM_WORLD.
std::vector<CpuEstimate> check_sim_cpu_time(const std::vector<Case>& cases, int world, int ranks_on_node,
                                            double limit_s, double watchdog_s, Device& dev, LayerKernels& k,
                                            const std::function<void(const std::string&)>& print);

// The deck's watchdog, widened for a long case: at least twice one layer's
// estimated time (a peer may be that late at a handshake) and a tenth of the
// dense reference (the other ranks wait 20 watchdogs for it). Unchanged for a
// case that needs no estimate.
double sim_watchdog_for(double deck_watchdog_s, const CpuEstimate& e);

// Progress lines of a case expected to take more than a minute, or (with no
// estimate) once it has run for a minute; silent otherwise: the dense reference, and
// a layer every 20 s at most, with the time spent and the estimate (or, with none,
// the time left at the rate so far).
class CaseProgress {
 public:
  CaseProgress(const Case& c, const CpuEstimate& e, std::function<void(const std::string&)> print);
  void reference_done();
  void layer_done();

 private:
  void line(const std::string& what);
  std::string name_;
  CpuEstimate est_;
  int64_t layers_ = 0, layers_done_ = 0;
  int steps_ = 1, references_done_ = 0;
  std::function<void(const std::string&)> print_;
  std::chrono::steady_clock::time_point start_, last_line_;
};

}  // namespace uipc
