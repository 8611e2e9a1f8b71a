// `ulysses-ipc model ...`: the machine model's own tools, serial (no MPI): replay the
// traced layers stored in --mode model reports under a machine, fit a machine's free
// parameters to measured GPU reports, and check it on reports it was not fitted to.
#pragma once

namespace uipc {

// argv holds the words after "model". Returns the exit code; throws uipc::Error.
int model_command(int argc, char** argv);

}  // namespace uipc
