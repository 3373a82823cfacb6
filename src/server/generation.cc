#include "server/generation.h"

#include <algorithm>

namespace blockspec {

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return "";
  const size_t old = text_.size();
  text_ += text;
  if (stops_.empty()) {
    std::string out = text_.substr(sent_);
    sent_ = text_.size();
    return out;
  }
  // The earliest stop string that ends in the new text.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t from = old >= s.size() ? old - s.size() + 1 : 0;
    const size_t p = text_.find(s, std::max(from, sent_));
    if (p != std::string::npos) cut = std::min(cut, p);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = text_.substr(sent_, cut - sent_);
    sent_ = cut;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  // It starts at a character boundary: a stop string is valid UTF-8, so its
  // prefix starts with a lead byte.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, text_.size() - sent_); k > hold; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const size_t end = text_.size() - hold;
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string StopMatcher::finish() {
  if (stopped_) return "";
  std::string out = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

Generation::Generation(Engine& engine, const Tokenizer& tok, RequestParams params, std::vector<std::string> stop,
                       bool skip_special)
    : engine_(engine), decoder_(tok, skip_special), stop_(std::move(stop)), ch_(std::make_shared<Channel>()) {
  prompt_tokens_ = static_cast<int64_t>(params.prompt.size());
  std::weak_ptr<Channel> weak = ch_;
  id_ = engine_.submit(std::move(params), [weak](const TokenEvent& ev) {
    if (auto ch = weak.lock()) {
      {
        std::lock_guard<std::mutex> lock(ch->mu);
        ch->events.push_back(ev);
      }
      ch->cv.notify_one();
    }
  });
}

Generation::~Generation() {
  if (!finished_) engine_.cancel(id_);
}

void Generation::cancel() {
  if (finished_) return;
  engine_.cancel(id_);
  finished_ = true;
  finish_reason_ = "abort";
}

void Generation::handle(const TokenEvent& ev, std::string& delta) {
  cached_tokens_ = std::max(cached_tokens_, ev.cached_tokens);
  for (size_t i = 0; i < ev.tokens.size(); ++i) {
    ++completion_tokens_;
    tokens_.push_back(ev.tokens[i]);
    if (i < ev.logprobs.size()) logprobs_.push_back(ev.logprobs[i]);
    if (ev.ends_with_stop_token && i + 1 == ev.tokens.size()) break;  // counted, not shown
    delta += stop_.push(decoder_.push(ev.tokens[i]));
    if (stop_.stopped()) {
      // Cut at the stop string: the engine need not generate any further,
      // and counts the request as ended by "stop", not as aborted.
      engine_.cancel(id_, "stop");
      finished_ = true;
      finish_reason_ = "stop";
      return;
    }
  }
  if (!ev.finished) return;
  delta += stop_.push(decoder_.flush());
  if (!stop_.stopped()) delta += stop_.finish();
  finished_ = true;
  finish_reason_ = stop_.stopped() ? "stop" : ev.finish_reason;
  error_ = ev.error;
  if (ev.completion_tokens > 0 && !stop_.stopped()) completion_tokens_ = ev.completion_tokens;
  if (ev.prompt_tokens > 0) prompt_tokens_ = ev.prompt_tokens;
}

bool Generation::poll(std::string& delta, std::chrono::milliseconds timeout) {
  if (finished_) return true;
  std::deque<TokenEvent> evs;
  {
    std::unique_lock<std::mutex> lock(ch_->mu);
    ch_->cv.wait_for(lock, timeout, [&] { return !ch_->events.empty(); });
    evs.swap(ch_->events);
  }
  for (const TokenEvent& ev : evs) {
    handle(ev, delta);
    if (finished_) break;
  }
  if (!finished_ && evs.empty() && !engine_.healthy()) {
    finished_ = true;
    finish_reason_ = "error";
    error_ = "the engine stopped";
  }
  return finished_;
}

}  // namespace blockspec
