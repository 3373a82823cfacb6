// blockspec: one binary, subcommands like git.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"

namespace {

const char* kUsage =
    "blockspec: LLM serving with speculative decoding by block-diffusion drafters\n"
    "\n"
    "usage: blockspec COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  generate   one prompt in, text out; prints tok/s\n"
    "  inspect    list tensors, dtypes, shapes and the config of a checkpoint\n"
    "  bench      offline throughput, latency and bandwidth roofline; JSON out\n"
    "  eval       perplexity, KL divergence and top-1 agreement against a reference model\n"
    "  serve      OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)\n"
    "  check      pre-flight check of a DFlash / DFlash2 drafter checkpoint (and its target)\n"
    "  quantize   RTN / GPTQ to compressed-tensors or GPTQ checkpoints (targets and drafters)\n"
    "  train-drafter  train a DFlash drafter on the target's own outputs (data generation + C++ trainer)\n"
    "  ptqr       quantization-aware retraining (W8A8 G128) whose student runs the serving kernels\n"
    "\n"
    "Run `blockspec COMMAND --help` for the flags of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  try {
    if (cmd == "generate") return blockspec::cmd_generate(rest);
    if (cmd == "inspect") return blockspec::cmd_inspect(rest);
    if (cmd == "bench") return blockspec::cmd_bench(rest);
    if (cmd == "eval") return blockspec::cmd_eval(rest);
    if (cmd == "check") return blockspec::cmd_check(rest);
    if (cmd == "quantize") return blockspec::cmd_quantize(rest);
    if (cmd == "serve") return blockspec::cmd_serve(rest);
    if (cmd == "train-drafter") return blockspec::cmd_train_drafter(rest);
    if (cmd == "ptqr") return blockspec::cmd_ptqr(rest);
    std::fprintf(stderr, "blockspec: unknown command \"%s\" (run `blockspec --help`)\n", cmd.c_str());
    return 2;
  } catch (const blockspec::Error& e) {
    std::fprintf(stderr, "blockspec %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "blockspec %s: error: out of memory\n", cmd.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blockspec %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
