// Minimal flag parser for subcommands: `--flag value`, `--flag=value`,
// short aliases (`-m`), boolean switches and positionals. Unknown flags,
// missing values and malformed numbers are one-line errors naming the flag.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace blockspec {

struct FlagSpec {
  std::string name;   // "--temp"
  std::string alias;  // "-t" or ""
  bool takes_value;
  std::string help;
  std::string group = "";  // --help heading (vLLM's config groups for serve); "" = none
};

class Args {
 public:
  // argv excludes the program and subcommand names. Throws Error.
  Args(const std::string& command, const std::vector<FlagSpec>& specs, const std::vector<std::string>& argv);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& def = "") const;
  std::string required(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t def) const;
  double number(const std::string& name, double def) const;
  uint64_t u64(const std::string& name, uint64_t def) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

  static std::string usage(const std::string& command, const std::string& synopsis,
                           const std::vector<FlagSpec>& specs);

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

}  // namespace blockspec
