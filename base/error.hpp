// The project's one error header: error types, exit codes, and checked calls that
// throw with the expression, file:line, host and rank. No check compiles out.
#pragma once

#include <mpi.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace uipc {

// Exit codes of the ulysses-ipc program (documented in README.md, "Exit codes", with
// what mpirun and srun return for each). None is 1: that is what mpirun returns when it
// gives up itself (a signal to mpirun, a failed launch), whatever the ranks said.
enum ExitCode : int {
  kExitOk = 0,
  kExitBadInput = 2,      // bad command line, deck, or layout for this world
  kExitRuntime = 3,       // device, transport, MPI or HDF5 failure
  kExitPeerTimeout = 4,   // the watchdog fired: a peer did not arrive in time
  kExitParityFailed = 5,  // the run completed, some case failed parity
  kExitModelOnly = 6,     // --mode model completed: modelled figures only, parity not computed
  kExitSignalBase = 128,  // + the signal: 130 SIGINT, 143 SIGTERM (the shells' convention)
};

// What an exit code means, in the words of the enum's comments ("a peer timed out").
// Printed by a rank that takes the job down, because mpirun's own relay of the code
// (its MPI_ABORT banner) can be lost when several ranks abort at once.
const char* exit_code_meaning(int code);

// Base of every error the project throws on purpose; carries the exit code.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int exit_code) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Something the user gave us is wrong (deck, options, layout): fix the input.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what, kExitBadInput) {}
};

// A system or library call failed at run time.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& what) : Error(what, kExitRuntime) {}
};

// A bounded wait expired: a peer never arrived.
class PeerTimeout : public Error {
 public:
  explicit PeerTimeout(const std::string& what) : Error(what, kExitPeerTimeout) {}
};

// An error that every rank of the run raised identically (agreed collectively): the
// program can report it once and finalise MPI cleanly instead of aborting.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, int exit_code) : Error(what, exit_code) {}
};

// Runs fn on every rank; if it throws uipc::Error on any rank, every rank throws the
// same CollectiveError (the message of the lowest failing rank). Collective over comm.
// Used for the phases that every rank runs alike (options, deck, plan).
void collective_phase(MPI_Comm comm, const std::function<void()>& fn);

// Error text may quote a deck's own bytes (names, string values): control characters
// and invalid UTF-8 become \xNN, so every message is one line of valid UTF-8 and a deck
// cannot send terminal escape sequences. Idempotent.
std::string printable(const std::string& s);

// Tells error messages which rank they come from (set once after MPI_Init).
void set_error_rank(int rank);
int error_rank();
// What this rank is doing, as a static string ("in the TP all-reduce"): kept so that a
// rank taken down from outside (another rank's MPI_Abort, a signal) can say where it
// was, which tells a rank stuck in a call that no watchdog bounds from one that was
// merely waiting. Async-signal-safe to read; pass string literals only.
void set_activity(const char* literal);
const char* current_activity();
// "file:line [host rank R]"
std::string error_where(const char* file, int line);

[[noreturn]] void throw_runtime(const std::string& what, const char* file, int line);

}  // namespace uipc

#define UIPC_STR2(x) #x
#define UIPC_STR(x) UIPC_STR2(x)

// Throws RuntimeError when cond is false; msg is streamed into the message.
#define UIPC_CHECK(cond, msg)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::string uipc_msg_ = std::string("check failed: ") + #cond + ": " + (msg);   \
      ::uipc::throw_runtime(uipc_msg_, __FILE__, __LINE__);                            \
    }                                                                                  \
  } while (0)

// Throws InputError with msg when cond is false.
#define UIPC_REQUIRE_INPUT(cond, msg)                                                  \
  do {                                                                                 \
    if (!(cond)) throw ::uipc::InputError(msg);                                        \
  } while (0)

// MPI calls: any return other than MPI_SUCCESS throws with the MPI error string.
#define UIPC_MPI_CHECK(expr)                                                           \
  do {                                                                                 \
    int uipc_rc_ = (expr);                                                             \
    if (uipc_rc_ != 0) ::uipc::throw_mpi_error(uipc_rc_, #expr, __FILE__, __LINE__);  \
  } while (0)

namespace uipc {
[[noreturn]] void throw_mpi_error(int rc, const char* expr, const char* file, int line);
}
