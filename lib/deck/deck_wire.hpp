// The deck on the wire: only rank 0 parses the HDF5 deck (a file from a colleague is
// hostile input, and one parser means one place to harden and one clear error), and
// it does so in a child process with a time limit (libhdf5 itself can crash or loop on
// a crafted file); the other ranks receive the validated Deck as plain values in a
// small versioned binary encoding. Also the per-rank memory estimate of a case,
// checked before anything is allocated.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc {

// Version of the encoding below; deserialize_deck refuses any other.
constexpr uint32_t kDeckWireVersion = 3;

// Every field of the Deck and of each Case, little-endian, strings and lists
// length-prefixed. Deterministic: equal decks give equal bytes.
std::vector<unsigned char> serialize_deck(const Deck& deck);

// The inverse. Checks every length against what is left before reading or
// allocating, every enum and bool for a known value, and that nothing is left over;
// throws uipc::RuntimeError on truncated, oversized or corrupt input (bytes that
// serialize_deck did not write are a bug or a transport fault, not bad user input).
Deck deserialize_deck(const unsigned char* data, size_t size);

// How long the other ranks wait for rank 0 to read the deck before giving up with a
// PeerTimeout naming rank 0 (a deck on a hung network file system must not hang the run).
constexpr double kDeckReadTimeoutS = 600.0;
// How long the deck parser may run (a valid deck takes milliseconds): this, or
// ULYSSES_DECK_PARSE_TIMEOUT (seconds, > 0) from the environment.
constexpr double kDeckParseTimeoutS = 120.0;
double deck_parse_timeout_s();

// read_deck in a child process: libhdf5 1.10 itself crashes, leaks, or loops forever
// on some crafted files (tests/fuzz's raw mode finds such files in minutes, all inside
// libhdf5); in a child, each of those becomes a clean InputError naming the file
// ("crashed the HDF5 library (signal 11 ...)", "did not finish within N s") instead of
// a dead or hung process. The child only parses (no MPI), under an address-space
// limit, and sends the Deck back in the encoding below. Throws what read_deck throws
// (InputError for a bad deck), RuntimeError when no child can be started. With
// ULYSSES_DECK_IN_PROCESS=1 in the environment it calls read_deck directly (for a site
// whose MPI forbids fork()).
Deck read_deck_isolated(const std::string& path, double timeout_s = deck_parse_timeout_s());

// Collective over comm. Rank 0 reads and validates the deck (read_deck_isolated, for at
// most min(deck_parse_timeout_s(), timeout_s / 2)); every rank
// then returns the same Deck (each deserializes the same bytes, rank 0 included), or
// throws the same uipc::CollectiveError carrying rank 0's message and exit code (an
// InputError's 2 for a bad deck). A rank that waits longer than timeout_s for rank 0
// throws PeerTimeout instead.
Deck read_deck_on_root(const std::string& path, MPI_Comm comm, double timeout_s = kDeckReadTimeoutS);

}  // namespace uipc
