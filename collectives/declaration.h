// The vocabulary a collective is declared in: a consume operation, an input layout and an output
// layout for n ranks, optionally a root role and run-time partition sizes, and composition.
// Plain C++ with no CUDA and no I/O; everything here is decided at compile time.
#pragma once

namespace purlin::coll {

// What the consumer does with the contributions it receives.
enum class Consume { copy, reduce };

// How a rank's buffer is organised for a collective.
//  packed:     one contiguous contribution (input: meant for every consumer; output: the reduction or
//              the single producer's contribution).
//  scattered:  n partitions indexed by rank (input: partition k is meant for rank k; output:
//              partition k came from rank k).
//  transposed: an exchange of rank-indexed partitions (output: partition s is the partition that
//              source s meant for this rank), in source-rank order.
enum class Layout { packed, scattered, transposed };

// Limits production (producer) or consumption (consumer) to a root chosen at run time.
enum class Root { none, producer, consumer };

// Whether partition sizes follow from one count (uniform) or are given per rank at run time (V).
enum class Sizes { uniform, variable };

template <Consume C, Layout In, Layout Out, Root R = Root::none, Sizes S = Sizes::uniform>
struct Declare {
  static constexpr bool composed = false;
  static constexpr Consume consume = C;
  static constexpr Layout input = In;
  static constexpr Layout output = Out;
  static constexpr Root root = R;
  static constexpr Sizes sizes = S;

  // A reduction lands in one packed result per consumer.
  static_assert(C != Consume::reduce || Out == Layout::packed, "a reduction produces a packed output");
  // A copy into a packed output needs exactly one producer per consumer: the root, which gives each
  // consumer its partition of a scattered input, or the whole of a packed one.
  static_assert(C != Consume::copy || Out != Layout::packed || R == Root::producer,
                "a packed copy output needs a single (root) producer");
  // A transposed output exchanges partitions, so its input is scattered.
  static_assert(Out != Layout::transposed || In == Layout::scattered, "transposed output needs scattered input");
  // Inputs are never transposed: transposition is what the exchange produces.
  static_assert(In != Layout::transposed, "an input is packed or scattered");
};

// G consumes F's intermediate result in place, as one fused execution: F's output layout must be
// G's input layout.
template <class F, class G>
struct Compose {
  static_assert(!F::composed && !G::composed, "compose two plain declarations");
  static_assert(F::output == G::input, "the output layout of F must be the input layout of G");
  static_assert(F::sizes == G::sizes, "both parts take their sizes the same way");
  static constexpr bool composed = true;
  using first = F;
  using second = G;
  static constexpr Consume consume = F::consume == Consume::reduce || G::consume == Consume::reduce
                                         ? Consume::reduce : Consume::copy;
  static constexpr Layout input = F::input;
  static constexpr Layout output = G::output;
  static constexpr Sizes sizes = F::sizes;
};

}  // namespace purlin::coll
