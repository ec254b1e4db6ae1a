// The root service and unique ids.
#include "core/bootstrap/root.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/bootstrap/gate.h"
#include "core/config.h"

namespace purlin {
namespace boot {
namespace {

// ---- the root service --------------------------------------------------------------------------

// Collects one hello per rank and answers each rank with the table of listening addresses.
// Owns everything it touches, so it can outlive the call that started it.
//
// Hellos are grouped by the rank count they claim, and the first group to be complete is answered:
// a hello that knows the secret but claims another count (stray or hostile) cannot make the real
// ranks' hellos look wrong. Only a claim of a real rank's slot, made before that rank arrives, can
// spoil a rendezvous; every rank then fails.
struct RootService {
  Socket listener;
  Address address;
  std::uint64_t secret = 0;
  std::uint32_t nranks = 0;  // 0: any count; the first complete group decides
  Deadline deadline;

  void run(const std::atomic<bool>* stop);
};

// Rank counts claimed at once, and hellos held, beyond which hellos are refused.
constexpr std::size_t kMaxRankCounts = 16;
constexpr std::size_t kMaxCheckedIn = std::size_t(1) << 16;

void RootService::run(const std::atomic<bool>* stop) {
  const std::string who = fmt::format("Bootstrap root {}", address.str());
  struct Member {
    Socket sock;
    WireAddr addr{};
  };
  std::map<std::uint32_t, std::map<std::uint32_t, Member>> groups;  // by rank count, then by rank
  std::size_t checked_in = 0;
  std::uint32_t complete = 0;  // the rank count of the first complete group
  auto admit = [&](const Hello& h, const std::uint8_t* addr, Socket& s, std::string* why) {
    if (h.nranks == 0 || h.nranks > kMaxRanks) { *why = fmt::format("bad rank count {}", h.nranks); return false; }
    if (h.rank >= h.nranks) { *why = fmt::format("rank {} out of range (nranks {})", h.rank, h.nranks); return false; }
    if (nranks && h.nranks != nranks) {
      *why = fmt::format("rank {} says nranks {}, the id was made for {}", h.rank, h.nranks, nranks);
      return false;
    }
    Address listen;
    if (!Address::from_bytes(addr, h.addr_len, &listen)) { *why = "bad listening address"; return false; }
    auto group = groups.find(h.nranks);
    if (group == groups.end()) {
      if (groups.size() >= kMaxRankCounts) { *why = fmt::format("too many rank counts claimed ({})", groups.size()); return false; }
      group = groups.emplace(h.nranks, std::map<std::uint32_t, Member>{}).first;
    }
    if (group->second.count(h.rank)) { *why = fmt::format("duplicate rank {} (nranks {})", h.rank, h.nranks); return false; }
    if (checked_in >= kMaxCheckedIn) { *why = "too many hellos held"; return false; }
    Member m;
    m.sock = std::move(s);
    m.addr.len = h.addr_len;
    std::memcpy(m.addr.bytes, addr, h.addr_len);
    group->second.emplace(h.rank, std::move(m));
    ++checked_in;
    if (group->second.size() == h.nranks) complete = h.nranks;
    log::trace(kLog, "{}: rank {} of {} checked in from {}", who, h.rank, h.nranks, listen.str());
    return true;
  };
  HelloGate gate(listener, secret, kHelloRoot, who);
  HelloGate::End end = gate.run(deadline, AbortFlags(stop), admit, [&] { return complete != 0; });
  listener.close();
  if (end != HelloGate::End::done) {
    // At process exit (stop raised) nothing is logged: the logger may already be gone.
    if (end == HelloGate::End::timed_out) {
      if (groups.size() == 1) {
        log::info(kLog, "{}: {} of {} ranks arrived before the deadline; giving up", who,
                  groups.begin()->second.size(), groups.begin()->first);
      } else {
        log::info(kLog, "{}: no complete set of ranks arrived before the deadline ({} rank counts claimed); giving up",
                  who, groups.size());
      }
    }
    return;
  }
  std::map<std::uint32_t, Member>& members = groups[complete];
  std::vector<std::uint8_t> answer(sizeof(std::uint64_t) + std::size_t(complete) * sizeof(WireAddr));
  const std::uint64_t len = std::uint64_t(complete) * sizeof(WireAddr);
  std::memcpy(answer.data(), &len, sizeof(len));
  for (auto& [rank, m] : members) std::memcpy(answer.data() + sizeof(len) + rank * sizeof(WireAddr), &m.addr, sizeof(WireAddr));
  int answered = 0;
  for (auto& [rank, m] : members) {
    if (!failed(net::send_all(m.sock, answer.data(), answer.size(), deadline, AbortFlags(stop)))) ++answered;
    m.sock.close();
  }
  if (groups.size() > 1) {
    log::info(kLog, "{}: dropped {} hellos that claimed another rank count", who, checked_in - members.size());
  }
  log::info(kLog, "{}: all {} ranks met; answered {}", who, complete, answered);
}

// Root services run on threads owned here. At process exit every one still running is told to
// stop and joined, so none outlives the objects it logs through. A child created by fork() does
// not own its parent's threads: it forgets them instead of joining.
class RootRegistry {
 public:
  static RootRegistry& get() {
    static RootRegistry registry;
    return registry;
  }

  Status start(std::unique_ptr<RootService> service) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(entries_, [](Entry& e) {
      if (e.pid != getpid() || !e.finished->load(std::memory_order_acquire)) return false;
      e.thread->join();
      return true;
    });
    Entry e;
    e.pid = getpid();
    e.finished = std::make_shared<std::atomic<bool>>(false);
    try {
      e.thread = std::make_unique<std::thread>(
          [svc = std::move(service), stop = stop_, finished = e.finished]() mutable {
            svc->run(stop.get());
            svc.reset();
            finished->store(true, std::memory_order_release);
          });
    } catch (const std::exception& ex) {
      return fail(Status::system_error, fmt::format("cannot start the bootstrap root thread: {}", ex.what()));
    }
    entries_.push_back(std::move(e));
    return Status::ok;
  }

  ~RootRegistry() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_->store(true, std::memory_order_release);
    for (Entry& e : entries_) {
      if (e.pid == getpid()) {
        e.thread->join();
      } else {
        (void)e.thread.release();  // not a thread of this process: leave it alone
      }
    }
  }

 private:
  RootRegistry() = default;
  struct Entry {
    std::unique_ptr<std::thread> thread;
    std::shared_ptr<std::atomic<bool>> finished;
    pid_t pid = 0;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

Status start_root(const Address& bind_addr, std::uint64_t secret, std::uint32_t nranks, bool fixed_port,
                  Address* bound) {
  auto svc = std::make_unique<RootService>();
  PURLIN_TRY(net::listen_on(bind_addr, fixed_port, &svc->listener, &svc->address));
  svc->secret = secret;
  svc->nranks = nranks;
  svc->deadline = net::deadline_after(config().bootstrap_timeout_s);
  if (bound) *bound = svc->address;
  Address where = svc->address;
  // The registry is created after the logger and config are in use, so it is destroyed first.
  log::info(kLog, "Bootstrap: root service listening on {} for {} s", where.str(), config().bootstrap_timeout_s);
  return RootRegistry::get().start(std::move(svc));
}

}  // namespace boot

using namespace boot;

std::uint64_t public_hash(const UniqueId& id) {
  const std::size_t n = std::min<std::size_t>(id.addr_len, sizeof(id.addr));
  return fnv1a(std::string(reinterpret_cast<const char*>(id.addr), n));
}

Status make_unique_id(UniqueId* out, IdFor whose) {
  if (!out) return fail(Status::invalid_argument, "make_unique_id: null output");
  UniqueId id{};
  id.magic = kUniqueIdMagic;
  Address root;
  const std::string& comm_id = config().comm_id;
  if (!comm_id.empty() && whose == IdFor::caller) {
    PURLIN_TRY(net::parse_address(comm_id, &root));
    if (root.is_any()) return fail(Status::invalid_argument, fmt::format("NCCL_COMM_ID={}: wildcard address", comm_id));
    // Every process that makes an id from NCCL_COMM_ID must get the same id.
    id.secret = comm_id_secret(comm_id);
    log::info(kLog, "Bootstrap: unique id for NCCL_COMM_ID={} ({}); rank 0 serves the rendezvous", comm_id, root.str());
  } else {
    PURLIN_TRY(net::random64(&id.secret));
    Address local;
    PURLIN_TRY(net::bootstrap_address(&local));
    PURLIN_TRY(start_root(local, id.secret, 0, false, &root));
  }
  std::memcpy(id.addr, &root.storage, root.len);
  id.addr_len = root.len;
  *out = id;
  return Status::ok;
}

}  // namespace purlin
