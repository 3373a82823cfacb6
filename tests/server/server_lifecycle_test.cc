// Server start / stop without a model: `blockspec serve` stops the server
// at once when the model fails to load, which must never hang.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "server/server.h"

namespace blockspec {
namespace {

// cpp-httplib's stop() is a no-op until its listener thread has started;
// Server::start() waits for it, else stop() joins a thread stuck in accept().
TEST(ServerLifecycle, StopRightAfterStartNeverHangs) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t([&] {
    for (int i = 0; i < 200; ++i) {
      ServerOptions o;
      o.port = 0;
      Server s(o);
      s.start();
      s.stop();
    }
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; })) {
    std::fprintf(stderr, "ServerLifecycle: Server::stop() hangs right after start()\n");
    std::_Exit(1);  // the stuck thread cannot be joined
  }
  lock.unlock();
  t.join();
}

}  // namespace
}  // namespace blockspec
