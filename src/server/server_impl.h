// Internal to src/server: the state the endpoint handlers share.
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/error.h"
#include "server/metrics_text.h"
#include "server/openai_request.h"
#include "server/server.h"

namespace blockspec {

struct Answer;  // server/answer.h: one request's state while its answer is written

struct Server::Impl {
  ServerOptions opts;
  httplib::Server http;
  std::thread listener;
  int bound_port = -1;
  std::atomic<bool> stopping{false};
  std::mutex mu;  // guards model, counters, stopped
  std::condition_variable stopped_cv;
  bool stopped = false;
  std::shared_ptr<ServedModel> model;
  ServerCounters counters;
  std::atomic<uint64_t> next_id{0}, next_seed{0};
  uint64_t id_salt = 0;  // random per server, so ids differ across restarts
  std::time_t created = 0;

  std::shared_ptr<ServedModel> model_or_503();  // throws ApiError 503 while loading
  void count_finished(const std::string& reason);
  std::string new_id(const char* prefix);
  uint64_t random_seed();  // for requests without "seed"

  void routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  // One call of a content provider: a non-streaming or a streaming answer.
  bool json_step(Answer& a, httplib::DataSink& sink);
  bool sse_step(Answer& a, httplib::DataSink& sink);
  bool still_there(Answer& a, httplib::DataSink& sink, const std::string& keep_alive);
  bool hang_up(Answer& a);
  void count_ended(Answer& a);  // counts each ended choice's finish once
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
};

void set_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
               const std::string& type = "");
void set_json(httplib::Response& res, const nlohmann::json& j);
std::string dump_json(const nlohmann::json& j);  // invalid UTF-8 -> U+FFFD, never throws

// Runs fn, turning ApiError / Error / anything else into an OpenAI error body.
template <class Fn>
void guarded(httplib::Response& res, Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    set_error(res, e.status, e.what(), e.param, e.type);
  } catch (const Error& e) {  // validation in the engine / tokenizer / template: the request's fault
    set_error(res, 400, e.what());
  } catch (const std::bad_alloc&) {
    set_error(res, 503, "out of memory", "", "server_error");
  } catch (const std::exception& e) {
    set_error(res, 500, e.what(), "", "server_error");
  }
}

// Prompt token ids of a request: chat template + encode, or encode (with bos
// when the model wants it), or the ids as given (checked against the vocab).
std::vector<int32_t> prompt_ids_for(const ServedModel& m, const GenRequest& r);

}  // namespace blockspec
