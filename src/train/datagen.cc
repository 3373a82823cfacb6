#include "train/datagen.h"

#include <algorithm>
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
  const std::vector<int32_t>* forced = nullptr;  // a known response, prefilled for its taps
  bool finished = false, in_order = true;
  int64_t finish_seq = 0;  // 1, 2, ... in the order the engine finished the requests
  std::string reason, error;
};

}  // namespace

std::vector<int64_t> select_per_file(const std::vector<int64_t>& order, const std::vector<int64_t>& file_sizes,
                                     const std::vector<int64_t>& counts, const std::set<int64_t>& known) {
  if (counts.size() != file_sizes.size())
    fail("--num-prompts: ", counts.size(), " counts for ", file_sizes.size(), " --prompts files (one per file)");
  std::vector<int64_t> begin(file_sizes.size() + 1, 0);  // file f: indices [begin[f], begin[f + 1])
  for (size_t f = 0; f < file_sizes.size(); ++f) {
    if (counts[f] < 0) fail("--num-prompts: count ", f + 1, " is ", counts[f], ", must be >= 0");
    begin[f + 1] = begin[f] + file_sizes[f];
  }
  const auto file_of = [&](int64_t i) {
    if (i < 0 || i >= begin.back()) fail("--num-prompts: prompt index ", i, " outside the ", begin.back(), " prompts");
    return static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), i) - begin.begin() - 1);
  };
  std::vector<int64_t> left = counts;  // each file's places still open
  std::set<int64_t> keep;
  for (int pass = 0; pass < 2; ++pass)  // the known prompts of each file, then the others
    for (int64_t i : order) {
      const size_t f = file_of(i);
      if ((known.count(i) > 0) == (pass == 0) && left[f] > 0) {
        keep.insert(i);
        --left[f];
      }
    }
  if (keep.empty()) fail("--num-prompts: every count is 0, nothing to answer");
  std::vector<int64_t> out;
  for (int64_t i : order)
    if (keep.count(i)) out.push_back(i);
  return out;
}

int64_t generate_draft_data(Engine& eng, const std::vector<std::vector<int32_t>>& prompts, DraftDataWriter& w,
                            const DatagenOptions& o) {
  const std::set<int64_t> done(w.done().begin(), w.done().end());
  std::deque<int64_t> todo;
  int64_t skipped = 0, left_out = 0;  // left_out: unknown prompts under known_only
  const auto known = [&](int64_t i) -> const std::vector<int32_t>* {
    if (!o.responses) return nullptr;
    const auto it = o.responses->find(i);
    return it == o.responses->end() ? nullptr : &it->second;
  };
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int64_t n_order = o.order.empty() ? n : static_cast<int64_t>(o.order.size());
  std::set<int64_t> seen;  // an order is a permutation of some of the prompts: no index twice
  int64_t n_done = 0;      // prompts of the order already in w
  for (int64_t j = 0; j < n_order; ++j) {
    const int64_t i = o.order.empty() ? j : o.order[j];
    if (i < 0 || i >= n) fail("data generation: order index ", i, " outside the ", n, " prompts");
    if (!seen.insert(i).second) fail("data generation: prompt ", i, " appears twice in the order");
    if (done.count(i)) {
      ++n_done;
      continue;
    }
    if (const std::vector<int32_t>* r = known(i)) {
      if (r->size() <= prompts[i].size() || !std::equal(prompts[i].begin(), prompts[i].end(), r->begin()))
        fail("data generation: the known response of prompt ", i,
             " does not start with that prompt as rendered now (another prompts file, template or tokenizer?)");
      if (static_cast<int64_t>(r->size()) + 1 > eng.max_model_len())
        fail("data generation: the known response of prompt ", i, " (", r->size(), " tokens) is longer than the engine allows");
      todo.push_front(i);  // prefilled first (reversed below)
      continue;
    }
    if (o.known_only) {
      ++left_out;
      continue;
    }
    if (prompts[i].empty() || static_cast<int64_t>(prompts[i].size()) + o.max_new_tokens > eng.max_model_len()) {
      ++skipped;
      continue;
    }
    todo.push_back(i);
  }
  {  // the known ones were pushed to the front in reverse: restore their order
    int64_t n_known = 0;
    while (n_known < static_cast<int64_t>(todo.size()) && known(todo[n_known])) ++n_known;
    std::reverse(todo.begin(), todo.begin() + n_known);
  }
  DatagenProgress pr;
  pr.total = n_order - skipped - left_out;
  pr.done = n_done;
  Timer timer;
  if (!o.taps) {  // tokens only: the known responses go into w as they are, first and in order
    while (!todo.empty() && known(todo.front())) {
      const int64_t i = todo.front();
      const std::vector<int32_t>& r = *known(i);
      todo.pop_front();
      w.append({i, static_cast<int64_t>(r.size()), static_cast<int64_t>(prompts[i].size()), 0, r.data(), nullptr});
      pr.done += 1;
      pr.known_tokens += static_cast<int64_t>(r.size() - prompts[i].size());
    }
    pr.seconds = timer.seconds();
    if (o.progress && pr.known_tokens > 0) o.progress(pr);
  }
  const int64_t width = w.width();
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, std::unique_ptr<Pending>> live;  // by prompt index; guarded by mu
  int64_t in_flight = 0, n_finished = 0;  // n_finished: guarded by mu
  while (!todo.empty() || in_flight > 0) {
    while (!todo.empty() && in_flight < o.in_flight) {
      const int64_t i = todo.front();
      todo.pop_front();
      const std::vector<int32_t>* forced = known(i);
      auto p = std::make_unique<Pending>();
      p->index = i, p->tokens = prompts[i], p->n_prompt = static_cast<int64_t>(prompts[i].size());
      p->forced = forced;
      Pending* pp = p.get();
      {
        std::lock_guard<std::mutex> g(mu);
        live[i] = std::move(p);
      }
      RequestParams rp;
      rp.prompt = forced ? *forced : prompts[i];
      rp.max_tokens = forced ? 1 : o.max_new_tokens;
      rp.sampling.temperature = 0;  // target-greedy: the labels are the data (training.md §8)
      if (o.taps) rp.on_taps = [&mu, pp, width](int64_t first, int64_t n, const float* t) {
        std::lock_guard<std::mutex> g(mu);
        pp->in_order &= first == pp->rows;
        pp->taps.insert(pp->taps.end(), t, t + n * width);
        pp->rows += n;
      };
      eng.submit(rp, [&mu, &cv, &n_finished, pp](const TokenEvent& e) {
        std::lock_guard<std::mutex> g(mu);
        pp->tokens.insert(pp->tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.finished) {
          pp->finished = true, pp->reason = e.finish_reason, pp->error = e.error, pp->finish_seq = ++n_finished;
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
    // Records go out in the order the engine finished them (not by prompt index), so a run's record order
    // follows its schedule: known responses, submitted first, come first.
    std::sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a->finish_seq < b->finish_seq; });
    for (const auto& p : ready) {
      --in_flight;
      if (p->reason == "error") fail("data generation: prompt ", p->index, ": ", p->error);
      if (!p->in_order) fail("data generation: prompt ", p->index, ": taps arrived out of order");
      if (p->forced) {  // keep the known tokens; a generated record has taps for all but its last token
        p->tokens = *p->forced;
        p->rows = std::min<int64_t>(p->rows, static_cast<int64_t>(p->tokens.size()) - 1);
        if (p->rows != static_cast<int64_t>(p->tokens.size()) - 1)
          fail("data generation: prompt ", p->index, ": the prefill of its known response returned ", p->rows, " tap rows");
      }
      w.append({p->index, static_cast<int64_t>(p->tokens.size()), p->n_prompt, p->rows, p->tokens.data(),
                p->taps.data()});
      pr.done += 1;
      (p->forced ? pr.known_tokens : pr.new_tokens) += static_cast<int64_t>(p->tokens.size()) - p->n_prompt;
      pr.seconds = timer.seconds();
      if (o.progress) o.progress(pr);
    }
  }
  return skipped;
}

}  // namespace blockspec
