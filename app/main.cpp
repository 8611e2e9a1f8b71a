// ulysses-ipc: the command line. Runs a deck (`ulysses-ipc DECK.h5 -o REPORT.h5`) or
// works on decks (`ulysses-ipc deck new|show|presets`). MPI and Kokkos up, errors
// caught here and turned into one clear message and an exit code (README, "Exit codes").
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
#include "git_rev.h"
#include "comm/host_device.hpp"
#include "lib/deck_cli.hpp"
#include "lib/report.hpp"
#include "lib/run.hpp"

namespace {

const char* const kUsage =
    "usage: mpirun -np N ulysses-ipc DECK.h5 -o REPORT.h5 [options]\n"
    "       ulysses-ipc deck new|show|presets ...   (ulysses-ipc deck --help)\n"
    "\n"
    "Runs every case of DECK.h5 that fits N ranks: full DiT attention layers over each\n"
    "transport x schedule of the case, parity against dense single-rank execution, and\n"
    "timings, parity and provenance into REPORT.h5 (written by rank 0, atomically).\n"
    "\n"
    "options (default in brackets):\n"
    "  -o, --output FILE     report to write [required]\n"
    "  --mode MODE           auto | sim | gpu [auto: gpu when every rank sees a usable\n"
    "                        CUDA device, else sim (every rank a simulated GPU on the CPU)]\n"
    "  --case NAME           run only this case (repeatable) [every case that fits N]\n"
    "  --gather T            transport of the output gather: auto | nccl | ipc\n"
    "                        [auto: nccl; ipc where NCCL cannot run (ranks sharing a GPU)];\n"
    "                        ipc rides on the scatter's transport when that is ipc or vmm\n"
    "  --watchdog SECONDS    bound on every wait for a peer [the case's watchdog_s]\n"
    "  --cache-entries N     IPC target cache size [12]\n"
    "  --allow-shared-gpu    let several ranks share a GPU (functional testing) [off]\n"
    "  --dump                store inputs, weights and the reference output of each case\n"
    "                        in the report (cases up to 16M elements of x) [off]\n"
    "  --quiet               print errors only [off]\n"
    "  --version             print the version and exit\n"
    "  -h, --help            this text\n"
    "\n"
    "exit codes: 0 ok, 1 parity failed, 2 bad input, 3 runtime failure,\n"
    "            4 a peer did not arrive within the watchdog, 130 interrupted\n";

// Set to the exit code once the program is finishing on its own: a SIGTERM that mpirun
// sends then (because another rank already exited non-zero) must not be reported as an
// interruption.
volatile std::sig_atomic_t g_finishing = 0;
volatile std::sig_atomic_t g_exit_code = 0;

extern "C" void on_signal(int /*sig*/) {
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
  put("); no report written\n");
  ssize_t ignored = write(STDERR_FILENO, line, n);
  (void)ignored;
  _exit(uipc::kExitInterrupted);
}

void need_value(int i, int argc, const char* opt) {
  if (i + 1 >= argc) throw uipc::InputError(std::string(opt) + ": needs a value (see --help)");
}

double parse_number(const std::string& v, const char* opt) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw uipc::InputError(std::string(opt) + ": not a number: '" + v + "'");
  return d;
}

// Returns false when the program should exit 0 at once (help, version).
bool parse_args(int argc, char** argv, uipc::RunOptions& o, int rank) {
  for (int i = 1; i < argc; ++i) o.command_line += (i > 1 ? " " : "") + std::string(argv[i]);
  o.command_line = "ulysses-ipc " + o.command_line;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      if (rank == 0) std::fputs(kUsage, stdout);
      return false;
    } else if (a == "--version") {
      if (rank == 0) std::printf("ulysses-ipc %s (%s)\n", ULYSSES_VERSION, ULYSSES_GIT_REV);
      return false;
    } else if (a == "-o" || a == "--output") {
      need_value(i, argc, argv[i]);
      o.report_path = argv[++i];
    } else if (a == "--mode") {
      need_value(i, argc, argv[i]);
      o.backend.mode = argv[++i];
    } else if (a == "--case") {
      need_value(i, argc, argv[i]);
      o.cases.push_back(argv[++i]);
    } else if (a == "--gather") {
      need_value(i, argc, argv[i]);
      o.gather = argv[++i];
      if (o.gather != "auto" && o.gather != "nccl" && o.gather != "ipc")
        throw uipc::InputError("--gather: unknown transport '" + o.gather + "' (allowed: auto, nccl, ipc)");
    } else if (a == "--watchdog") {
      need_value(i, argc, argv[i]);
      o.watchdog_s = parse_number(argv[++i], "--watchdog");
      if (!(o.watchdog_s > 0 && o.watchdog_s <= 86400)) throw uipc::InputError("--watchdog: must be in (0, 86400] seconds");
    } else if (a == "--cache-entries") {
      need_value(i, argc, argv[i]);
      double n = parse_number(argv[++i], "--cache-entries");
      if (!(n >= 1 && n <= 1024 && n == static_cast<int>(n))) throw uipc::InputError("--cache-entries: must be an integer in 1..1024");
      o.cache_capacity = static_cast<int>(n);
    } else if (a == "--allow-shared-gpu") {
      o.backend.allow_shared_gpu = true;
    } else if (a == "--dump") {
      o.dump = true;
    } else if (a == "--quiet") {
      o.quiet = true;
    } else if (!a.empty() && a[0] == '-') {
      throw uipc::InputError("unknown option '" + a + "' (see --help)");
    } else if (o.deck_path.empty()) {
      o.deck_path = a;
    } else {
      throw uipc::InputError("unexpected argument '" + a + "': one deck per run (see --help)");
    }
  }
  if (o.deck_path.empty()) throw uipc::InputError("no deck given (usage: ulysses-ipc DECK.h5 -o REPORT.h5; see --help)");
  if (o.report_path.empty()) throw uipc::InputError("no report path given: -o REPORT.h5 (see --help)");
  return true;
}

// Under Slurm, a plain srun without PMIx can start every task as rank 0 of 1.
void check_slurm_world(int world) {
  const char* n = std::getenv("SLURM_NTASKS");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (!n || !step) return;  // not inside a job step
  int tasks = std::atoi(n);
  if (tasks > 0 && tasks != world)
    throw uipc::InputError("SLURM_NTASKS is " + std::to_string(tasks) + " but MPI sees " + std::to_string(world) +
                           " rank(s): start with mpirun, or srun --mpi=pmix (see jobscripts/README.md)");
}

}  // namespace

int main(int argc, char** argv) {
  // `deck` subcommands are serial tools: no MPI, no Kokkos.
  if (argc >= 2 && std::strcmp(argv[1], "deck") == 0) {
    try {
      return uipc::deck_command(argc - 2, argv + 2);
    } catch (const uipc::Error& e) {
      std::fprintf(stderr, "ulysses-ipc deck: error: %s\n", uipc::printable(e.what()).c_str());
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
    MPI_Abort(MPI_COMM_WORLD, e.exit_code());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ulysses-ipc: internal error on rank %d: %s\n", rank, uipc::printable(e.what()).c_str());
    std::fflush(stderr);
    uipc::host_unlink_all_shm();
    MPI_Abort(MPI_COMM_WORLD, uipc::kExitRuntime);
    return uipc::kExitRuntime;
  }
  g_exit_code = code;
  g_finishing = 1;
  MPI_Finalize();
  return code;
}
