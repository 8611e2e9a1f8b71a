// Small text helpers shared by every room (one definition each).
#pragma once

#include <string>
#include <vector>

namespace uipc {

// "a, b, c" (or the words joined by `sep`).
inline std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace uipc
