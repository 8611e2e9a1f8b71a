// Waiting for something another thread, process or device will do, without a hang and
// without burning a core: poll done() until it returns true or `seconds` pass (false on
// timeout). It yields for the first polls (and, with spin_s, for at least that long:
// where the caller must notice completion at once), then sleeps with a growing interval
// (10 us doubling to 1 ms), so that several ranks sharing few cores leave them to the
// work they wait for.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace uipc {

template <typename Done>
bool poll_until(Done done, double seconds, double spin_s = 0) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const auto spin_until = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spin_s));
  auto nap = std::chrono::microseconds(10);
  for (int i = 0;; ++i) {
    if (done()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (i < 64 || now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace uipc
