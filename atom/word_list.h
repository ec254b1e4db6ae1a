// The flat form's list (atom/sm/word_atom.cuh): the words of a step's messages as one list, message
// after message, a live message's packets in order (one for an empty message), none for a message
// not live. Item i of the list is packet q of message s.
#pragma once

#include <cstdint>

#include "atom/ll_packet.h"
#include "core/hd.h"

#if defined(__CUDA_ARCH__)
#define PURLIN_WORD_LIST_UNROLL _Pragma("unroll")
#else
#define PURLIN_WORD_LIST_UNROLL
#endif

namespace purlin::atom {

// end[s]: the items of messages 0..s of a table of N (M has `bytes`, within 4 GiB); returns them all.
template <int N, class M>
PURLIN_HD std::uint32_t word_list_ends(const M* table, const bool* live, std::uint32_t* end) {
  std::uint32_t sum = 0;
  PURLIN_WORD_LIST_UNROLL
  for (int s = 0; s < N; ++s) {
    if (live[s]) sum += static_cast<std::uint32_t>(ll_packets(table[s].bytes));
    end[s] = sum;
  }
  return sum;
}

// Item i: message *s, packet *q (past the end: message N - 1, beyond its packets).
template <int N>
PURLIN_HD void word_list_locate(std::uint32_t i, const std::uint32_t* end, int* s, std::uint32_t* q) {
  int at = 0;
  std::uint32_t start = 0;
  PURLIN_WORD_LIST_UNROLL
  for (int k = 0; k < N - 1; ++k)
    if (i >= end[k]) {
      at = k + 1;
      start = end[k];
    }
  *s = at;
  *q = i - start;
}

}  // namespace purlin::atom

#undef PURLIN_WORD_LIST_UNROLL
