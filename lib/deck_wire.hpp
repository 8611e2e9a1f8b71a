// The deck on the wire: only rank 0 parses the HDF5 deck (a file from a colleague is
// hostile input, and one parser means one place to harden and one clear error); the
// other ranks receive the validated Deck as plain values in a small versioned binary
// encoding. Also the per-rank memory estimate of a case, checked before allocating.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "lib/deck.hpp"

namespace uipc {

// Version of the encoding below; deserialize_deck refuses any other.
constexpr uint32_t kDeckWireVersion = 1;

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

// Collective over comm. Rank 0 reads and validates the deck (read_deck); every rank
// then returns the same Deck (each deserializes the same bytes, rank 0 included), or
// throws the same uipc::CollectiveError carrying rank 0's message and exit code (an
// InputError's 2 for a bad deck). A rank that waits longer than timeout_s for rank 0
// throws PeerTimeout instead.
Deck read_deck_on_root(const std::string& path, MPI_Comm comm, double timeout_s = kDeckReadTimeoutS);

// Peak bytes one rank holds while running case c on `world` ranks: device buffers and
// host vectors together (in simulation mode both are the same RAM). rank0 adds the
// dense reference that rank 0 computes and scatters. sim_mode adds the host device's
// kernel and MPI-collective temporaries (simulation mode only; on GPUs those buffers
// do not exist and the estimate is then of device buffers plus host-side vectors).
// Saturates at SIZE_MAX instead of overflowing. The case should fit `world`
// (validate_case_for_world); ulysses is resolved as the run resolves it.
size_t estimate_case_bytes_per_rank(const Case& c, int world, bool rank0, bool sim_mode = true);

}  // namespace uipc
