// Descriptors handed between mailboxes (core/fd_passing.h): every rank sends the write end of its own
// pipe to every other rank, and each received descriptor is proven to be the sender's by writing
// through it. Ranks are threads, or processes for one case.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/fd_passing.h"
#include "test/catch.h"

using purlin::FdAddress;
using purlin::FdMailbox;
using purlin::ReceivedFd;
using purlin::Status;

namespace {

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe(fds) == 0) {
      read = fds[0];
      write = fds[1];
    }
  }
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

std::vector<int> everyone_but(int me, int n) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r)
    if (r != me) out.push_back(r);
  return out;
}

// Writes the receiver's rank through every received descriptor and closes it.
void answer(int me, const std::vector<ReceivedFd>& got) {
  for (const ReceivedFd& r : got) {
    const char byte = static_cast<char>('a' + me);
    (void)!::write(r.fd, &byte, 1);
    ::close(r.fd);
  }
}

// The bytes a pipe's read end holds, sorted.
std::string drained(int fd, std::size_t expect) {
  std::string s;
  char buf[64];
  while (s.size() < expect) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  std::sort(s.begin(), s.end());
  return s;
}

std::string all_but(int me, int n) {
  std::string s;
  for (int r = 0; r < n; ++r)
    if (r != me) s.push_back(static_cast<char>('a' + r));
  return s;
}

}  // namespace

TEST_CASE("mailboxes exchange descriptors among many ranks at once", "[fd_passing]") {
  // More ranks than a Unix datagram queue holds by default (10): sends must wait for receives.
  const int n = 24;
  std::vector<std::unique_ptr<FdMailbox>> boxes(n);
  std::vector<FdAddress> all(n);
  for (int r = 0; r < n; ++r) {
    REQUIRE(FdMailbox::open(&boxes[r]) == Status::ok);
    all[r] = boxes[r]->address();
  }
  std::vector<Pipe> pipes(n);
  std::vector<Status> status(n, Status::ok);
  std::vector<std::vector<ReceivedFd>> got(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int> peers = everyone_but(r, n);
      status[r] = boxes[r]->exchange(r, pipes[r].write, peers, peers, all, 20, {}, &got[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CHECK(status[r] == Status::ok);
    CHECK(got[r].size() == static_cast<std::size_t>(n - 1));
    answer(r, got[r]);
  }
  for (int r = 0; r < n; ++r) {
    ::close(pipes[r].write);
    pipes[r].write = -1;
    CHECK(drained(pipes[r].read, n - 1) == all_but(r, n));
  }
}

TEST_CASE("a mailbox takes descriptors from another process", "[fd_passing]") {
  std::unique_ptr<FdMailbox> parent_box, child_box;
  REQUIRE(FdMailbox::open(&parent_box) == Status::ok);
  REQUIRE(FdMailbox::open(&child_box) == Status::ok);
  const std::vector<FdAddress> all = {parent_box->address(), child_box->address()};
  Pipe to_parent;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    Pipe mine;
    std::vector<ReceivedFd> got;
    Status s = child_box->exchange(1, mine.write, {0}, {0}, all, 20, {}, &got);
    if (s != Status::ok || got.size() != 1 || got[0].from != 0) ::_exit(1);
    answer(1, got);
    // The parent answers through our pipe: wait for its byte (our read end must outlive its write).
    ::close(mine.write);
    mine.write = -1;
    ::_exit(drained(mine.read, 1) == "a" ? 0 : 2);
  }
  std::vector<ReceivedFd> got;
  CHECK(parent_box->exchange(0, to_parent.write, {1}, {1}, all, 20, {}, &got) == Status::ok);
  REQUIRE(got.size() == 1);
  CHECK(got[0].from == 1);
  answer(0, got);
  int st = 0;
  ::waitpid(pid, &st, 0);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  ::close(to_parent.write);
  to_parent.write = -1;
  CHECK(drained(to_parent.read, 1) == "b");
}

TEST_CASE("a mailbox ignores a sender without the right key and times out on a silent rank", "[fd_passing]") {
  std::unique_ptr<FdMailbox> a, b, stranger;
  REQUIRE(FdMailbox::open(&a) == Status::ok);
  REQUIRE(FdMailbox::open(&b) == Status::ok);
  REQUIRE(FdMailbox::open(&stranger) == Status::ok);
  std::vector<FdAddress> all = {a->address(), b->address()};
  // The stranger claims to be rank 1, with its own key.
  std::vector<FdAddress> stranger_view = {a->address(), stranger->address()};
  Pipe p;
  std::vector<ReceivedFd> ignored;
  REQUIRE(stranger->exchange(1, p.write, {0}, {}, stranger_view, 5, {}, &ignored) == Status::ok);
  std::vector<ReceivedFd> got;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(a->exchange(0, p.write, {}, {1}, all, 0.5, {}, &got) == Status::remote_error);
  CHECK(got.empty());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  // A stop ends the wait at once.
  CHECK(a->exchange(0, p.write, {}, {1}, all, 60, [] { return true; }, &got) == Status::remote_error);
}
