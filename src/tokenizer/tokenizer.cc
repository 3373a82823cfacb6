// Tokenizer: the HF encode pipeline (added tokens -> normalizer -> added
// tokens on the normalized text -> pre-tokenizer -> BPE) and decoding.
#include "tokenizer/tokenizer.h"

#include "base/error.h"
#include "base/mapped_file.h"
#include "tokenizer/tokenizer_json.h"

namespace blockspec {

using tok::TokenizerParts;

struct Tokenizer::Impl {
  TokenizerParts parts;
};

namespace {

// Per-call working memory, so concurrent encode calls share nothing mutable.
struct EncodeState {
  std::vector<tok::TextSegment> raw_segments;
  std::vector<tok::TextSegment> norm_segments;
  std::vector<std::string_view> pieces;
  tok::PreTokenizeScratch pre;
  tok::BpeScratch bpe;
};

void encode_plain(const TokenizerParts& p, std::string_view text, EncodeState& st,
                  std::vector<int32_t>* out) {
  p.pre_tokenizer.split(text, st.pre, &st.pieces);
  for (std::string_view piece : st.pieces) p.bpe.encode_word(piece, st.bpe, out);
}

// One stretch of the raw text between added tokens: normalize it, then cut
// out the added tokens that match in normalized form.
void encode_segment(const TokenizerParts& p, std::string_view raw, EncodeState& st,
                    std::vector<int32_t>* out) {
  std::string norm = tok::apply_normalizers(p, raw);
  if (p.normalized_matcher.empty()) {
    encode_plain(p, norm, st, out);
    return;
  }
  p.normalized_matcher.split(norm, &st.norm_segments);
  for (const auto& s : st.norm_segments) {
    if (s.token >= 0) {
      out->push_back(p.normalized_matcher.id_of(s.token));
    } else {
      encode_plain(p, std::string_view(norm).substr(s.start, s.end - s.start), st, out);
    }
  }
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  return from_json(read_text_file(tokenizer_json_path), tokenizer_json_path);
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& what) {
  return from_parts(tok::parse_tokenizer_json(json_text, what));
}

Tokenizer Tokenizer::from_parts(tok::TokenizerParts parts) {
  Tokenizer t;
  t.impl_->parts = std::move(parts);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerParts& p = impl_->parts;
  size_t bad = tok::first_invalid_utf8(text);
  if (bad != text.size())
    fail("Tokenizer::encode: expected valid UTF-8 text, found an invalid byte 0x",
         "0123456789ABCDEF"[uint8_t(text[bad]) >> 4], "0123456789ABCDEF"[uint8_t(text[bad]) & 15],
         " at byte offset ", bad, "; decode the input as UTF-8 with replacement first");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);  // ~4 bytes per token on English text
  EncodeState st;
  p.raw_matcher.split(text, &st.raw_segments);
  for (const auto& s : st.raw_segments) {
    if (s.token >= 0) out.push_back(p.raw_matcher.id_of(s.token));
    else encode_segment(p, text.substr(s.start, s.end - s.start), st, &out);
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const TokenizerParts& p = impl_->parts;
  std::string out;
  for (int32_t id : ids) {
    // Unknown ids decode to nothing, as in HF (a model's padded embedding
    // rows have ids past the tokenizer's vocab).
    if (id < 0 || size_t(id) >= p.id_kind.size()) continue;
    auto kind = p.id_kind[size_t(id)];
    if (kind == TokenizerParts::IdKind::kAbsent) continue;
    if (skip_special && kind == TokenizerParts::IdKind::kSpecial) continue;
    out += p.id_bytes[size_t(id)];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const TokenizerParts& p = impl_->parts;
  if (id < 0 || size_t(id) >= p.id_kind.size() ||
      p.id_kind[size_t(id)] == TokenizerParts::IdKind::kAbsent)
    fail("Tokenizer::token_bytes: expected an id in the vocab [0, ", p.id_kind.size(),
         "), found ", id);
  return p.id_bytes[size_t(id)];
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->parts.id_kind.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const TokenizerParts& p = impl_->parts;
  // Added tokens first, as HF's token_to_id does.
  for (const auto& a : p.added)
    if (a.content == token) return a.id;
  std::string bytes;
  if (!tok::byte_level_to_bytes(p.byte_level, token, &bytes)) return std::nullopt;
  return p.bpe.find(bytes);
}

bool Tokenizer::is_special(int32_t id) const {
  const TokenizerParts& p = impl_->parts;
  return id >= 0 && size_t(id) < p.id_kind.size() &&
         p.id_kind[size_t(id)] == TokenizerParts::IdKind::kSpecial;
}

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.decode({id});
  std::string out;
  size_t used = tok::append_utf8_lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::append_utf8_lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace blockspec
