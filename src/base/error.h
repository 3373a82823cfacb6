// Errors with context. Every failure the user can cause (bad file, bad flag,
// bad request) is thrown as blockspec::Error with one line that names the
// file/tensor/field, the expected and the found value; the CLI prints it and
// exits non-zero. Programming errors use BS_ASSERT (also an Error, so a bug
// never turns into a crash without a message).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace blockspec {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// str_cat("a", 1, 'b') -> "a1b"
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

// JSON-style quoting for error messages: "name" with \" \\ and \xNN
// escapes, cut after max_len bytes with "...(N bytes)", so a hostile name
// in a file can never break a message over lines or make it huge.
std::string quote_for_message(std::string_view s, size_t max_len = 120);

}  // namespace blockspec

#define BS_ASSERT(cond, ...)                                                       \
  do {                                                                             \
    if (!(cond))                                                                   \
      ::blockspec::fail("internal error at ", __FILE__, ":", __LINE__, ": ", #cond, \
                        " ", ##__VA_ARGS__);                                       \
  } while (0)
