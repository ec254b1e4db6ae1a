#include "snac/executors/peer_remap.h"

#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/fd_passing.h"
#include "core/log.h"
#include "snac/window.h"

namespace purlin::snac {
namespace {

struct Want {
  std::uint64_t base, bytes;
};

// One rank's mailbox, and how many allocations it maps of each owner.
struct Head {
  FdAddress box;
  std::int32_t open;
  std::uint32_t count[kMaxRanks];
};

}  // namespace

Status remap_peer_allocations(Bootstrap& boot, int device, double timeout_s, const std::vector<Remap>& wants,
                              const char* what) {
  const int n = boot.nranks(), me = boot.rank();
  if (n > kMaxRanks) return fail(Status::internal_error, "remap: more ranks than a head counts");
  // A mailbox that cannot be opened fails every rank at the gathering below, not this one alone.
  std::unique_ptr<FdMailbox> mailbox;
  const Status opened = FdMailbox::open(&mailbox);
  std::vector<std::vector<Want>> asks(static_cast<std::size_t>(n));  // this rank's, by owner
  std::vector<std::vector<cuda::VmmMapping*>> targets(static_cast<std::size_t>(n));
  for (const Remap& w : wants) {
    asks[w.owner].push_back(Want{w.base, w.bytes});
    targets[w.owner].push_back(w.at);
  }
  Head mine{};
  if (opened == Status::ok) mine.box = mailbox->address();
  mine.open = opened == Status::ok ? 1 : 0;
  for (int p = 0; p < n; ++p) mine.count[p] = static_cast<std::uint32_t>(asks[p].size());
  std::vector<Head> heads(static_cast<std::size_t>(n));
  PURLIN_TRY(boot.all_gather(&mine, sizeof(Head), heads.data()));
  for (const Head& h : heads)
    if (!h.open) return opened != Status::ok ? opened : fail(Status::system_error, "remap: a peer could not open its mailbox");
  std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) boxes[r] = heads[r].box;

  // Requests go to their owners (sends do not wait for the receives); each owner answers which it
  // has now at the same base and size.
  for (int p = 0; p < n; ++p)
    if (!asks[p].empty()) PURLIN_TRY(boot.send(p, asks[p].data(), asks[p].size() * sizeof(Want)));
  std::vector<std::vector<Want>> asked(static_cast<std::size_t>(n));
  std::vector<std::vector<std::uint8_t>> served(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    if (heads[q].count[me] == 0) continue;
    asked[q].resize(heads[q].count[me]);
    PURLIN_TRY(boot.recv(q, asked[q].data(), asked[q].size() * sizeof(Want)));
    for (const Want& w : asked[q]) {
      cuda::BufferShare b;
      const bool here =
          cuda::describe_buffer(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(w.base)), 1, &b) == Status::ok &&
          b.kind == cuda::ShareKind::vmm_fd && b.base == w.base && b.bytes == w.bytes;
      served[q].push_back(here ? 1 : 0);
    }
    PURLIN_TRY(boot.send(q, served[q].data(), served[q].size()));
  }
  std::size_t expected = 0;
  for (int p = 0; p < n; ++p) {
    if (asks[p].empty()) continue;
    std::vector<std::uint8_t> answer(asks[p].size());
    PURLIN_TRY(boot.recv(p, answer.data(), answer.size()));
    for (std::size_t k = 0; k < answer.size(); ++k) {
      if (answer[k]) ++expected;
      else log::warn("{}: rank {}'s allocation at {:#x} ({} B) was not back at ncclCommResume: rank {} leaves it unmapped, "
                     "and graphs captured on it must be captured again", what, p, asks[p][k].base, asks[p][k].bytes, me);
    }
  }

  // Descriptors go out, tagged with the request's place, and come in, until every rank has done both.
  struct Post {
    int to;
    std::uint64_t tag, base;
  };
  std::vector<Post> posts;
  for (int q = 0; q < n; ++q)
    for (std::size_t k = 0; k < served[q].size(); ++k)
      if (served[q][k]) posts.push_back(Post{q, k, asked[q][k].base});
  std::map<std::pair<int, std::uint64_t>, int> got;
  Status s = Status::ok;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  while (s == Status::ok && (!posts.empty() || got.size() < expected)) {
    for (auto it = posts.begin(); s == Status::ok && it != posts.end();) {
      int fd = -1;
      s = cuda::vmm_export_buffer_fd(it->base, &fd);
      bool sent = false;
      if (s == Status::ok) s = mailbox->post(me, fd, it->tag, boxes[it->to], &sent);
      if (fd >= 0) ::close(fd);
      it = sent ? posts.erase(it) : std::next(it);
    }
    std::vector<ReceivedFd> in;
    mailbox->take(boxes, &in);
    for (const ReceivedFd& r : in)
      if (!got.emplace(std::make_pair(r.from, r.tag), r.fd).second) ::close(r.fd);
    if (s != Status::ok) break;
    if (boot.stopped()) s = fail(Status::remote_error, fmt::format("{}: a peer stopped while the ranks resumed", what));
    else if (Clock::now() - start > std::chrono::duration<double>(timeout_s))
      s = fail(Status::remote_error, fmt::format("{}: the peers' allocations did not come back within the timeout", what));
    else if (!posts.empty() || got.size() < expected) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::size_t mapped = 0;
  for (auto& [from_tag, fd] : got) {
    const auto [from, tag] = from_tag;
    const bool known = from >= 0 && from < n && tag < targets[from].size();
    if (s == Status::ok && !known) s = fail(Status::internal_error, fmt::format("{}: a descriptor no request asked for", what));
    if (s == Status::ok) s = cuda::vmm_import_fd_at(fd, device, targets[from][tag]);
    if (s == Status::ok) ++mapped;
    ::close(fd);
  }
  PURLIN_TRY(s);
  if (mapped) log::info(log::kColl, "{}: rank {} mapped {} peer allocations again at their addresses", what, me, mapped);
  return Status::ok;
}

}  // namespace purlin::snac
