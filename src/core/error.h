#pragma once
// One exception type for every user-facing failure (bad file, bad flag, bad
// request); messages name the problem so the CLI can print them as they are.
#include <sstream>
#include <stdexcept>
#include <string>

namespace parspec {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

template <class... Parts>
inline void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace parspec
