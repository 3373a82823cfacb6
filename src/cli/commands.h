// One function per subcommand; each returns the process exit code and
// throws blockspec::Error for user errors (main prints them on one line).
#pragma once
#include <string>
#include <vector>

namespace blockspec {

int cmd_generate(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_check(const std::vector<std::string>& args);
int cmd_quantize(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_train_drafter(const std::vector<std::string>& args);
int cmd_ptqr(const std::vector<std::string>& args);

}  // namespace blockspec
