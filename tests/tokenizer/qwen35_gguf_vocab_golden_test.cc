// llama.cpp's own test vectors for its `qwen35` pre-tokenizer
// (llama.cpp's models/ggml-vocab-qwen35.gguf{,.inp,.out}, MIT, copied into
// tests/fixtures/tokenizer_gguf/): 50 inputs, the ids llama-tokenize gives with that
// GGUF's vocabulary (the Qwen2 BPE under the Qwen3.5 split regex, no BOS).
// GGUF vocabularies follow llama.cpp, which does not NFC-normalise: inputs
// 46-48 (e + U+0301) keep their combining marks, as its vectors expect.
#include <gtest/gtest.h>

#include <sstream>

#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "golden_corpus.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {
namespace {

TEST(Qwen35GgufVocab, LlamaCppTestVectors) {
  const std::string dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/tokenizer_gguf/";
  GgufFile f(dir + "ggml-vocab-qwen35.gguf");
  const GgufTokenizerData d = gguf_tokenizer(f);
  ASSERT_EQ(d.pre, "qwen35");
  GgufVocab v;
  v.model = d.model, v.pre = d.pre, v.tokens = d.tokens, v.token_types = d.token_types, v.merges = d.merges;
  const Tokenizer tok = Tokenizer::from_gguf_vocab(v, "ggml-vocab-qwen35.gguf");
  const std::string inp = read_text_file(dir + "ggml-vocab-qwen35.gguf.inp");
  std::vector<std::string> inputs;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t e = inp.find(sep, pos);
    if (e == std::string::npos) break;
    inputs.push_back(inp.substr(pos, e - pos));
    pos = e + sep.size();
  }
  std::istringstream out(read_text_file(dir + "ggml-vocab-qwen35.gguf.out"));
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line) && i < inputs.size(); ++i) {
    std::vector<int32_t> want;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) want.push_back(id);
    EXPECT_EQ(tok.encode(inputs[i]), want) << "input " << i << ": \"" << inputs[i] << "\"";
  }
  EXPECT_EQ(i, 50u);
  EXPECT_EQ(inputs.size(), 50u);
}

}  // namespace
}  // namespace blockspec
