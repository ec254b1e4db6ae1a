// Chains of separate Send/Recv calls (no group) that NCCL completes, and a model that says which do.
// Shared by the end-to-end tests (host datapath) and the GPU matrix.
//
// A chain gives every rank its list of calls. NCCL completes a chain when each send either fits the
// buffers between the pair (a small send finishes before its receive is posted) or meets its
// receive. The model below grants a send that buffering only while fewer than `depth` earlier
// messages of the same pair are still unreceived, and only up to `buffered_bytes`: no more slack than
// NCCL's buffers give (its sends of up to 64 KiB finish into the steps of the connection's buffer,
// NCCL_STEPS = 8), so every chain the model completes, NCCL completes too. Generated chains start from a global order
// of messages (each rank posts its part in that order, which completes even without buffering) and
// then move calls of a rank ahead of others where the model still completes: sends posted before
// receives that other ranks are waiting on, the shape that needs buffering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "test/common/rng.h"

namespace chains {

struct P2p {
  bool send;
  int peer;
  std::size_t count;  // int32 elements
  std::uint32_t id;   // the message's index in the chain: its content and its match
};
using Chain = std::vector<std::vector<P2p>>;  // per rank, in posting order

inline constexpr std::size_t kBufferedBytes = std::size_t{64} << 10;
inline constexpr std::size_t kBufferedDepth = 8;

// Whether every rank reaches the end of its list under the model above.
inline bool completes(const Chain& chain, std::size_t buffered_bytes = kBufferedBytes,
                      std::size_t depth = kBufferedDepth) {
  const int n = static_cast<int>(chain.size());
  std::vector<std::size_t> pos(static_cast<std::size_t>(n), 0);
  std::vector<std::deque<std::uint32_t>> unreceived(static_cast<std::size_t>(n * n));  // [src * n + dst]
  auto current = [&](int r) -> const P2p* {
    const auto& ops = chain[static_cast<std::size_t>(r)];
    return pos[static_cast<std::size_t>(r)] < ops.size() ? &ops[pos[static_cast<std::size_t>(r)]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const P2p* op = current(r);
      if (!op) continue;
      if (op->send) {
        auto& pair = unreceived[static_cast<std::size_t>(r * n + op->peer)];
        const P2p* other = current(op->peer);
        if (op->count * 4 <= buffered_bytes && pair.size() < depth) {
          pair.push_back(op->id);
          ++pos[static_cast<std::size_t>(r)];
          progress = true;
        } else if (pair.empty() && other && !other->send && other->peer == r && other->id == op->id) {
          ++pos[static_cast<std::size_t>(r)];
          ++pos[static_cast<std::size_t>(op->peer)];
          progress = true;
        }
      } else {
        auto& pair = unreceived[static_cast<std::size_t>(op->peer * n + r)];
        if (!pair.empty() && pair.front() == op->id) {
          pair.pop_front();
          ++pos[static_cast<std::size_t>(r)];
          progress = true;
        }
      }
    }
  }
  for (int r = 0; r < n; ++r)
    if (current(r)) return false;
  return true;
}

// The chain of README's former limitation, on ranks A..D = 0..3 (more ranks sit out): A sends
// 64 KiB to B, then 64 KiB to D, then receives 8 MiB from C; B receives from C, then from A; C sends
// 8 MiB to A, then 64 KiB to B; D receives from A.
inline Chain readme_chain(int nranks) {
  constexpr std::size_t small = (std::size_t{64} << 10) / 4, large = (std::size_t{8} << 20) / 4;
  Chain c(static_cast<std::size_t>(nranks));
  c[0] = {{true, 1, small, 0}, {true, 3, small, 1}, {false, 2, large, 2}};
  c[1] = {{false, 2, small, 3}, {false, 0, small, 0}};
  c[2] = {{true, 0, large, 2}, {true, 1, small, 3}};
  c[3] = {{false, 0, small, 1}};
  return c;
}

// Two buffered staged sends from one rank to one peer, unreceived at once, in consecutive calls (so
// in the two staging halves): A sends 64 KiB to B twice, then receives 8 MiB from C; B receives a
// small message from C before both of A's; C sends 8 MiB to A, then the small one to B.
inline Chain two_buffered_chain(int nranks) {
  constexpr std::size_t small = (std::size_t{64} << 10) / 4, large = (std::size_t{8} << 20) / 4;
  Chain c(static_cast<std::size_t>(nranks));
  c[0] = {{true, 1, small, 0}, {true, 1, small, 1}, {false, 2, large, 2}};
  c[1] = {{false, 2, 300, 3}, {false, 0, small, 0}, {false, 0, small, 1}};
  c[2] = {{true, 0, large, 2}, {true, 1, 300, 3}};
  return c;
}

// `depth` buffered sends from A to B unreceived at once, in consecutive calls, small (the latency
// path) and 64 KiB (staged) in turn, with sends from A to C between them when there are three
// ranks: B first sends A 8 MiB (more than a ring holds: it meets A's receive, which A posts only
// after all of its sends), then receives A's messages.
inline Chain deep_chain(int nranks, std::size_t depth = kBufferedDepth) {
  constexpr std::size_t small = 300, staged = (std::size_t{64} << 10) / 4, large = (std::size_t{8} << 20) / 4;
  Chain c(static_cast<std::size_t>(nranks));
  if (nranks < 2) return c;
  std::uint32_t id = 0;
  const std::uint32_t back = id++;
  for (std::size_t k = 0; k < depth; ++k) {
    const std::size_t count = k % 2 ? staged : small;
    c[0].push_back({true, 1, count, id});
    c[1].push_back({false, 0, count, id++});
    if (nranks >= 3 && k % 3 == 0) {
      c[0].push_back({true, 2, staged, id});
      c[2].push_back({false, 0, staged, id++});
    }
  }
  c[0].push_back({false, 1, large, back});
  c[1].insert(c[1].begin(), {true, 0, large, back});
  return c;
}

// Two ranks swap messages of `count` elements in separate calls, each sending before it receives:
// NCCL completes it where a send of that size finishes into its buffers (1 MiB: 8 of them do,
// 4 MiB: 2). The model grants buffering only up to kBufferedBytes, so it is not generated.
inline Chain swap_chain(int nranks, std::size_t count) {
  Chain c(static_cast<std::size_t>(nranks));
  if (nranks < 2) return c;
  c[0] = {{true, 1, count, 0}, {false, 1, count, 1}};
  c[1] = {{true, 0, count, 1}, {false, 0, count, 0}};
  return c;
}

// A random chain among `nranks` ranks that the model completes: 4 to 12 messages between distinct
// ranks, each of 300 elements (the latency path), 64 KiB (staged, buffered) or 8 MiB (more than a
// ring holds: it meets its receive).
inline Chain random_chain(std::uint64_t seed, int nranks) {
  std::uint64_t state = seed;
  auto next = [&] { return rng::splitmix(state++); };
  Chain c(static_cast<std::size_t>(nranks));
  if (nranks < 2) return c;
  constexpr std::size_t sizes[] = {300, (std::size_t{64} << 10) / 4, (std::size_t{8} << 20) / 4};
  const int messages = 4 + static_cast<int>(next() % 9);
  for (int m = 0; m < messages; ++m) {
    const int src = static_cast<int>(next() % static_cast<std::uint64_t>(nranks));
    const int dst = (src + 1 + static_cast<int>(next() % static_cast<std::uint64_t>(nranks - 1))) % nranks;
    const std::size_t count = sizes[next() % 3];
    const auto id = static_cast<std::uint32_t>(m);
    c[static_cast<std::size_t>(src)].push_back({true, dst, count, id});
    c[static_cast<std::size_t>(dst)].push_back({false, src, count, id});
  }
  // Move calls ahead where the chain still completes; never two of one pair past each other (that
  // would change which receive matches which send).
  for (int attempt = 0; attempt < 4 * messages; ++attempt) {
    auto& ops = c[next() % static_cast<std::uint64_t>(nranks)];
    if (ops.size() < 2) continue;
    const std::size_t i = next() % (ops.size() - 1);
    if (ops[i].send == ops[i + 1].send && ops[i].peer == ops[i + 1].peer) continue;
    std::swap(ops[i], ops[i + 1]);
    if (!completes(c)) std::swap(ops[i], ops[i + 1]);
  }
  return c;
}

// Whether a chain completes only thanks to buffered staged sends (it would not if only the small
// latency-path messages, 300 elements, were buffered, or only one message per pair): the chains the
// generator exists for.
inline bool needs_buffering(const Chain& chain) {
  return completes(chain) && (!completes(chain, 300 * 4) || !completes(chain, kBufferedBytes, 2));
}

// Element i of message `id`.
inline std::uint32_t element(std::uint32_t id, std::size_t i) {
  return static_cast<std::uint32_t>(rng::finalise(static_cast<std::uint64_t>(id) << 32 | i));
}

}  // namespace chains
