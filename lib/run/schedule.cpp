// A schedule's steps for a case's projection, from the one table (lib/deck/schedules.hpp).
#include "lib/run/schedule.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "lib/deck/deck.hpp"

namespace uipc {

Schedule make_schedule(const std::string& name, bool fused_qkv) {
  const ScheduleKind* k = find_schedule_kind(name);
  if (!k) throw InputError("unknown schedule '" + name + "' (allowed: " + join(known_schedules()) + ")");
  const bool fused = k->separate.empty() || (fused_qkv && !k->fused.empty());
  return {name, fused, fused ? k->fused : k->separate};
}

}  // namespace uipc
