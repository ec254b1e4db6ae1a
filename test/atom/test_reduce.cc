// reduce_host, scale_host and reduce_range for every element type and operator against a
// reference written independently: integers in 64-bit modular arithmetic, fp32 accumulation through
// double (one double operation rounded to float is the correctly rounded float operation), double
// directly. PreMulSum is checked as the datapaths compute it: every source is one rank's
// contribution, scaled by that rank's own scalar (scale_host), and the scaled contributions are
// folded (reduce_host).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "atom/host/reduce_host.h"
#include "atom/reduce.h"
#include "core/numeric.h"
#include "core/types.h"
#include "test/catch.h"

namespace {

using namespace purlin;

template <DataType T>
struct Tag {
  static constexpr DataType value = T;
};

constexpr RedOpKind kOps[] = {RedOpKind::sum, RedOpKind::prod, RedOpKind::max,
                              RedOpKind::min, RedOpKind::avg,  RedOpKind::premulsum};
constexpr unsigned char kPoison = 0xA5;

template <class S>
std::uint64_t bits_of(S v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

// ---- reference arithmetic -----------------------------------------------------------------------

float ref_add(float a, float b) { return static_cast<float>(static_cast<double>(a) + b); }
float ref_mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }
float ref_div(float a, float b) { return static_cast<float>(static_cast<double>(a) / b); }
double ref_add(double a, double b) {
  const double r = a + b;
  return r;
}
double ref_mul(double a, double b) {
  const double r = a * b;
  return r;
}
double ref_div(double a, double b) {
  const double r = a / b;
  return r;
}

// Every operator but premulsum (which the callers reduce to a sum of scaled values).
template <class A>
A ref_fold_float(RedOpKind k, const std::vector<A>& xs, int nranks) {
  A acc = xs[0];
  switch (k) {
    case RedOpKind::sum:
    case RedOpKind::premulsum:
    case RedOpKind::avg:
      for (std::size_t s = 1; s < xs.size(); ++s) acc = ref_add(acc, xs[s]);
      if (k == RedOpKind::avg) acc = ref_div(acc, static_cast<A>(nranks));
      break;
    case RedOpKind::prod:
      for (std::size_t s = 1; s < xs.size(); ++s) acc = ref_mul(acc, xs[s]);
      break;
    case RedOpKind::max:
      for (std::size_t s = 1; s < xs.size(); ++s) acc = xs[s] > acc ? xs[s] : acc;
      break;
    case RedOpKind::min:
      for (std::size_t s = 1; s < xs.size(); ++s) acc = xs[s] < acc ? xs[s] : acc;
      break;
  }
  return acc;
}

// Every operator but premulsum, as above.
template <class I>
I ref_fold_int(RedOpKind k, const std::vector<I>& xs, int nranks) {
  using W = std::conditional_t<std::is_signed_v<I>, std::int64_t, std::uint64_t>;
  std::uint64_t m = 0;  // modular sum or product, truncated at the end
  W best = xs[0];
  switch (k) {
    case RedOpKind::sum:
    case RedOpKind::premulsum:
    case RedOpKind::avg:
      for (I x : xs) m += static_cast<std::uint64_t>(static_cast<W>(x));
      break;
    case RedOpKind::prod:
      m = 1;
      for (I x : xs) m *= static_cast<std::uint64_t>(static_cast<W>(x));
      break;
    case RedOpKind::max:
      for (I x : xs) best = std::max<W>(best, x);
      return static_cast<I>(best);
    case RedOpKind::min:
      for (I x : xs) best = std::min<W>(best, x);
      return static_cast<I>(best);
  }
  const I wrapped = static_cast<I>(m);
  if (k == RedOpKind::avg) return static_cast<I>(static_cast<W>(wrapped) / static_cast<W>(nranks));
  return wrapped;
}

// ---- per-type test traits: random inputs and the reference for one element ----------------------

template <DataType T>
struct Case {
  using S = typename Elem<T>::storage;

  // Random values, never NaN or infinite; mostly moderate magnitudes, some extreme ones so that
  // subnormals, overflow and saturation are reached.
  static S random(std::mt19937_64& gen) {
    if constexpr (std::is_integral_v<S>) {
      return static_cast<S>(gen());
    } else if constexpr (std::is_floating_point_v<S>) {
      const bool wide = gen() % 10 == 0;
      const int lo = wide ? std::numeric_limits<S>::min_exponent - 30 : -6;
      const int hi = wide ? std::numeric_limits<S>::max_exponent - 2 : 6;
      const int e = lo + static_cast<int>(gen() % static_cast<std::uint64_t>(hi - lo + 1));
      const S m = static_cast<S>(1) + static_cast<S>(gen() % (1u << 20)) / static_cast<S>(1u << 20);
      return std::ldexp(m, e) * ((gen() & 1) ? S(-1) : S(1));
    } else {
      for (;;) {
        S v{static_cast<decltype(S::bits)>(gen())};
        if (std::isfinite(to_float(v))) return v;
      }
    }
  }

  // PreMulSum's contribution of a rank whose scalar is s: s * x rounded to the element type once.
  static S scaled(S s, S x) {
    if constexpr (std::is_integral_v<S>) {
      using W = std::conditional_t<std::is_signed_v<S>, std::int64_t, std::uint64_t>;
      return static_cast<S>(static_cast<std::uint64_t>(static_cast<W>(s)) * static_cast<std::uint64_t>(static_cast<W>(x)));
    } else if constexpr (std::is_floating_point_v<S>) {
      const S r = ref_mul(s, x);
      return std::isnan(r) ? canonical_nan() : r;
    } else {
      return from_float<S>(ref_mul(to_float(s), to_float(x)));
    }
  }

  // The reduction of xs, source s being rank s's input (premulsum: scaled by scalars[s]).
  static S reference(RedOpKind k, const std::vector<S>& xs, const std::vector<S>& scalars, int nranks) {
    std::vector<S> ys = xs;
    if (k == RedOpKind::premulsum)
      for (std::size_t s = 0; s < ys.size(); ++s) ys[s] = scaled(scalars[s], xs[s]);
    if constexpr (std::is_integral_v<S>) {
      return ref_fold_int<S>(k, ys, nranks);
    } else if constexpr (std::is_floating_point_v<S>) {
      const S r = ref_fold_float<S>(k, ys, nranks);
      return std::isnan(r) ? canonical_nan() : r;
    } else {
      std::vector<float> wide;
      for (S y : ys) wide.push_back(to_float(y));
      return from_float<S>(ref_fold_float<float>(k, wide, nranks));
    }
  }

  static S canonical_nan() {
    if constexpr (std::is_same_v<S, float>) return bits_as_float(0x7FFFFFFFu);
    if constexpr (std::is_same_v<S, double>) return bits_as_double(0x7FFFFFFFFFFFFFFFull);
    return S{};
  }
};

// Inputs, expected output and a poisoned output buffer for one (type, op, nsrc, count). Source s
// is rank s's input; for premulsum each rank has a scalar of its own (ops[s]), and `folded` holds
// the sources as their producers hand them to the fold (scaled by scale_host).
template <DataType T>
struct Problem {
  using S = typename Elem<T>::storage;
  std::vector<std::vector<S>> src;
  std::vector<S> scalars;           // rank s's PreMulSum scalar, never zero
  std::vector<ReduceOp> ops;        // rank s's operator (premulsum: with its scalar's bits)
  ReduceOp op;                      // the consumer's operator (premulsum: with another scalar of its own)
  std::vector<std::vector<S>> folded;
  std::vector<const void*> ptrs;    // into folded
  std::vector<S> expected;

  Problem(RedOpKind k, int nsrc, std::size_t count, int nranks, std::mt19937_64& gen)
      : src(static_cast<std::size_t>(nsrc), std::vector<S>(count)) {
    for (auto& v : src) {
      for (auto& x : v) x = Case<T>::random(gen);
    }
    auto nonzero = [&] {
      S v;
      do {
        v = Case<T>::random(gen);
      } while (bits_of(v) == 0);
      return v;
    };
    for (int s = 0; s < nsrc; ++s) scalars.push_back(nonzero());
    op.kind = k;
    op.scalar_bits = bits_of(nonzero());
    op.nranks = nranks;
    for (int s = 0; s < nsrc; ++s) {
      ReduceOp mine = op;
      mine.scalar_bits = bits_of(scalars[static_cast<std::size_t>(s)]);
      ops.push_back(mine);
    }
    folded = src;
    for (int s = 0; s < nsrc; ++s) {
      scale_host(T, ops[static_cast<std::size_t>(s)], folded[static_cast<std::size_t>(s)].data(),
                 src[static_cast<std::size_t>(s)].data(), count);
    }
    for (auto& v : folded) ptrs.push_back(v.data());
    expected.resize(count);
    std::vector<S> xs(static_cast<std::size_t>(nsrc));
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t s = 0; s < src.size(); ++s) xs[s] = src[s][i];
      expected[i] = Case<T>::reference(k, xs, scalars, nranks);
    }
  }
};

// Index of the first element whose bits differ, or -1.
template <class S>
long first_mismatch(const S* got, const std::vector<S>& want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(S)) != 0) return static_cast<long>(i);
  }
  return -1;
}

template <class S>
std::vector<S> poisoned(std::size_t n) {
  std::vector<S> v(n);
  std::memset(static_cast<void*>(v.data()), kPoison, n * sizeof(S));
  return v;
}

template <class S>
bool still_poisoned(const S* p, std::size_t n) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return std::all_of(b, b + n * sizeof(S), [](unsigned char c) { return c == kPoison; });
}

}  // namespace

TEMPLATE_TEST_CASE("reduce_host matches the reference for every op and 1..8 sources", "[reduce]",
                   Tag<DataType::int8>, Tag<DataType::uint8>, Tag<DataType::int32>,
                   Tag<DataType::uint32>, Tag<DataType::int64>, Tag<DataType::uint64>,
                   Tag<DataType::f16>, Tag<DataType::f32>, Tag<DataType::f64>,
                   Tag<DataType::bf16>, Tag<DataType::f8e4m3>, Tag<DataType::f8e5m2>) {
  constexpr DataType T = TestType::value;
  using S = typename Elem<T>::storage;
  std::mt19937_64 gen(1000 + static_cast<int>(T));
  constexpr std::size_t kTail = 8;

  for (RedOpKind k : kOps) {
    for (int nsrc = 1; nsrc <= 8; ++nsrc) {
      const std::size_t count = 2500 + static_cast<std::size_t>(nsrc) * 7;  // crosses host blocks
      const int nranks = (nsrc % 2 == 0) ? nsrc : nsrc + 5;  // avg divides by nranks, not nsrc
      INFO("type " << name_of(T) << " op " << name_of(k) << " nsrc " << nsrc);
      Problem<T> p(k, nsrc, count, nranks, gen);

      auto out = poisoned<S>(count + kTail);
      reduce_host(T, p.op, out.data(), p.ptrs.data(), nsrc, count);
      const long bad = first_mismatch(out.data(), p.expected);
      INFO("first mismatch at " << bad);
      REQUIRE(bad == -1);
      REQUIRE(still_poisoned(out.data() + count, kTail));

      // In place: the output is one of the sources (first and last).
      for (int alias : {0, nsrc - 1}) {
        INFO("in place on source " << alias);
        std::vector<S> buf = p.folded[static_cast<std::size_t>(alias)];
        std::vector<const void*> ptrs = p.ptrs;
        ptrs[static_cast<std::size_t>(alias)] = buf.data();
        reduce_host(T, p.op, buf.data(), ptrs.data(), nsrc, count);
        REQUIRE(first_mismatch(buf.data(), p.expected) == -1);
      }

      // The producer step: PreMulSum scales each element by the rank's own scalar, also read
      // through a pointer (the immediate bits must then be ignored) and in place; every other
      // operator copies.
      for (int s = 0; s < nsrc; ++s) {
        INFO("rank " << s << "'s contribution");
        const auto& x = p.src[static_cast<std::size_t>(s)];
        std::vector<S> want(count);
        for (std::size_t i = 0; i < count; ++i)
          want[i] = k == RedOpKind::premulsum ? Case<T>::scaled(p.scalars[static_cast<std::size_t>(s)], x[i]) : x[i];
        REQUIRE(first_mismatch(p.folded[static_cast<std::size_t>(s)].data(), want) == -1);
        ReduceOp by_ptr = p.ops[static_cast<std::size_t>(s)];
        by_ptr.scalar_bits = p.op.scalar_bits;
        by_ptr.scalar_ptr = &p.scalars[static_cast<std::size_t>(s)];
        auto scaled = poisoned<S>(count + kTail);
        scale_host(T, by_ptr, scaled.data(), x.data(), count);
        REQUIRE(first_mismatch(scaled.data(), want) == -1);
        REQUIRE(still_poisoned(scaled.data() + count, kTail));
        std::vector<S> own = x;
        scale_host(T, p.ops[static_cast<std::size_t>(s)], own.data(), own.data(), count);
        REQUIRE(first_mismatch(own.data(), want) == -1);
      }
    }
  }
}

TEMPLATE_TEST_CASE("reduce_range computes exactly its range", "[reduce]", Tag<DataType::f32>,
                   Tag<DataType::bf16>, Tag<DataType::int8>, Tag<DataType::f64>) {
  constexpr DataType T = TestType::value;
  constexpr RedOpKind K = RedOpKind::sum;
  using S = typename Elem<T>::storage;
  std::mt19937_64 gen(42);
  const std::size_t count = 3001;
  Problem<T> p(K, 5, count, 5, gen);

  // Pieces of uneven sizes reassemble the whole.
  auto out = poisoned<S>(count);
  const std::size_t cuts[] = {0, 1, 700, 2049, 2050, count};
  for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
    reduce_range<T, K>(out.data(), p.ptrs.data(), 5, cuts[c], cuts[c + 1], p.op);
  }
  REQUIRE(first_mismatch(out.data(), p.expected) == -1);

  // One piece leaves the rest untouched.
  auto part = poisoned<S>(count);
  reduce_range<T, K>(part.data(), p.ptrs.data(), 5, 100, 1300, p.op);
  REQUIRE(still_poisoned(part.data(), 100));
  REQUIRE(still_poisoned(part.data() + 1300, count - 1300));
  REQUIRE(std::memcmp(part.data() + 100, p.expected.data() + 100, 1200 * sizeof(S)) == 0);

  // The per-element entry the GPU kernels use gives the same bits.
  const Reducer<T, K> r(p.op);
  for (std::size_t i = 0; i < count; i += 97) {
    const S v = r.element(p.ptrs.data(), 5, i);
    REQUIRE(std::memcmp(&v, &p.expected[i], sizeof(S)) == 0);
  }

  // No sources: nothing is written.
  auto none = poisoned<S>(16);
  reduce_range<T, K>(none.data(), p.ptrs.data(), 0, 0, 16, p.op);
  REQUIRE(still_poisoned(none.data(), 16));
}

namespace {

template <DataType T>
std::vector<typename Elem<T>::storage> run(
    RedOpKind k, std::vector<std::vector<typename Elem<T>::storage>> srcs, int nranks,
    std::uint64_t scalar_bits = 0) {
  std::vector<const void*> ptrs;
  for (auto& v : srcs) ptrs.push_back(v.data());
  ReduceOp op;
  op.kind = k;
  op.nranks = nranks;
  op.scalar_bits = scalar_bits;
  std::vector<typename Elem<T>::storage> out(srcs[0].size());
  reduce_host(T, op, out.data(), ptrs.data(), static_cast<int>(srcs.size()), out.size());
  return out;
}

}  // namespace

TEST_CASE("integer avg wraps the sum, then truncates toward zero", "[reduce]") {
  CHECK(run<DataType::int32>(RedOpKind::avg, {{-7, 7, -1}, {0, 0, 0}}, 2) ==
        std::vector<std::int32_t>{-3, 3, 0});
  CHECK(run<DataType::int8>(RedOpKind::avg, {{-100}, {-20}}, 3) == std::vector<std::int8_t>{-40});
  CHECK(run<DataType::uint8>(RedOpKind::avg, {{200}, {100}}, 2) == std::vector<std::uint8_t>{22});
  CHECK(run<DataType::int64>(RedOpKind::avg, {{-9}}, 4) == std::vector<std::int64_t>{-2});
  CHECK(run<DataType::uint32>(RedOpKind::avg, {{1000}}, 300) == std::vector<std::uint32_t>{3});
  CHECK(run<DataType::int8>(RedOpKind::avg, {{120}}, 300) == std::vector<std::int8_t>{0});
  CHECK(run<DataType::int8>(RedOpKind::avg, {{-120}}, 0) == std::vector<std::int8_t>{-120});
  CHECK(run<DataType::uint64>(RedOpKind::avg, {{~0ull}, {3}}, 2) == std::vector<std::uint64_t>{1});
}

TEST_CASE("integer arithmetic wraps; max and min are signed for signed types", "[reduce]") {
  CHECK(run<DataType::int8>(RedOpKind::sum, {{127}, {1}}, 2) == std::vector<std::int8_t>{-128});
  CHECK(run<DataType::int32>(RedOpKind::prod, {{65536}, {65536}}, 2) ==
        std::vector<std::int32_t>{0});
  CHECK(run<DataType::int32>(RedOpKind::max, {{-5}, {3}}, 2) == std::vector<std::int32_t>{3});
  CHECK(run<DataType::uint32>(RedOpKind::max, {{0xFFFFFFFFu}, {3}}, 2) ==
        std::vector<std::uint32_t>{0xFFFFFFFFu});
  CHECK(run<DataType::int64>(RedOpKind::min, {{-5}, {3}}, 2) == std::vector<std::int64_t>{-5});
}

TEST_CASE("floating avg divides the fp32 or fp64 sum by nranks", "[reduce]") {
  CHECK(run<DataType::f32>(RedOpKind::avg, {{1.0f}, {2.0f}}, 2) == std::vector<float>{1.5f});
  CHECK(run<DataType::f64>(RedOpKind::avg, {{1.0}, {2.0}, {4.0}}, 3) ==
        std::vector<double>{7.0 / 3.0});
  const auto b = run<DataType::bf16>(RedOpKind::avg,
                                     {{from_float<bf16_t>(1)}, {from_float<bf16_t>(2)},
                                      {from_float<bf16_t>(4)}},
                                     3);
  CHECK(b[0].bits == from_float<bf16_t>(7.0f / 3.0f).bits);
}

namespace {

// One PreMulSum as the datapaths compute it: rank r's input xs[r] scaled by its scalar bits
// scalars[r] (scale_host), then the scaled contributions summed in rank order (reduce_host).
template <DataType T>
typename Elem<T>::storage premulsum(std::vector<typename Elem<T>::storage> xs, const std::vector<std::uint64_t>& scalars) {
  std::vector<const void*> ptrs;
  for (std::size_t r = 0; r < xs.size(); ++r) {
    ReduceOp mine{RedOpKind::premulsum, scalars[r], nullptr, static_cast<int>(xs.size())};
    scale_host(T, mine, &xs[r], &xs[r], 1);
    ptrs.push_back(&xs[r]);
  }
  typename Elem<T>::storage out{};
  reduce_host(T, ReduceOp{RedOpKind::premulsum, 0, nullptr, static_cast<int>(xs.size())}, &out, ptrs.data(),
              static_cast<int>(xs.size()), 1);
  return out;
}

}  // namespace

TEST_CASE("premulsum multiplies and adds separately", "[reduce]") {
  // s*x0 = 1 + 2^-22 + 2^-46 rounds to 1 + 2^-22; s*x1 rounds to -(1 + 2^-22): the sum is exactly
  // zero. A fused multiply-add would give -2^-46.
  const float s = 1.0f + 0x1p-23f;
  std::uint64_t sbits = 0;
  std::memcpy(&sbits, &s, sizeof s);
  const float r = premulsum<DataType::f32>({s, -s}, {sbits, sbits});
  CHECK(r == 0.0f);
  CHECK(!std::signbit(r));
}

TEST_CASE("premulsum scales each rank's input by that rank's own scalar", "[reduce]") {
  // 3*1 + 5*10 + (-2)*100: every rank's scalar applies to its own input only.
  CHECK(premulsum<DataType::int32>({1, 10, 100}, {3, 5, static_cast<std::uint32_t>(-2)}) == -147);
  // The integer product wraps in the element type: -128 * -1 is -128 in int8.
  CHECK(premulsum<DataType::int8>({-128}, {0xFF}) == -128);
  CHECK(premulsum<DataType::uint8>({200, 1}, {2, 1}) == 145);  // 400 mod 256, plus 1
  const auto half = [](float v) { return from_float<f16_t>(v).bits; };
  CHECK(premulsum<DataType::f16>({from_float<f16_t>(1.5f), from_float<f16_t>(-0.25f)}, {half(2.0f), half(-4.0f)}).bits ==
        half(4.0f));
}

TEST_CASE("premulsum rounds each scaled contribution to the element type before the sum", "[reduce]") {
  // fp16: (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 is exact in fp32 and rounds to 1 + 2^-9 in fp16 (as
  // NCCL's __hmul does); the second rank contributes -(1 + 2^-9). The sum is exactly zero; summing
  // the unrounded products in fp32 would leave 2^-20.
  const f16_t x0{0x3C01}, x1{0xBC02};
  const f16_t r = premulsum<DataType::f16>({x0, x1}, {0x3C01, 0x3C00});
  CHECK(r.bits == 0x0000);
  // bf16: 1.5 * (1 + 2^-7) = 1.5 + 1.5 * 2^-7 rounds to 1.5 + 2^-6 (ties to even); with a second
  // contribution of exactly -1.5 the sum is 2^-6.
  const bf16_t y0{from_float<bf16_t>(1.0f + 0x1p-7f)}, y1{from_float<bf16_t>(-1.5f)};
  const bf16_t b = premulsum<DataType::bf16>({y0, y1}, {from_float<bf16_t>(1.5f).bits, from_float<bf16_t>(1.0f).bits});
  CHECK(to_float(b) == 0x1p-6f);
  // fp8 e4m3 saturates the scaled contribution at 448 before the sum: 448 * 2 -> 448, plus -448.
  const f8e4m3_t e = premulsum<DataType::f8e4m3>({from_float<f8e4m3_t>(448.0f), from_float<f8e4m3_t>(-448.0f)},
                                                 {from_float<f8e4m3_t>(2.0f).bits, from_float<f8e4m3_t>(1.0f).bits});
  CHECK(to_float(e) == 0.0f);
}

TEST_CASE("NaN results are stored as the canonical quiet NaN", "[reduce]") {
  const float payload_nan = bits_as_float(0x7FC01234u);
  const auto sum = run<DataType::f32>(RedOpKind::sum, {{payload_nan}, {1.0f}}, 2);
  CHECK(float_as_bits(sum[0]) == 0x7FFFFFFFu);
  const auto one = run<DataType::f32>(RedOpKind::sum, {{bits_as_float(0xFF800001u)}}, 1);
  CHECK(float_as_bits(one[0]) == 0x7FFFFFFFu);
  const double payload_dnan = bits_as_double(0xFFF8000000000042ull);
  const auto dsum = run<DataType::f64>(RedOpKind::sum, {{payload_dnan}, {1.0}}, 2);
  CHECK(double_as_bits(dsum[0]) == 0x7FFFFFFFFFFFFFFFull);
  const auto h = run<DataType::f16>(RedOpKind::sum, {{f16_t{0xFE01}}, {f16_t{0x3C00}}}, 2);
  CHECK(h[0].bits == 0x7FFF);
  const auto e = run<DataType::f8e4m3>(RedOpKind::prod, {{f8e4m3_t{0xFF}}, {f8e4m3_t{0x38}}}, 2);
  CHECK(e[0].bits == 0x7F);
  // max and min keep a NaN already in the accumulator and skip a later one.
  CHECK(float_as_bits(run<DataType::f32>(RedOpKind::max, {{payload_nan}, {1.0f}}, 2)[0]) ==
        0x7FFFFFFFu);
  CHECK(run<DataType::f32>(RedOpKind::max, {{1.0f}, {payload_nan}}, 2)[0] == 1.0f);
  CHECK(run<DataType::f32>(RedOpKind::min, {{1.0f}, {payload_nan}}, 2)[0] == 1.0f);
}

TEST_CASE("fp8 sums saturate, fp16 sums overflow to infinity", "[reduce]") {
  const f8e4m3_t big = from_float<f8e4m3_t>(448.0f);
  CHECK(run<DataType::f8e4m3>(RedOpKind::sum, {{big}, {big}}, 2)[0].bits == 0x7E);
  const f8e5m2_t big5 = from_float<f8e5m2_t>(-57344.0f);
  CHECK(run<DataType::f8e5m2>(RedOpKind::sum, {{big5}, {big5}}, 2)[0].bits == 0xFB);
  const f16_t big16 = from_float<f16_t>(65504.0f);
  CHECK(run<DataType::f16>(RedOpKind::sum, {{big16}, {big16}}, 2)[0].bits == 0x7C00);
  // fp32 accumulation: 65504 + 65504 - 65504 comes back to 65504 instead of staying infinite.
  const f16_t neg16 = from_float<f16_t>(-65504.0f);
  CHECK(run<DataType::f16>(RedOpKind::sum, {{big16}, {big16}, {neg16}}, 3)[0].bits == 0x7BFF);
}
