// Constrained decoding (issue 19, structured output): an automaton over
// token ids that says which tokens a request may generate next. The engine
// keeps one state per sequence, masks the target's logits with allowed()
// before sampling and before verifying a draft (so a drafted token the
// grammar forbids is rejected and speculation stays lossless), and moves
// the state with next() for every emitted token.
//
// Called on the engine's step thread only (implementations cache lazily).
#pragma once
#include <cstdint>
#include <vector>

namespace blockspec {

class TokenGrammar {
 public:
  virtual ~TokenGrammar() = default;
  virtual int32_t start_state() = 0;
  // The tokens allowed in `state`: a bitset over the vocabulary,
  // [(vocab + 63) / 64] words, bit t of word t / 64. The eos / stop ids are
  // allowed exactly when the text so far is complete.
  virtual const std::vector<uint64_t>& allowed(int32_t state) = 0;
  // The state after `token`; -1 when the token is not allowed.
  virtual int32_t next(int32_t state, int32_t token) = 0;
};

inline bool token_allowed(const std::vector<uint64_t>& mask, int32_t t) {
  return t >= 0 && static_cast<size_t>(t) / 64 < mask.size() && ((mask[t / 64] >> (t % 64)) & 1);
}

}  // namespace blockspec
