#include "core/bootstrap/gate.h"

#include <poll.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace purlin::boot {

void HelloGate::drop(Pending& p, const std::string& why) {
  log::info(kLog, "{}: dropped connection from {}: {}", who_, p.from.str(), why);
  p.sock.close();
}

bool HelloGate::advance(Pending& p, const Admit& admit) {
  for (;;) {
    std::size_t need = sizeof(Hello);
    Hello h{};
    if (p.got >= sizeof(Hello)) {
      std::memcpy(&h, p.buf, sizeof(h));
      need += h.addr_len;  // checked below before it was allowed to grow `need`
    }
    if (p.got == need) {
      std::string why;
      if (admit(h, p.buf + sizeof(Hello), p.sock, &why)) return true;
      drop(p, why);
      return true;
    }
    std::size_t n = 0;
    Io io = net::recv_some(p.sock.fd(), p.buf + p.got, need - p.got, &n);
    if (io == Io::would_block) return false;
    if (io == Io::closed) {
      drop(p, p.got ? fmt::format("closed after {} bytes of a hello", p.got) : "closed without a hello");
      return true;
    }
    if (io == Io::error) {
      drop(p, fmt::format("recv failed: {}", std::strerror(errno)));
      return true;
    }
    p.got += n;
    if (p.got == sizeof(Hello)) {
      std::memcpy(&h, p.buf, sizeof(h));
      if (h.magic != kUniqueIdMagic) { drop(p, "bad magic"); return true; }
      if (h.secret != secret_) { drop(p, "wrong secret"); return true; }
      if (h.kind != kind_) { drop(p, "wrong kind of hello"); return true; }
      std::uint32_t max_addr = kind_ == kHelloRoot ? Address::kMaxBytes : 0;
      if (h.addr_len > max_addr) { drop(p, fmt::format("address length {} too large", h.addr_len)); return true; }
    }
  }
}

HelloGate::End HelloGate::run(Deadline deadline, AbortFlags abort, const Admit& admit,
                              const std::function<bool()>& done) {
  std::vector<pollfd> fds;
  auto clear = [this](const char* why) {
    for (Pending& p : pending_) {
      if (why) drop(p, why);
    }
    pending_.clear();
  };
  while (!done()) {
    // Quietly: at process exit the logger may be gone.
    if (abort.raised()) { clear(nullptr); return End::aborted; }
    Deadline now = Clock::now();
    if (now >= deadline) { clear("timed out"); return End::timed_out; }

    // Expired hellos first, so a stream of silent connections cannot pile up.
    std::erase_if(pending_, [&](Pending& p) {
      if (now < p.until) return false;
      drop(p, fmt::format("no complete hello within {} s", kHelloWindowS));
      return true;
    });

    fds.assign(1, pollfd{listener_.fd(), POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back(pollfd{p.sock.fd(), POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), net::slice_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      log::warn("{}: poll failed: {}", who_, std::strerror(errno));
      clear("poll failed");
      return End::failed;
    }
    if (rc <= 0) continue;

    std::size_t polled = fds.size() - 1;
    for (std::size_t i = 0; i < polled; ++i) {
      if (fds[i + 1].revents == 0) continue;
      if (advance(pending_[i], admit)) pending_[i].sock.close();
    }
    std::erase_if(pending_, [](const Pending& p) { return !p.sock.valid(); });
    if (done()) break;

    if (fds[0].revents & (POLLERR | POLLNVAL)) {
      log::warn("{}: listening socket failed", who_);
      clear("listener failed");
      return End::failed;
    }
    // Take every connection already queued, bounded so one iteration stays short.
    for (int k = 0; k < 256 && (fds[0].revents & POLLIN); ++k) {
      Pending p;
      Status s = net::accept_now(listener_, &p.sock, &p.from);
      if (failed(s)) {
        // Out of descriptors (EMFILE/ENFILE) most likely: make room by shedding the oldest.
        if (pending_.empty()) break;
        drop(pending_.front(), "dropped to make room");
        pending_.erase(pending_.begin());
        continue;
      }
      if (!p.sock.valid()) break;
      if (pending_.size() >= kMaxPendingHellos) {
        drop(pending_.front(), "too many connections waiting for a hello");
        pending_.erase(pending_.begin());
      }
      p.until = std::min(deadline, net::deadline_after(kHelloWindowS));
      // The hello usually arrives with the connection; read it now rather than after a poll.
      if (advance(p, admit)) continue;
      pending_.push_back(std::move(p));
      if (done()) break;
    }
  }
  clear("rendezvous complete");
  return End::done;
}

}  // namespace purlin::boot
