// What the two command lines (app/main.cpp: `ulysses-ipc DECK -o REPORT`, and
// app/deck_cli.cpp: `ulysses-ipc deck ...`) share on top of CLI11: value checks whose
// messages say what is wrong the project's way, and one parse that turns CLI11's
// refusals into InputError (exit 2) and its help and version requests into text.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace uipc::cli {

// One of `allowed`: "unknown value 'x' (allowed: a, b, c)".
CLI::Validator one_of(std::vector<std::string> allowed);
// A finite number in (lo, hi]: "must be in (lo, hi]" (NaN and inf refused).
CLI::Validator number_in(double lo_exclusive, double hi);
// A number that is an integer in [lo, hi]: "must be an integer in lo..hi".
CLI::Validator integer_in(long long lo, long long hi);

// An option NAME on|off that sets `flag` (which must outlive the parse; its value now is
// the default shown). No string of its own is bound, so nothing dangles after declaring.
CLI::Option* add_on_off(CLI::App& app, const std::string& name, bool& flag, const std::string& help);

// Parses `args` (the words after the program name, in order) with `app`. Returns the
// text to print before exiting 0 when help or the version was asked for (the help of
// the (sub)command it was asked of; `help_all` for --help-all), "" to go on. Throws
// InputError for whatever CLI11 refuses, naming the subcommand and where its help is:
// "new: --batch: 'x' is not an integer (see 'ulysses-ipc deck new --help')".
std::string parse(CLI::App& app, const std::vector<std::string>& args);

// The help of `app` and every subcommand below it, with their options.
std::string help_all(const CLI::App& app);

// The same message for an error found after parsing, about the subcommand `sub` of
// `app` ("" = app itself).
std::string usage_message(const CLI::App& app, const std::string& sub, const std::string& what);

}  // namespace uipc::cli
