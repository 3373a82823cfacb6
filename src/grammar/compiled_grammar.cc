#include "grammar/compiled_grammar.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec::grammar {

namespace {

// Bounds on the lazily built DFA: states (1 KiB of transitions each) and the
// NFA-state sets they hold, so a hostile schema costs at most ~100 MB.
constexpr int64_t kMaxDfaStates = 20000;
constexpr int64_t kMaxSetEntries = int64_t(1) << 24;
constexpr int64_t kMaxMasks = 4096;  // cached masks (each vocab / 8 bytes)

}  // namespace

void Vocab::build_trie() {
  trie = Trie{};
  trie.kids.emplace_back();
  trie.tokens.emplace_back();
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (special[id] || bytes[id].empty()) continue;
    int32_t node = 0;
    for (unsigned char b : bytes[id]) {
      auto& kids = trie.kids[node];
      auto it = std::find_if(kids.begin(), kids.end(), [b](const auto& k) { return k.first == b; });
      if (it != kids.end()) {
        node = it->second;
        continue;
      }
      const int32_t child = static_cast<int32_t>(trie.kids.size());
      trie.kids[node].push_back({b, child});
      trie.kids.emplace_back();
      trie.tokens.emplace_back();
      node = child;
    }
    trie.tokens[node].push_back(static_cast<int32_t>(id));
  }
}

CompiledGrammar::CompiledGrammar(Nfa nfa, std::shared_ptr<const Vocab> vocab, std::vector<int32_t> stop_ids)
    : nfa_(std::move(nfa)), vocab_(std::move(vocab)), stop_ids_(std::move(stop_ids)) {
  if (vocab_->trie.kids.empty()) fail("structured output: the vocabulary's trie is not built");
  stop_mask_.assign((vocab_->bytes.size() + 63) / 64, 0);
  for (int32_t id : stop_ids_)
    if (id >= 0 && static_cast<size_t>(id) < vocab_->bytes.size()) stop_mask_[id / 64] |= uint64_t(1) << (id % 64);
  start_ = dstate({nfa_.start});
  if (start_ < 0) fail("structured output: the grammar is too large");
}

int32_t CompiledGrammar::dstate(std::vector<int32_t> set) {
  // Epsilon closure, then the canonical (sorted) set names the DFA state.
  // seen_ is stamped per call (no O(NFA) clearing for each new transition).
  if (seen_.size() != static_cast<size_t>(nfa_.n_states())) seen_.assign(static_cast<size_t>(nfa_.n_states()), 0);
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  std::vector<int32_t> stack = std::move(set), closed;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (seen_[s] == stamp_) continue;
    seen_[s] = stamp_;
    closed.push_back(s);
    for (int32_t t : nfa_.eps[s]) stack.push_back(t);
  }
  std::sort(closed.begin(), closed.end());
  if (closed.empty()) return -1;
  auto it = by_set_.find(closed);
  if (it != by_set_.end()) return it->second;
  // Past the bounds the automaton stops growing: the transition is dead (it
  // runs on the engine thread mid-answer, where throwing would stop the engine).
  if (static_cast<int64_t>(dfa_.size()) >= kMaxDfaStates || set_entries_ + static_cast<int64_t>(closed.size()) > kMaxSetEntries)
    return -1;
  set_entries_ += static_cast<int64_t>(closed.size());
  DState d;
  d.nfa = closed;
  d.next.assign(256, -2);
  d.accept = std::binary_search(closed.begin(), closed.end(), nfa_.accept);
  dfa_.push_back(std::move(d));
  const int32_t id = static_cast<int32_t>(dfa_.size() - 1);
  by_set_.emplace(std::move(closed), id);
  return id;
}

int32_t CompiledGrammar::step(int32_t d, uint8_t b) {
  int32_t& cached = dfa_[d].next[b];
  if (cached != -2) return cached;
  std::vector<int32_t> to;
  for (int32_t s : dfa_[d].nfa)
    for (const Nfa::Edge& e : nfa_.edges[s])
      if (b >= e.lo && b <= e.hi) to.push_back(e.to);
  const int32_t r = to.empty() ? -1 : dstate(std::move(to));
  dfa_[d].next[b] = r;  // (dstate may have grown dfa_: index again)
  return r;
}

void CompiledGrammar::walk(int32_t node, int32_t d, std::vector<uint64_t>& mask) {
  for (const auto& [b, child] : vocab_->trie.kids[node]) {
    const int32_t d2 = step(d, b);
    if (d2 < 0) continue;
    for (int32_t id : vocab_->trie.tokens[child]) mask[id / 64] |= uint64_t(1) << (id % 64);
    walk(child, d2, mask);
  }
}

const std::vector<uint64_t>& CompiledGrammar::allowed(int32_t state) {
  // A dead state (the automaton outgrew its bounds) allows only the stop tokens: the answer ends.
  if (state < 0 || state >= static_cast<int32_t>(dfa_.size())) return stop_mask_;
  if (!dfa_[state].mask.empty()) return dfa_[state].mask;
  if (n_masks_ >= kMaxMasks) {  // bound the cache: drop every mask and start again
    for (DState& d : dfa_) std::vector<uint64_t>().swap(d.mask);
    n_masks_ = 0;
  }
  std::vector<uint64_t> mask((vocab_->bytes.size() + 63) / 64, 0);
  walk(0, state, mask);
  if (dfa_[state].accept)
    for (int32_t id : stop_ids_)
      if (id >= 0 && static_cast<size_t>(id) < vocab_->bytes.size()) mask[id / 64] |= uint64_t(1) << (id % 64);
  if (std::all_of(mask.begin(), mask.end(), [](uint64_t w) { return w == 0; })) return stop_mask_;
  ++n_masks_;
  dfa_[state].mask = std::move(mask);
  return dfa_[state].mask;
}

int32_t CompiledGrammar::next(int32_t state, int32_t token) {
  if (state < 0 || token < 0 || static_cast<size_t>(token) >= vocab_->bytes.size()) return -1;
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) return state;  // allowed() said when
  if (vocab_->special[token]) return -1;
  int32_t d = state;
  for (unsigned char b : vocab_->bytes[token]) {
    d = step(d, b);
    if (d < 0) return -1;
  }
  return d;
}

}  // namespace blockspec::grammar
