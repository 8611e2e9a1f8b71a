// What every transport hands back for a submission: the result's address and the
// completion of its group (an event on the stream that finishes the group), shared by
// the group's results. A consumer waits on it only when it uses a result.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/transport/transport.hpp"

namespace uipc {

struct GroupCompletion {
  std::shared_ptr<Event> done;  // recorded on `finisher` when the group is complete
  Stream* finisher = nullptr;
  bool closed = false;          // the group's barrier has been submitted
  uint64_t epoch = 0;
  std::string tags;             // "V,Q,K": for messages
};

// The groups' completion events, reused: a group takes the first event that no earlier
// group still holds (its results dropped). A layer that drops its results before the
// next (lib/run/pipeline.cpp) thus uses the same events in the same order every layer,
// which is what lets a captured graph stand for it (lib/run/layer_graph.hpp); and no
// event is created per group. They only join streams (GroupExchange::wait): ordering
// events, edges of a captured layer and no nodes (EventUse).
class EventPool {
 public:
  explicit EventPool(Device& dev) : dev_(dev) {}
  std::shared_ptr<Event> take() {
    for (auto& e : events_)
      if (e.use_count() == 1) return e;
    events_.push_back(std::shared_ptr<Event>(dev_.create_event(EventUse::kOrdering)));
    return events_.back();
  }

 private:
  Device& dev_;
  std::vector<std::shared_ptr<Event>> events_;
};

class GroupExchange : public Exchange {
 public:
  GroupExchange(void* data, std::shared_ptr<GroupCompletion> g, Device& dev)
      : data_(data), group_(std::move(g)), dev_(dev) {}
  void* data() const override { return data_; }
  void wait(Stream& consumer) override {
    UIPC_CHECK(group_->closed, "a result was consumed before its group's barrier was submitted");
    if (&consumer != group_->finisher) dev_.stream_wait_event(consumer, *group_->done);  // same stream: in order
  }

 private:
  void* data_;
  std::shared_ptr<GroupCompletion> group_;
  Device& dev_;
};

}  // namespace uipc
