// The rank-ordered element-wise reduction that every datapath applies, written once for the CPU
// and for GPU kernels.
//
//   out[i] = post(combine(...combine(combine(pre(x0[i]), pre(x1[i])), pre(x2[i]))...,
//                         pre(xn-1[i])))
//
// Sources are folded strictly in the order given (rank order), each element in its accumulator
// type, and the result is rounded to the element type once. Every operation is one IEEE operation
// with one rounding (never a fused multiply-add), so the host and any GPU give the same bits.
//
// Accumulator: fp32 for fp16, bf16, fp8 e4m3 and e5m2; float for float; double for double; the
// integer type itself for integers (sum and product wrap around modulo 2^bits; max, min and the
// avg division are signed for signed types).
//
//   sum        acc = x0; acc = acc + xs
//   prod       acc = x0; acc = acc * xs
//   max        acc = (xs > acc) ? xs : acc       (a NaN in acc sticks, a NaN in xs is skipped)
//   min        acc = (xs < acc) ? xs : acc
//   avg        sum, then acc / nranks in the accumulator type (integers truncate toward zero);
//              the divisor is ReduceOp::nranks, not the number of sources (nranks < 1 acts as 1)
//   premulsum  as NCCL defines it, each rank's contribution is multiplied by that rank's own
//              scalar, then the contributions are summed. The multiplication is the producer's
//              step (scale_range), applied by the rank that makes a contribution before the
//              contribution leaves it:
//                y = round_T(s_r * x), x and s_r widened to the accumulator exactly, one IEEE
//                multiplication, rounded to the element type T once (integers wrap)
//              where s_r is rank r's scalar of type T (ReduceOp::scalar_ptr when non-null, read
//              where the producer's datapath runs, else the bits in ReduceOp::scalar_bits). The
//              consumer then folds the scaled contributions with sum:
//                out = round_T(y_0 + y_1 + ... + y_n-1), in rank order in the accumulator
//              For fp16 and fp8 the fp32 product of two elements is exact, so y is the correctly
//              rounded product (what NCCL's __hmul gives); so it is for bf16 wherever the
//              product lies in fp32's normal range. For f32 and f64 y is the type's own IEEE
//              product, for integers its wrapping product.
//
// A NaN result is stored as the element type's canonical quiet NaN (float 0x7FFFFFFF, double
// 0x7FFFFFFFFFFFFFFF, see core/numeric.h for the narrow types), because NaN payloads otherwise
// differ between x86 and GPU arithmetic.
//
// Build requirements that keep the bits identical: host code in ISO C++ mode without -ffast-math
// (no contraction, no flush-to-zero); device code without -ftz=true or --use_fast_math. The device
// side spells each operation with the _rn intrinsics, which nvcc never fuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/hd.h"
#include "core/numeric.h"
#include "core/types.h"

#if defined(__FAST_MATH__) || defined(__USE_FAST_MATH__)
#error "atom/reduce.h: fast-math breaks the bit-exact reduction; compile without it"
#endif

namespace purlin {

// ---- one IEEE operation each, never fused -------------------------------------------------------

namespace arith {

// On the host, `a * b` and `a + b` in separate expressions stay separate: ISO C++ mode compiles
// with contraction off, and the project does not use -ffast-math.
PURLIN_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PURLIN_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PURLIN_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
PURLIN_HD double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
PURLIN_HD double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
PURLIN_HD double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// Integers wrap: the arithmetic happens in the unsigned type of the same width (no signed
// overflow), and the conversion back is modular (C++20).
template <class I>
  requires std::is_integral_v<I>
PURLIN_HD I add(I a, I b) {
  using U = std::make_unsigned_t<I>;
  return static_cast<I>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class I>
  requires std::is_integral_v<I>
PURLIN_HD I mul(I a, I b) {
  using U = std::make_unsigned_t<I>;
  return static_cast<I>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
// Truncating division by a positive divisor; signed for signed types. The quotient always fits.
template <class I, class D>
  requires std::is_integral_v<I>
PURLIN_HD I div(I a, D d) {
  return static_cast<I>(a / d);
}

}  // namespace arith

// ---- element types ------------------------------------------------------------------------------

// Elem<T>: how DataType T is stored and accumulated.
//   storage            the type of one element in memory
//   acc                the accumulator type
//   load(storage)      -> acc, exact
//   store(acc)         -> storage, rounded once (round to nearest even; see core/numeric.h)
//   from_bits(bits)    the element whose bit pattern is the low bits of a 64-bit word
template <DataType T>
struct Elem;

namespace reduce_detail {

template <class I>
struct IntElem {
  using storage = I;
  using acc = I;
  static PURLIN_HD acc load(storage v) { return v; }
  static PURLIN_HD storage store(acc a) { return a; }
  static PURLIN_HD storage from_bits(std::uint64_t b) {
    return static_cast<I>(static_cast<std::make_unsigned_t<I>>(b));
  }
};

template <class N>
struct NarrowElem {
  using storage = N;
  using acc = float;
  static PURLIN_HD acc load(storage v) { return to_float(v); }
  static PURLIN_HD storage store(acc a) { return from_float<N>(a); }
  static PURLIN_HD storage from_bits(std::uint64_t b) {
    return N{static_cast<decltype(N::bits)>(b)};
  }
};

}  // namespace reduce_detail

template <> struct Elem<DataType::int8> : reduce_detail::IntElem<std::int8_t> {};
template <> struct Elem<DataType::uint8> : reduce_detail::IntElem<std::uint8_t> {};
template <> struct Elem<DataType::int32> : reduce_detail::IntElem<std::int32_t> {};
template <> struct Elem<DataType::uint32> : reduce_detail::IntElem<std::uint32_t> {};
template <> struct Elem<DataType::int64> : reduce_detail::IntElem<std::int64_t> {};
template <> struct Elem<DataType::uint64> : reduce_detail::IntElem<std::uint64_t> {};
template <> struct Elem<DataType::f16> : reduce_detail::NarrowElem<f16_t> {};
template <> struct Elem<DataType::bf16> : reduce_detail::NarrowElem<bf16_t> {};
template <> struct Elem<DataType::f8e4m3> : reduce_detail::NarrowElem<f8e4m3_t> {};
template <> struct Elem<DataType::f8e5m2> : reduce_detail::NarrowElem<f8e5m2_t> {};

template <>
struct Elem<DataType::f32> {
  using storage = float;
  using acc = float;
  static PURLIN_HD acc load(storage v) { return v; }
  static PURLIN_HD storage store(acc a) { return a != a ? bits_as_float(0x7FFFFFFFu) : a; }
  static PURLIN_HD storage from_bits(std::uint64_t b) {
    return bits_as_float(static_cast<std::uint32_t>(b));
  }
};

template <>
struct Elem<DataType::f64> {
  using storage = double;
  using acc = double;
  static PURLIN_HD acc load(storage v) { return v; }
  static PURLIN_HD storage store(acc a) {
    return a != a ? bits_as_double(0x7FFFFFFFFFFFFFFFull) : a;
  }
  static PURLIN_HD storage from_bits(std::uint64_t b) { return bits_as_double(b); }
};

// ---- operators ----------------------------------------------------------------------------------

// RedFn<K, A>: the operator K on accumulator type A, as pre (applied to every widened input),
// combine (acc, next input) and post (applied once before the final rounding).
template <RedOpKind K, class A>
struct RedFn;

template <class A>
struct RedFn<RedOpKind::sum, A> {
  PURLIN_HD A pre(A x) const { return x; }
  PURLIN_HD A combine(A acc, A x) const { return arith::add(acc, x); }
  PURLIN_HD A post(A acc) const { return acc; }
};

template <class A>
struct RedFn<RedOpKind::prod, A> {
  PURLIN_HD A pre(A x) const { return x; }
  PURLIN_HD A combine(A acc, A x) const { return arith::mul(acc, x); }
  PURLIN_HD A post(A acc) const { return acc; }
};

template <class A>
struct RedFn<RedOpKind::max, A> {
  PURLIN_HD A pre(A x) const { return x; }
  PURLIN_HD A combine(A acc, A x) const { return x > acc ? x : acc; }
  PURLIN_HD A post(A acc) const { return acc; }
};

template <class A>
struct RedFn<RedOpKind::min, A> {
  PURLIN_HD A pre(A x) const { return x; }
  PURLIN_HD A combine(A acc, A x) const { return x < acc ? x : acc; }
  PURLIN_HD A post(A acc) const { return acc; }
};

template <class A>
struct RedFn<RedOpKind::avg, A> {
  // The divisor's type: A for floating point, A promoted for integers, so that a small integer
  // type can still be divided by a rank count it cannot represent.
  using Divisor = decltype(A{} / 1);
  Divisor divisor;
  PURLIN_HD A pre(A x) const { return x; }
  PURLIN_HD A combine(A acc, A x) const { return arith::add(acc, x); }
  PURLIN_HD A post(A acc) const { return arith::div(acc, divisor); }
};

// PreMulSum has no RedFn of its own: its contributions arrive scaled (scale_range) and are summed.
// The dispatchers below hand it to RedFn<sum>.

// ---- the reduction ------------------------------------------------------------------------------

// Reducer<T, K>: the operator bound to its parameters (the avg divisor), with the per-element
// steps. GPU kernels that stride over elements call element(); whole ranges go through
// reduce_range().
template <DataType T, RedOpKind K>
struct Reducer {
  static_assert(K != RedOpKind::premulsum, "PreMulSum's consumers fold with Reducer<T, sum> (see above)");
  using E = Elem<T>;
  using S = typename E::storage;
  using A = typename E::acc;
  using Fn = RedFn<K, A>;

  Fn fn;

  PURLIN_HD explicit Reducer(const ReduceOp& op) : fn(make(op)) {}

  PURLIN_HD A first(S x) const { return fn.pre(E::load(x)); }
  PURLIN_HD A next(A acc, S x) const { return fn.combine(acc, fn.pre(E::load(x))); }
  PURLIN_HD S finish(A acc) const { return E::store(fn.post(acc)); }

  // Element i of the reduction of nsrc >= 1 sources.
  PURLIN_HD S element(const void* const* srcs, int nsrc, std::size_t i) const {
    A acc = first(static_cast<const S*>(srcs[0])[i]);
    for (int s = 1; s < nsrc; ++s) acc = next(acc, static_cast<const S*>(srcs[s])[i]);
    return finish(acc);
  }

 private:
  static PURLIN_HD Fn make(const ReduceOp& op) {
    if constexpr (K == RedOpKind::avg) {
      return Fn{static_cast<typename Fn::Divisor>(op.nranks > 0 ? op.nranks : 1)};
    } else {
      return Fn{};
    }
  }
};

// dst[i] for i in [begin, end): the reduction of srcs[0..nsrc-1][i], folded in source order.
// nsrc >= 1 (nothing is written otherwise). dst may be one of the sources exactly (in place), but
// must not overlap a source partially.
template <DataType T, RedOpKind K>
PURLIN_HD void reduce_range(void* dst, const void* const* srcs, int nsrc, std::size_t begin,
                            std::size_t end, const ReduceOp& op) {
  using R = Reducer<T, K>;
  using S = typename R::S;
  using A = typename R::A;
  if (nsrc < 1) return;
  const R r(op);
  S* out = static_cast<S*>(dst);
#if defined(__CUDA_ARCH__)
  for (std::size_t i = begin; i < end; ++i) out[i] = r.element(srcs, nsrc, i);
#else
  // Host: a block of accumulators at a time, each pass streaming one or two sources through it in
  // source order, so that every inner loop is a plain loop the compiler vectorises (two sources
  // per pass also halve the traffic through the accumulators, and keep GCC from jamming
  // single-source passes into a loop it no longer vectorises). The operations per element are
  // those of element(), in the same order. Every source of a block is read before the block is
  // written, which keeps the exact in-place case correct.
  constexpr std::size_t kBlock = 1024;
  A acc[kBlock];
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t n = end - b < kBlock ? end - b : kBlock;
    const auto src = [&](int k) { return static_cast<const S*>(srcs[k]) + b; };
    int s;
    if (nsrc >= 2) {
      const S* x = src(0);
      const S* y = src(1);
      for (std::size_t j = 0; j < n; ++j) acc[j] = r.next(r.first(x[j]), y[j]);
      s = 2;
    } else {
      const S* x = src(0);
      for (std::size_t j = 0; j < n; ++j) acc[j] = r.first(x[j]);
      s = 1;
    }
    for (; s + 1 < nsrc; s += 2) {
      const S* x = src(s);
      const S* y = src(s + 1);
      for (std::size_t j = 0; j < n; ++j) acc[j] = r.next(r.next(acc[j], x[j]), y[j]);
    }
    if (s < nsrc) {
      const S* x = src(s);
      for (std::size_t j = 0; j < n; ++j) acc[j] = r.next(acc[j], x[j]);
    }
    S* o = out + b;
    for (std::size_t j = 0; j < n; ++j) o[j] = r.finish(acc[j]);
  }
#endif
}

// ---- PreMulSum's producer step ------------------------------------------------------------------

// Whether a contribution to reduction `op` is scaled by its producer before it leaves the rank.
PURLIN_HD constexpr bool scales(const ReduceOp& op) { return op.kind == RedOpKind::premulsum; }

// Scaler<T>: y = round_T(s * x) with this rank's scalar s, read once at construction.
template <DataType T>
struct Scaler {
  using E = Elem<T>;
  using S = typename E::storage;
  using A = typename E::acc;

  A scalar;

  // op.scalar_ptr, when non-null, points at one element of type T readable where this code runs
  // (the producer's device on a GPU datapath, the CPU on the host one).
  PURLIN_HD explicit Scaler(const ReduceOp& op)
      : scalar(E::load(op.scalar_ptr != nullptr ? *static_cast<const S*>(op.scalar_ptr)
                                                : E::from_bits(op.scalar_bits))) {}

  PURLIN_HD S apply(S x) const { return E::store(arith::mul(scalar, E::load(x))); }
};

// dst[i] = round_T(s * src[i]) for i in [begin, end), s being op's scalar. dst may be src exactly,
// never a partial overlap.
template <DataType T>
PURLIN_HD void scale_range(void* dst, const void* src, std::size_t begin, std::size_t end, const ReduceOp& op) {
  using S = typename Scaler<T>::S;
  const Scaler<T> sc(op);
  S* out = static_cast<S*>(dst);
  const S* in = static_cast<const S*>(src);
  for (std::size_t i = begin; i < end; ++i) out[i] = sc.apply(in[i]);
}

// ---- run-time dispatch --------------------------------------------------------------------------

// Calls f.template operator()<T>() for the runtime type t. Returns false (and calls nothing) when
// t is not a known value.
template <class F>
bool dispatch_type(DataType t, F&& f) {
  switch (t) {
    case DataType::int8: f.template operator()<DataType::int8>(); return true;
    case DataType::uint8: f.template operator()<DataType::uint8>(); return true;
    case DataType::int32: f.template operator()<DataType::int32>(); return true;
    case DataType::uint32: f.template operator()<DataType::uint32>(); return true;
    case DataType::int64: f.template operator()<DataType::int64>(); return true;
    case DataType::uint64: f.template operator()<DataType::uint64>(); return true;
    case DataType::f16: f.template operator()<DataType::f16>(); return true;
    case DataType::f32: f.template operator()<DataType::f32>(); return true;
    case DataType::f64: f.template operator()<DataType::f64>(); return true;
    case DataType::bf16: f.template operator()<DataType::bf16>(); return true;
    case DataType::f8e4m3: f.template operator()<DataType::f8e4m3>(); return true;
    case DataType::f8e5m2: f.template operator()<DataType::f8e5m2>(); return true;
  }
  return false;
}

// Calls f.template operator()<T, K>() for the runtime pair (t, k), so that callers choose an
// instantiation once per call rather than per element; K is the fold a consumer applies, so
// PreMulSum's is sum (its contributions arrive scaled). Returns false (and calls nothing) when t
// or k is not a known value.
template <DataType T, class F>
bool dispatch_reduction_op(RedOpKind k, F& f) {
  switch (k) {
    case RedOpKind::sum:
    case RedOpKind::premulsum: f.template operator()<T, RedOpKind::sum>(); return true;
    case RedOpKind::prod: f.template operator()<T, RedOpKind::prod>(); return true;
    case RedOpKind::max: f.template operator()<T, RedOpKind::max>(); return true;
    case RedOpKind::min: f.template operator()<T, RedOpKind::min>(); return true;
    case RedOpKind::avg: f.template operator()<T, RedOpKind::avg>(); return true;
  }
  return false;
}

template <class F>
bool dispatch_reduction(DataType t, RedOpKind k, F&& f) {
  bool known = false;
  const bool typed = dispatch_type(t, [&]<DataType T>() { known = dispatch_reduction_op<T>(k, f); });
  return typed && known;
}

}  // namespace purlin
