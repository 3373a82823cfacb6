// Structured output for one request (issue 19): the request's constraint
// (server/openai_request.h GenRequest::Structured) compiled into a
// TokenGrammar over the served model's vocabulary (grammar/). The grammar is
// blockspec's own: no library for constrained decoding is in Debian, and the
// ones on PyPI (xgrammar, llguidance, outlines-core) ship as Python
// extensions, not as C or C++ libraries an engine can link (docs in README).
#pragma once
#include <memory>
#include <vector>

#include "grammar/token_grammar.h"
#include "server/openai_request.h"
#include "server/server.h"

namespace blockspec {

// Throws ApiError 400 naming s.param when the constraint cannot be compiled.
// stop_ids: the tokens that end the answer (allowed once the output is complete).
std::shared_ptr<TokenGrammar> compile_structured(ServedModel& m, const GenRequest::Structured& s,
                                                 std::vector<int32_t> stop_ids);

}  // namespace blockspec
