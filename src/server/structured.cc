#include "server/structured.h"

#include "base/error.h"
#include "grammar/json_schema.h"

namespace blockspec {

std::shared_ptr<TokenGrammar> compile_structured(ServedModel& m, const GenRequest::Structured& s,
                                                 std::vector<int32_t> stop_ids) {
  std::call_once(m.vocab_once, [&] {
    auto v = std::make_shared<grammar::Vocab>();
    const int32_t n = static_cast<int32_t>(m.engine->vocab_size());
    for (int32_t id = 0; id < n; ++id) {
      const bool known = id < m.tokenizer->vocab_size();
      v->bytes.push_back(known ? m.tokenizer->token_bytes(id) : std::string());
      v->special.push_back(!known || m.tokenizer->is_special(id));
    }
    v->build_trie();
    m.vocab = std::move(v);
  });
  std::string key = s.kind + '\n' + s.regex + '\n';
  for (const std::string& c : s.choices) key += c + '\x1f';
  key += '\n' + s.schema.dump() + '\n';
  for (int32_t id : stop_ids) key += std::to_string(id) + ',';
  {
    std::lock_guard<std::mutex> lock(m.grammars_mu);
    for (size_t i = 0; i < m.grammars.size(); ++i)
      if (m.grammars[i].first == key) {
        auto hit = m.grammars[i];
        m.grammars.erase(m.grammars.begin() + static_cast<std::ptrdiff_t>(i));
        m.grammars.push_back(hit);
        return hit.second;
      }
  }
  grammar::Nfa nfa;
  std::shared_ptr<TokenGrammar> g;
  try {
    if (s.kind == "json_schema") nfa = grammar::compile_json_schema(s.schema);
    else if (s.kind == "json_object") nfa = grammar::compile_json_object();
    else if (s.kind == "regex") nfa = grammar::compile_regex_language(s.regex);
    else nfa = grammar::compile_choice(s.choices);
    g = std::make_shared<grammar::CompiledGrammar>(std::move(nfa), m.vocab, std::move(stop_ids));
  } catch (const Error& e) {
    throw ApiError(400, std::string("'") + s.param + "': " + e.what(), s.param);
  }
  std::lock_guard<std::mutex> lock(m.grammars_mu);
  m.grammars.emplace_back(std::move(key), g);
  if (m.grammars.size() > 32) m.grammars.erase(m.grammars.begin());
  return g;
}

}  // namespace blockspec
