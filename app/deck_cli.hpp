// `ulysses-ipc deck ...`: write a deck from options or a named preset, print one
// readably, list the presets (the one table every shipped deck is generated from).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"
#include "lib/deck/presets.hpp"

namespace uipc {

// argv starts after "deck" (argv[0] is the subcommand: new, from-config, show, presets, help).
// Returns 0 on success (help and --help print and return 0 too); throws InputError on
// bad usage or a bad deck (message names the option or field), RuntimeError when the
// deck cannot be written.
int deck_command(int argc, char** argv);
// The same, printing to `out` (tests).
int deck_command(int argc, char** argv, std::ostream& out);


}  // namespace uipc
