// The rank launcher (test/common/ranks.h): how each rank ended, the deadline, giving up early, and
// the order ranks are reported in as they end.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test/catch.h"
#include "test/common/ranks.h"

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

TEST_CASE("ranks: each rank's exit status, signal or exception", "[ranks]") {
  const auto out = ranks::run(4, [](int r) -> int {
    if (r == 2) ::raise(SIGTERM);
    if (r == 3) throw std::runtime_error("thrown on purpose");
    return r;
  });
  REQUIRE(out.size() == 4);
  CHECK(out[0].ok());
  CHECK(out[1].exit_code() == 1);
  CHECK(out[2].signal() == SIGTERM);
  CHECK(!out[2].exited());
  CHECK(out[3].exit_code() == 1);  // the exception, printed as a FAIL line
  for (const auto& o : out) {
    CHECK(o.ended);
    CHECK(!o.timed_out);
  }
  CHECK(ranks::describe(out[1]) == "exit 1");
  CHECK(ranks::describe(out[2]).rfind("signal 15 (", 0) == 0);
}

TEST_CASE("ranks: the deadline kills the stragglers", "[ranks]") {
  ranks::Group g(3, [](int r) {
    if (r == 1) sleep_s(60);
    return 0;
  });
  std::vector<ranks::Stop> stops;
  ranks::Wait w;
  w.deadline = ranks::Clock::now() + ranks::seconds(0.3);
  w.on_stop = [&](ranks::Stop why) {
    stops.push_back(why);
    CHECK(!g[1].ended);  // still running when told
  };
  CHECK(g.wait(w) == ranks::Stop::deadline);
  CHECK(stops == std::vector<ranks::Stop>{ranks::Stop::deadline});
  CHECK(g[0].ok());
  CHECK(g[2].ok());
  CHECK(g[1].timed_out);
  CHECK(g[1].signal() == SIGKILL);
  CHECK(g[1].elapsed_s < 10);
}

TEST_CASE("ranks: ranks are reported in the order they end", "[ranks]") {
  ranks::Group g(3, [](int r) {
    sleep_s(0.1 * (2 - r));
    return 0;
  });
  std::vector<int> order;
  ranks::Wait w;
  w.on_end = [&](int r, const ranks::Outcome& o) {
    CHECK(o.ended);
    order.push_back(r);
  };
  CHECK(g.wait(w) == ranks::Stop::none);
  CHECK(order == std::vector<int>{2, 1, 0});
}

TEST_CASE("ranks: give_up stops every rank still running", "[ranks]") {
  ranks::Group g(3, [](int r) {
    if (r == 0) return 7;
    sleep_s(60);
    return 0;
  });
  bool failed = false;
  ranks::Wait w;
  w.on_end = [&](int, const ranks::Outcome& o) { failed = failed || !o.ok(); };
  w.give_up = [&] { return failed; };
  const auto t0 = ranks::Clock::now();
  CHECK(g.wait(w) == ranks::Stop::gave_up);
  CHECK(std::chrono::duration<double>(ranks::Clock::now() - t0).count() < 10);
  CHECK(g[0].exit_code() == 7);
  CHECK(!g[0].timed_out);
  CHECK(g[1].timed_out);
  CHECK(g[2].signal() == SIGKILL);
}

TEST_CASE("ranks: has_ended sees an exit before wait reaps it", "[ranks]") {
  ranks::Group g(1, [](int) { return 0; });
  const auto until = ranks::Clock::now() + ranks::seconds(10);
  while (!g.has_ended(0) && ranks::Clock::now() < until) sleep_s(0.001);
  CHECK(g.has_ended(0));
  CHECK(!g[0].ended);
  CHECK(g.wait() == ranks::Stop::none);
  CHECK(g[0].ok());
}

TEST_CASE("ranks: a group kills and reaps its ranks when it goes", "[ranks]") {
  pid_t pid = -1;
  {
    ranks::Group g(1, [](int) {
      sleep_s(60);
      return 0;
    });
    pid = g[0].pid;
    REQUIRE(pid > 0);
  }
  CHECK(::kill(pid, 0) != 0);  // neither running nor a zombie
}
