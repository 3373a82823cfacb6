// One engine request as an HTTP handler sees it: submits to the Engine,
// receives its token events (on the engine thread) into a queue, and turns
// them, on the handler thread, into text deltas that are valid UTF-8
// (StreamDecoder) and never contain a stop string: text that could be the
// start of a stop string is held back until it is proven not to be one.
// When a stop string appears the text is cut before it and the engine
// request is cancelled at once, so its KV pages are freed.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

// Stop-string matching over a growing text, independent of tokens.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends text; returns the part that is now safe to emit. After a stop
  // string is found, stopped() is true and nothing more is emitted.
  std::string push(const std::string& text);
  std::string finish();  // the held-back rest (the text ended without a stop string)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;  // everything pushed
  size_t sent_ = 0;   // bytes of text_ emitted
  bool stopped_ = false;
};

class Generation {
 public:
  // Submits; Engine::submit's validation errors propagate as Error.
  Generation(Engine& engine, const Tokenizer& tok, RequestParams params, std::vector<std::string> stop,
             bool skip_special);
  ~Generation();  // cancels the engine request if it is still running
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `timeout` for events; appends new text to `delta`. Returns
  // true once the request has finished (then finish_reason() is set).
  bool poll(std::string& delta, std::chrono::milliseconds timeout);
  void cancel();  // the client went away: end the engine request now

  bool finished() const { return finished_; }
  const std::string& finish_reason() const { return finish_reason_; }  // stop, length, abort, error
  const std::string& error() const { return error_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }  // prompt tokens the prefix cache supplied
  uint64_t id() const { return id_; }
  // The generated tokens (the eos / stop token included, tokens past a stop
  // string not) and, when requested, their logprobs (parallel to tokens).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<TokenLogprob>& logprobs() const { return logprobs_; }

 private:
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<TokenEvent> events;
  };
  void handle(const TokenEvent& ev, std::string& delta);

  Engine& engine_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  std::shared_ptr<Channel> ch_;  // shared with the engine callback, which may outlive us
  uint64_t id_ = 0;
  bool finished_ = false;
  std::string finish_reason_, error_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> logprobs_;
};

}  // namespace blockspec
