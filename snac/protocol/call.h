// The boundaries of a call and the roles of a declaration: what the executors and the protocol tests
// run (run_role), the end of a call (end_call) and a mismatch's fault (raise_fault).
#pragma once

#include "snac/protocol/consume.h"

namespace purlin::snac {

// A rank that found its call mismatched with a peer's (Status::invalid_usage) stores the status in
// every peer's fault word: their waits end too, instead of waiting for messages that never come.
// `windows` are the windows whose fault words the peers watch.
template <class Atom>
PURLIN_HD void raise_fault(Atom& atom, const Context& ctx, const Window* windows, Status s) {
  atom.signal_each(ctx.nranks, [&](int d, std::uint64_t*& word, std::uint64_t& value) {
    if (d == ctx.rank) return false;
    word = windows[d].fault;
    value = static_cast<std::uint64_t>(s);
    return true;
  });
}

// After every role of this call has finished on this rank; one thread runs it. The regions this call
// staged join their half's record of what consumers may still read, which a later call that
// stages over them waits for (claim_region); records whose consumer has acked everything are dropped,
// so a region stays tied only to the peers that have yet to read it.
template <class Atom>
PURLIN_HD void end_call(Atom& atom, const Context& ctx) {
  LocalState& st = *ctx.state;
  const std::uint64_t half = st.epoch & 1;
  for (int ph = 0; ph < kMaxPhases; ++ph)
    for (int d = 0; d < ctx.nranks; ++d) {
      if (st.half_need[0][ph][d] != 0 || st.half_need[1][ph][d] != 0) {
        const std::uint64_t acked = atom::seq_of(atom.load_relaxed(slot_ack(ctx, ph, d)));
        for (int h = 0; h < 2; ++h)
          if (st.half_need[h][ph][d] != 0 && acked >= st.half_need[h][ph][d]) {
            st.half_need[h][ph][d] = 0;
            st.half_span[h][ph][d] = 0;
          }
      }
      if (st.staged[ph][d] != 0) {
        st.half_need[half][ph][d] = st.tx[ph][d];
        st.half_span[half][ph][d] = span_union(st.half_span[half][ph][d], st.staged[ph][d]);
        st.staged[ph][d] = 0;
      }
    }
  ++st.epoch;
}

enum class Role { stage, consume, gather };

template <class D>
PURLIN_HD constexpr int role_count() {
  return D::composed ? 3 : 2;
}

// True when every message of the call takes the latency path, so the roles may run one after the
// other on one worker (stage never waits on this call's consumers then).
template <class D>
PURLIN_HD bool all_latency(const Context& ctx, const Call& call) {
  bool all = true;
  auto check = [&](std::uint64_t bytes) {
    if (!use_latency(ctx, bytes)) all = false;
  };
  if constexpr (D::composed) {
    check(call.mid_bytes);
    for_each_offer<typename D::first>(ctx, call, [&](const Offer& o) { check(o.bytes); });
    if (consumes<typename D::second>(call, ctx.rank))
      for (int s = 0; s < ctx.nranks; ++s) check(call.out[s].bytes);
  } else {
    for_each_offer<D>(ctx, call, [&](const Offer& o) { check(o.bytes); });
    if (consumes<D>(call, ctx.rank)) {
      if constexpr (D::output == Layout::packed) check(call.out[0].bytes);
      else for (int s = 0; s < ctx.nranks; ++s) check(call.out[s].bytes);
    }
  }
  return all;
}

// Runs one role of declaration D (plain or composed) for this rank.
template <class D, class Atom>
PURLIN_HD Status run_role(Atom& atom, const Context& ctx, const Call& call, Role role) {
  static_assert(atom::SnacAtom<Atom>, "the protocol's Atom keeps the contract of atom/contract.h");
  const Lanes l = lanes_of<D>(ctx);
  if constexpr (!D::composed) {
    if (role == Role::stage) return stage<D>(atom, ctx, call, l, 0);
    if (role == Role::consume) {
      char* dst = D::output == Layout::packed ? call.out[0].ptr : nullptr;
      std::uint64_t bytes = D::output == Layout::packed ? call.out[0].bytes : 0;
      return consume<D, Atom, NextLane<D, Atom>>(atom, ctx, call, l, 0, dst, bytes, nullptr);
    }
    return Status::ok;
  } else {
    using F = typename D::first;
    using G = typename D::second;
    static_assert(G::input == Layout::packed, "a composition passes a packed intermediate");
    if (role == Role::stage) return stage<F>(atom, ctx, call, l, 0);
    if (role == Role::consume) {
      NextLane<G, Atom> next{ctx, call, l, Offer{nullptr, call.mid_bytes, 0, G::root == Root::consumer ? call.root : -1}};
      PURLIN_TRY((consume<F, Atom, NextLane<G, Atom>>(atom, ctx, call, l, 0, nullptr, call.mid_bytes, &next)));
      if (call.mid_bytes && use_latency(ctx, call.mid_bytes)) {
        // The intermediate is in scratch: push it to G's consumers.
        Call g = call;
        Part mid{ctx.scratch, call.mid_bytes};
        g.in = &mid;
        return stage<G>(atom, ctx, g, l, 1);
      }
      return Status::ok;
    }
    // Role::gather: G's consumer.
    return consume<G, Atom, NextLane<G, Atom>>(atom, ctx, call, l, 1, nullptr, 0, nullptr);
  }
}

}  // namespace purlin::snac
