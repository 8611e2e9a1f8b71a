// ulysses-ipc: the command line (CLI11). Runs a deck (`ulysses-ipc DECK.h5 -o REPORT.h5`)
// or works on decks (`ulysses-ipc deck new|from-config|from-report|show|presets|help`, app/deck_cli.cpp). MPI and
// Kokkos up, errors caught here and turned into one clear message and an exit code
// (README, "Exit codes").
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "git_rev.h"
#include "comm/device/host_device.hpp"
#include "app/cli.hpp"
#include "app/deck_cli.hpp"
#include "app/model_cli.hpp"
#include "lib/deck/deck.hpp"
#include "lib/report/report.hpp"
#include "lib/run/run.hpp"
#include "lib/run/run_shape.hpp"

namespace {

// Set to the exit code once the program is finishing on its own: a SIGTERM that mpirun
// sends then (because another rank already exited non-zero) must not be reported as an
// interruption.
volatile std::sig_atomic_t g_finishing = 0;
volatile std::sig_atomic_t g_exit_code = 0;

extern "C" void on_signal(int sig) {
  if (g_finishing) _exit(g_exit_code);
  uipc::host_unlink_all_shm();
  uipc::remove_partial_report();
  // "ulysses-ipc: rank R interrupted (while ACTIVITY); no report written", with
  // async-signal-safe calls only.
  char line[256];
  size_t n = 0;
  auto put = [&](const char* t) {
    while (*t && n < sizeof(line) - 1) line[n++] = *t++;
  };
  char digits[12];
  int d = 0;
  for (unsigned r = static_cast<unsigned>(uipc::error_rank()); d == 0 || r > 0; r /= 10) digits[d++] = '0' + r % 10;
  put("ulysses-ipc: rank ");
  while (d > 0 && n < sizeof(line) - 1) line[n++] = digits[--d];
  put(" interrupted (while ");
  put(uipc::current_activity());
  put("); no report written (");
  put(sig == SIGINT ? "SIGINT" : "SIGTERM");
  put(")\n");
  ssize_t ignored = write(STDERR_FILENO, line, n);
  (void)ignored;
  // 128 + the signal, as a shell reports a process the signal ended: mpirun and srun
  // pass it on when a rank is signalled (README.md, "Exit codes").
  _exit(uipc::kExitSignalBase + sig);
}

// The run's command line: every option once, with its default, check and help. Add an
// option here (one statement) and its field to RunOptions; nothing else parses argv.
void declare_run_options(CLI::App& app, uipc::RunOptions& o) {
  using uipc::cli::integer_in;
  using uipc::cli::number_in;
  using uipc::cli::one_of;
  app.add_option("DECK.h5", o.deck_path, "the input deck (docs/deck.md; inputs/ holds the shipped ones)")
      ->type_name("")
      ->required();
  app.add_option("-o,--output", o.report_path, "report to write (atomically, by rank 0)")
      ->type_name("REPORT.h5")
      ->required();
  app.add_option("--mode", o.backend.mode,
                 "auto: gpu when every rank sees a usable CUDA device, else sim (every rank a simulated GPU); "
                 "model: full-size shapes, no data, no arithmetic, the protocol for real, figures modelled "
                 "(exit 6: parity not computed)")
      ->type_name(uipc::join(uipc::mode_choices(), "|"))
      ->check(one_of(uipc::mode_choices()))
      ->capture_default_str();
  app.add_option("--machine", o.machine,
                 "machine each run's traced layer is modelled on: a JSON file or a shipped name (h200-nvlink, "
                 "h100-sxm, h200-2node, h200-4node; docs/model.md) [default: h200-nvlink]")
      ->type_name("FILE|NAME");
  app.add_option("--case", o.cases, "run only this case (repeatable) [default: every case that fits]")
      ->type_name("NAME")
      ->allow_extra_args(false);
  app.add_option("--gather", o.gather,
                 "output gather transport; auto: nccl, or ipc where NCCL cannot run (ranks sharing a GPU); ipc "
                 "rides on the scatter's ipc, vmm or hier transport (hier: its hierarchical gather)")
      ->type_name("auto|nccl|ipc")
      ->check(one_of({"auto", "nccl", "ipc"}))
      ->capture_default_str();
  app.add_option("--watchdog", o.watchdog_s, "bound on every wait for a peer [default: the case's watchdog_s]")
      ->type_name("SECONDS")
      ->check(number_in(0, 86400));
  app.add_option("--sim-time-limit", o.sim_time_limit_s,
                 "simulation mode: refuse a case whose estimated CPU time is longer (the estimate measures the "
                 "host kernels at startup)")
      ->type_name("SECONDS")
      ->check(number_in(1, 1e7))
      ->capture_default_str();
  app.add_option("--cache-entries", o.cache_capacity, "IPC target cache entries")
      ->type_name("N")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "treat the world as nodes of N consecutive ranks (IPC only inside one; testing several nodes on "
                 "one machine) [default: the MPI shared-memory split]")
      ->type_name("N")
      ->check(integer_in(1, 4096));
  app.add_option("--hier-chunks", o.hier_chunks, "token chunks per batch of the hier transport's pipeline")
      ->type_name("N")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  uipc::cli::add_on_off(app, "--graphs", o.graphs,
                        "capture each run's layer once as a graph (CUDA graphs; the op list in simulation mode) and "
                        "replay it every layer, where the transports allow; off: every layer op by op (the ablation "
                        "no-graphs shows both in one report)");
  uipc::cli::add_on_off(app, "--stage-timing", o.stage_timing,
                        "time each stage of the layer with an event at its end; off: the layer alone (its stages are "
                        "NaN in the report): in a captured graph each event is a node of ~2 us, half a near-empty "
                        "layer");
  std::vector<std::string> ablations = {"none"};
  for (const auto& a : uipc::known_ablations()) ablations.push_back(a);
  app.add_option("--ablations", o.ablations,
                 "ablation runs beside the full design, for every case (" + uipc::join(uipc::known_ablations()) +
                     "; 'none' for none) [default: each case's]")
      ->type_name("A,B")
      ->delimiter(',')
      ->each([&o](const std::string&) { o.ablations_set = true; })
      ->check(one_of(ablations));
  app.add_flag("--allow-shared-gpu", o.backend.allow_shared_gpu, "let several ranks share a GPU (functional testing)");
  app.add_flag("--dump", o.dump, "store inputs, weights and the reference output of each case (x up to 16M elements)");
  app.add_flag("--quiet", o.quiet, "print errors only");
}

const char* const kRunFooter =
    "Decks: ulysses-ipc deck new|from-config|from-report|show|presets|help (serial, no mpirun; ulysses-ipc deck --help).\n"
    "Machine model: ulysses-ipc model calibrate|validate|loo (serial; ulysses-ipc model --help).\n"
    "Exit codes: 0 ok, 2 bad input, 3 runtime failure, 4 a peer did not arrive within the watchdog,\n"
    "5 parity failed, 6 modelled only (--mode model: parity not computed), 130/143 interrupted by\n"
    "SIGINT/SIGTERM; through mpirun, 1 means mpirun itself gave up (it was signalled, or could not\n"
    "launch): README.md, 'Exit codes'.";

// Returns false when the program should exit 0 at once (help, version). Every rank
// parses the same words alike; only rank 0 prints.
bool parse_args(int argc, char** argv, uipc::RunOptions& o, int rank) {
  for (int i = 1; i < argc; ++i) o.command_line += (i > 1 ? " " : "") + std::string(argv[i]);
  o.command_line = "ulysses-ipc " + o.command_line;
  CLI::App app{"mpirun -np N ulysses-ipc DECK.h5 -o REPORT.h5 [OPTIONS]\n\n"
               "Runs every case of DECK.h5 that fits N ranks: full DiT attention layers over each transport x\n"
               "schedule of the case, parity against dense single-rank execution, and timings, parity and\n"
               "provenance into REPORT.h5.",
               "ulysses-ipc"};
  app.set_version_flag("--version", std::string("ulysses-ipc ") + ULYSSES_VERSION + " (" + ULYSSES_GIT_REV + ")");
  app.footer(kRunFooter);
  declare_run_options(app, o);
  const std::string text = uipc::cli::parse(app, std::vector<std::string>(argv + 1, argv + argc));
  if (text.empty()) return true;
  if (rank == 0) std::fputs(text.c_str(), stdout);
  return false;
}

// Under Slurm, an srun whose MPI plugin the MPI library cannot talk to (no --mpi=pmix)
// can start every task as rank 0 of a world of 1: N copies of a 1-rank run. Only that is
// an error: under mpirun inside a job, the ranks see the step of mpirun's daemons (one
// task per node), which says nothing about the MPI world.
void check_slurm_world(int world) {
  const char* tasks_env = std::getenv("SLURM_STEP_NUM_TASKS");
  if (!tasks_env) tasks_env = std::getenv("SLURM_NTASKS");
  if (!tasks_env || !std::getenv("SLURM_STEP_ID")) return;  // not inside a job step
  const int tasks = std::atoi(tasks_env);
  if (world == 1 && tasks > 1)
    throw uipc::InputError("this Slurm step has " + std::to_string(tasks) +
                           " tasks but MPI sees a world of 1 rank: each task started alone. Launch with "
                           "srun --mpi=pmix, or mpirun inside the job (see jobscripts/README.md)");
}

// Said by our own code before MPI_Abort: mpirun relays the code in its MPI_ABORT banner,
// but that relay can be lost (Open MPI 4.1 fails to unpack it when several ranks abort
// at once) and with orte_enable_recovery mpirun itself returns 0.
void say_abort(int rank, int code) {
  std::fprintf(stderr, "ulysses-ipc: rank %d ends the job with exit code %d (%s)\n", rank, code,
               uipc::exit_code_meaning(code));
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  // `deck` and `model` subcommands are serial tools: no MPI, no Kokkos.
  for (const auto& [name, command] : {std::pair<const char*, int (*)(int, char**)>{"deck", uipc::deck_command},
                                      std::pair<const char*, int (*)(int, char**)>{"model", uipc::model_command}}) {
    if (argc < 2 || std::strcmp(argv[1], name) != 0) continue;
    try {
      return command(argc - 2, argv + 2);
    } catch (const uipc::Error& e) {
      std::fprintf(stderr, "ulysses-ipc %s: error: %s\n", name, uipc::printable(e.what()).c_str());
      return e.exit_code();
    }
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  uipc::set_error_rank(rank);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::atexit([] { uipc::host_unlink_all_shm(); });

  int code = uipc::kExitOk;
  bool run = true;
  uipc::RunOptions opt;
  try {
    uipc::collective_phase(MPI_COMM_WORLD, [&] {
      run = parse_args(argc, argv, opt, rank);
      check_slurm_world(world);
    });
    if (run) {
      Kokkos::initialize(argc, argv);
      opt.kokkos_version = std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
                           "." + std::to_string(KOKKOS_VERSION % 100);
      try {
        code = uipc::run_deck(opt);
      } catch (...) {
        Kokkos::finalize();
        throw;
      }
      Kokkos::finalize();
    }
  } catch (const uipc::CollectiveError& e) {
    // Every rank has it: say it once and finish cleanly.
    if (rank == 0) std::fprintf(stderr, "ulysses-ipc: error: %s\n", uipc::printable(e.what()).c_str());
    g_exit_code = e.exit_code();
    g_finishing = 1;
    MPI_Finalize();
    return e.exit_code();
  } catch (const uipc::Error& e) {
    // This rank alone may have it: say it with the rank, and take the others down.
    std::fprintf(stderr, "ulysses-ipc: error on rank %d: %s\n", rank, uipc::printable(e.what()).c_str());
    std::fflush(stderr);
    uipc::host_unlink_all_shm();
    // A peer timeout: the peers it names are often stuck on a wait whose own watchdog
    // fires moments later and says what they wait for. Let them speak before the abort.
    if (e.exit_code() == uipc::kExitPeerTimeout) std::this_thread::sleep_for(std::chrono::seconds(2));
    say_abort(rank, e.exit_code());
    MPI_Abort(MPI_COMM_WORLD, e.exit_code());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ulysses-ipc: internal error on rank %d: %s\n", rank, uipc::printable(e.what()).c_str());
    std::fflush(stderr);
    uipc::host_unlink_all_shm();
    say_abort(rank, uipc::kExitRuntime);
    MPI_Abort(MPI_COMM_WORLD, uipc::kExitRuntime);
    return uipc::kExitRuntime;
  }
  g_exit_code = code;
  g_finishing = 1;
  MPI_Finalize();
  return code;
}
