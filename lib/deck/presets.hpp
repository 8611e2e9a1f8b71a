// The presets: named decks (the shipped default, the protocol deck, one per model
// layer and resolution, and their simulation-sized twins) that `ulysses-ipc deck new
// --preset` writes and inputs/make_decks.sh turns into the shipped decks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lib/deck/deck.hpp"

namespace uipc {

struct Preset {
  std::string name;
  std::string description;  // becomes the deck's description
  std::function<std::vector<Case>()> cases;
};

// Every preset, in table order; one by name (nullptr for none).
const std::vector<Preset>& presets();
const Preset* find_preset(const std::string& name);

// The presets' names, in table order, and one preset's deck (InputError if unknown).
std::vector<std::string> deck_preset_names();
Deck deck_preset(const std::string& name);

}  // namespace uipc
