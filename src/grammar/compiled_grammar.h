// A TokenGrammar from a byte-level NFA and the vocabulary: the NFA is made
// deterministic lazily (subset construction, one DFA state per reachable set
// of NFA states), and each DFA state's token mask is found once by walking
// a byte trie of the vocabulary from it (a token is allowed when all its
// bytes keep the automaton alive), then cached.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grammar/nfa.h"
#include "grammar/token_grammar.h"

namespace blockspec::grammar {

// The vocabulary as the grammar sees it: each token's bytes (special tokens
// other than the stop ids are never allowed) and a byte trie of them, made
// once per model and shared by every grammar.
struct Vocab {
  std::vector<std::string> bytes;    // [vocab]
  std::vector<bool> special;         // [vocab]
  struct Trie {
    std::vector<std::vector<std::pair<uint8_t, int32_t>>> kids;  // [nodes] (byte, child)
    std::vector<std::vector<int32_t>> tokens;                    // [nodes] ids ending there
  } trie;
  void build_trie();  // after bytes and special are set
};

class CompiledGrammar : public TokenGrammar {
 public:
  // stop_ids: the eos / stop tokens, allowed when the text is complete.
  CompiledGrammar(Nfa nfa, std::shared_ptr<const Vocab> vocab, std::vector<int32_t> stop_ids);
  int32_t start_state() override { return start_; }
  const std::vector<uint64_t>& allowed(int32_t state) override;
  int32_t next(int32_t state, int32_t token) override;
  bool accepts(int32_t state) const { return dfa_[state].accept; }
  int64_t n_dfa_states() const { return static_cast<int64_t>(dfa_.size()); }

 private:
  struct DState {
    std::vector<int32_t> nfa;          // sorted, epsilon-closed
    std::vector<int32_t> next;         // [256] -2 unknown, -1 dead
    bool accept = false;
    std::vector<uint64_t> mask;        // empty until computed
  };
  int32_t dstate(std::vector<int32_t> set);
  int32_t step(int32_t d, uint8_t b);
  void walk(int32_t node, int32_t d, std::vector<uint64_t>& mask);

  Nfa nfa_;
  std::shared_ptr<const Vocab> vocab_;
  std::vector<int32_t> stop_ids_;
  std::vector<uint64_t> stop_mask_;  // the stop ids alone: a dead state's mask
  std::vector<DState> dfa_;
  std::map<std::vector<int32_t>, int32_t> by_set_;
  int32_t start_ = 0;
  int64_t n_masks_ = 0;
  int64_t set_entries_ = 0;  // sum of the DFA states' NFA-set sizes
  std::vector<uint32_t> seen_;  // [NFA states] epsilon-closure marks, stamped
  uint32_t stamp_ = 0;
};

}  // namespace blockspec::grammar
