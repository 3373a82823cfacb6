#include "train/datagen.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "base/error.h"
#include "base/timer.h"

namespace blockspec {

namespace {

struct Pending {
  int64_t index = 0, n_prompt = 0, rows = 0;
  std::vector<int32_t> tokens;  // prompt, then the response as it streams
  std::vector<float> taps;      // [rows, width]
  bool finished = false, in_order = true;
  std::string reason, error;
};

}  // namespace

int64_t generate_draft_data(Engine& eng, const std::vector<std::vector<int32_t>>& prompts, DraftDataWriter& w,
                            const DatagenOptions& o) {
  const std::set<int64_t> done(w.done().begin(), w.done().end());
  std::deque<int64_t> todo;
  int64_t skipped = 0;
  const int64_t n = static_cast<int64_t>(prompts.size());
  if (!o.order.empty() && static_cast<int64_t>(o.order.size()) != n)
    fail("data generation: an order of ", o.order.size(), " indices for ", n, " prompts");
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = o.order.empty() ? j : o.order[j];
    if (i < 0 || i >= n) fail("data generation: order index ", i, " outside the ", n, " prompts");
    if (done.count(i)) continue;
    if (prompts[i].empty() || static_cast<int64_t>(prompts[i].size()) + o.max_new_tokens > eng.max_model_len()) {
      ++skipped;
      continue;
    }
    todo.push_back(i);
  }
  const int64_t width = w.width();
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, std::unique_ptr<Pending>> live;  // by prompt index; guarded by mu
  DatagenProgress pr;
  pr.total = static_cast<int64_t>(prompts.size()) - skipped;
  pr.done = static_cast<int64_t>(done.size());
  Timer timer;
  int64_t in_flight = 0;
  while (!todo.empty() || in_flight > 0) {
    while (!todo.empty() && in_flight < o.in_flight) {
      const int64_t i = todo.front();
      todo.pop_front();
      auto p = std::make_unique<Pending>();
      p->index = i, p->tokens = prompts[i], p->n_prompt = static_cast<int64_t>(prompts[i].size());
      Pending* pp = p.get();
      {
        std::lock_guard<std::mutex> g(mu);
        live[i] = std::move(p);
      }
      RequestParams rp;
      rp.prompt = prompts[i];
      rp.max_tokens = o.max_new_tokens;
      rp.sampling.temperature = 0;  // target-greedy: the labels are the data (training.md §8)
      rp.on_taps = [&mu, pp, width](int64_t first, int64_t n, const float* t) {
        std::lock_guard<std::mutex> g(mu);
        pp->in_order &= first == pp->rows;
        pp->taps.insert(pp->taps.end(), t, t + n * width);
        pp->rows += n;
      };
      eng.submit(rp, [&mu, &cv, pp](const TokenEvent& e) {
        std::lock_guard<std::mutex> g(mu);
        pp->tokens.insert(pp->tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.finished) {
          pp->finished = true, pp->reason = e.finish_reason, pp->error = e.error;
          cv.notify_all();
        }
      });
      ++in_flight;
    }
    std::vector<std::unique_ptr<Pending>> ready;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] {
        for (const auto& [i, p] : live)
          if (p->finished) return true;
        return false;
      });
      for (auto it = live.begin(); it != live.end();) {
        if (it->second->finished) {
          ready.push_back(std::move(it->second));
          it = live.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& p : ready) {
      --in_flight;
      if (p->reason == "error") fail("data generation: prompt ", p->index, ": ", p->error);
      if (!p->in_order) fail("data generation: prompt ", p->index, ": taps arrived out of order");
      w.append({p->index, static_cast<int64_t>(p->tokens.size()), p->n_prompt, p->rows, p->tokens.data(),
                p->taps.data()});
      pr.done += 1;
      pr.new_tokens += static_cast<int64_t>(p->tokens.size()) - p->n_prompt;
      pr.seconds = timer.seconds();
      if (o.progress) o.progress(pr);
    }
  }
  return skipped;
}

}  // namespace blockspec
