#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace blockspec {

Args::Args(const std::string& command, const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv)
    : command_(command) {
  for (const FlagSpec& f : specs)  // a table mistake (e.g. a default in the alias slot) shows at once
    BS_ASSERT(f.name.rfind("--", 0) == 0 && (f.alias.empty() || f.alias[0] == '-'));
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") {
      positionals_.push_back(a);
      continue;
    }
    std::optional<std::string> inline_value;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs)
      if (a == s.name || (!s.alias.empty() && a == s.alias)) spec = &s;
    if (spec == nullptr) fail(command_, ": unknown flag ", a, " (see `blockspec ", command_, " --help`)");
    if (!spec->takes_value) {
      if (inline_value) fail(command_, ": flag ", spec->name, " takes no value");
      values_[spec->name] = "1";
      continue;
    }
    if (inline_value) {
      values_[spec->name] = *inline_value;
    } else {
      if (i + 1 >= argv.size()) fail(command_, ": flag ", spec->name, " needs a value");
      values_[spec->name] = argv[++i];
    }
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) fail(command_, ": missing required flag ", name);
  return it->second;
}

int64_t Args::integer(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const char* s = it->second.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    fail(command_, ": flag ", name, " expects an integer, found \"", it->second, "\"");
  return v;
}

uint64_t Args::u64(const std::string& name, uint64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const char* s = it->second.c_str();
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || it->second[0] == '-')
    fail(command_, ": flag ", name, " expects a non-negative integer, found \"", it->second, "\"");
  return v;
}

double Args::number(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const char* s = it->second.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !std::isfinite(v))
    fail(command_, ": flag ", name, " expects a number, found \"", it->second, "\"");
  return v;
}

std::string Args::usage(const std::string& command, const std::string& synopsis,
                        const std::vector<FlagSpec>& specs) {
  std::string u = "usage: blockspec " + command + " " + synopsis + "\n";
  std::string group;
  for (const auto& s : specs) {
    if (s.group != group) {
      group = s.group;
      u += "\n" + group + ":\n";
    }
    std::string lhs = "  " + (s.alias.empty() ? "" : s.alias + ", ") + s.name + (s.takes_value ? " VALUE" : "");
    if (lhs.size() < 28) lhs.resize(28, ' ');
    u += lhs + " " + s.help + "\n";
  }
  return u;
}

}  // namespace blockspec
