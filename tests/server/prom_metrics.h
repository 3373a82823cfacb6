// Test helper: a Prometheus text exposition (GET /metrics) as a map from
// "name{labels}" (model_name dropped; no braces when no other label) to value.
#pragma once
#include <map>
#include <regex>
#include <sstream>
#include <string>

namespace blockspec::testing {

inline std::map<std::string, double> parse_metrics(const std::string& body) {
  std::map<std::string, double> m;
  static const std::regex line(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  std::istringstream is(body);
  for (std::string l; std::getline(is, l);) {
    std::smatch sm;
    if (l.empty() || l[0] == '#' || !std::regex_match(l, sm, line)) continue;
    std::string labels = std::regex_replace(sm[2].str(), std::regex(R"(model_name="[^"]*",?)"), "");
    if (labels == "{}") labels.clear();
    m[sm[1].str() + labels] = std::stod(sm[3].str());
  }
  return m;
}

}  // namespace blockspec::testing
