// The narrow floating-point conversions of core/numeric.h against a reference built from each
// format's parameters (values by ldexp, rounding by nearest-neighbour search in double), and, where
// the CUDA toolkit's headers are present, against its host-side conversions bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/types.h"
#include "test/catch.h"

#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>) && __has_include(<cuda_fp8.h>)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define PURLIN_TEST_CUDA_CONVERSIONS 1
#endif

namespace {

using namespace purlin;

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A narrow format by its parameters, with the library's conversions to test.
struct Format {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  bool saturates;         // fp8: saturate to the largest finite value, no infinity produced
  bool e4m3_nan;          // only S.1111.111 is NaN (no infinities)
  std::uint32_t nan_out;  // what float -> narrow gives for a NaN
  float (*widen)(std::uint32_t);
  std::uint32_t (*narrow)(float);

  int width() const { return 1 + exp_bits + man_bits; }
  std::uint32_t ncodes() const { return 1u << width(); }
  std::uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  std::uint32_t exp_field(std::uint32_t c) const {
    return (c >> man_bits) & ((1u << exp_bits) - 1);
  }
  std::uint32_t man_field(std::uint32_t c) const { return c & ((1u << man_bits) - 1); }
  bool is_nan(std::uint32_t c) const {
    const std::uint32_t emax = (1u << exp_bits) - 1;
    if (e4m3_nan) return exp_field(c) == emax && man_field(c) == (1u << man_bits) - 1;
    return exp_field(c) == emax && man_field(c) != 0;
  }
  bool is_inf(std::uint32_t c) const {
    return !e4m3_nan && exp_field(c) == (1u << exp_bits) - 1 && man_field(c) == 0;
  }
  // The value of a code, from the definition of the format.
  double value(std::uint32_t c) const {
    const double s = (c & sign_bit()) ? -1.0 : 1.0;
    if (is_nan(c)) return std::numeric_limits<double>::quiet_NaN();
    if (is_inf(c)) return s * std::numeric_limits<double>::infinity();
    const int e = static_cast<int>(exp_field(c));
    const double m = man_field(c);
    if (e == 0) return s * std::ldexp(m, 1 - bias - man_bits);
    return s * std::ldexp(m + std::ldexp(1.0, man_bits), e - bias - man_bits);
  }
};

const Format kF16{"f16", 5, 10, 15, false, false, 0x7FFF,
                  [](std::uint32_t c) { return f16_to_float(static_cast<std::uint16_t>(c)); },
                  [](float f) -> std::uint32_t { return float_to_f16(f); }};
const Format kBF16{"bf16", 8, 7, 127, false, false, 0x7FFF,
                   [](std::uint32_t c) { return bf16_to_float(static_cast<std::uint16_t>(c)); },
                   [](float f) -> std::uint32_t { return float_to_bf16(f); }};
const Format kE4M3{"e4m3", 4, 3, 7, true, true, 0x7F,
                   [](std::uint32_t c) { return f8e4m3_to_float(static_cast<std::uint8_t>(c)); },
                   [](float f) -> std::uint32_t { return float_to_f8e4m3(f); }};
const Format kE5M2{"e5m2", 5, 2, 15, true, false, 0x7F,
                   [](std::uint32_t c) { return f8e5m2_to_float(static_cast<std::uint8_t>(c)); },
                   [](float f) -> std::uint32_t { return float_to_f8e5m2(f); }};
const Format* const kFormats[] = {&kF16, &kBF16, &kE4M3, &kE5M2};

// Rounding reference: the non-negative representable values in increasing order (magnitude code
// k has value vals[k]); IEEE formats get one more entry, the infinity code, standing for the
// first power of two past the largest finite value, so that overflow rounds as IEEE says.
struct Rounder {
  const Format& f;
  std::vector<double> vals;

  explicit Rounder(const Format& fmt) : f(fmt) {
    for (std::uint32_t c = 0; c < f.sign_bit(); ++c) {
      if (f.is_nan(c)) break;
      if (f.is_inf(c)) {
        if (!f.saturates) {
          vals.push_back(std::ldexp(1.0, static_cast<int>((1u << f.exp_bits) - 1) - f.bias));
        }
        break;
      }
      vals.push_back(f.value(c));
    }
  }

  std::uint32_t round(float x) const {
    if (std::isnan(x)) return f.nan_out;
    const std::uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= vals.back()) return sign | static_cast<std::uint32_t>(vals.size() - 1);
    const auto hi = std::upper_bound(vals.begin(), vals.end(), a);
    const auto k = static_cast<std::uint32_t>(hi - vals.begin() - 1);
    // Both differences are exact: a is within a factor of two of its neighbours (or vals[k] is 0).
    const double below = a - vals[k];
    const double above = vals[k + 1] - a;
    std::uint32_t code = k;
    if (above < below || (above == below && (k & 1u))) code = k + 1;
    return sign | code;
  }
};

std::uint32_t expected_nan_widening(const Format& f, std::uint32_t c) {
  // bf16 widens its bits as they are; the others give the canonical float NaN.
  return &f == &kBF16 ? (c << 16) : 0x7FFFFFFFu;
}

}  // namespace

TEST_CASE("every narrow code widens to its exact value", "[numeric]") {
  for (const Format* f : kFormats) {
    INFO(f->name);
    for (std::uint32_t c = 0; c < f->ncodes(); ++c) {
      INFO("code " << c);
      const float w = f->widen(c);
      if (f->is_nan(c)) {
        REQUIRE(std::isnan(w));
        REQUIRE(bits(w) == expected_nan_widening(*f, c));
        continue;
      }
      REQUIRE(static_cast<double>(w) == f->value(c));
      REQUIRE(std::signbit(w) == ((c & f->sign_bit()) != 0));
    }
  }
}

TEST_CASE("every narrow code survives the round trip through float", "[numeric]") {
  for (const Format* f : kFormats) {
    INFO(f->name);
    for (std::uint32_t c = 0; c < f->ncodes(); ++c) {
      INFO("code " << c);
      const std::uint32_t back = f->narrow(f->widen(c));
      if (f->is_nan(c)) {
        REQUIRE(back == f->nan_out);
      } else if (f->saturates && f->is_inf(c)) {
        REQUIRE(back == ((c & f->sign_bit()) | 0x7Bu));  // e5m2 infinity -> +-57344
      } else {
        REQUIRE(back == c);
      }
    }
  }
}

TEST_CASE("float to narrow rounds to nearest even at every boundary", "[numeric]") {
  for (const Format* f : kFormats) {
    INFO(f->name);
    const Rounder r(*f);
    std::vector<float> probes;
    for (std::size_t k = 0; k + 1 < r.vals.size(); ++k) {
      const double lo = r.vals[k];
      const double hi = r.vals[k + 1];
      const double mid = (lo + hi) / 2;  // exact in double
      const float inf = std::numeric_limits<float>::infinity();
      const float flo = static_cast<float>(lo);
      probes.push_back(flo);
      probes.push_back(std::nextafter(flo, inf));
      const float fmid = static_cast<float>(mid);
      probes.push_back(fmid);
      probes.push_back(std::nextafter(fmid, 0.0f));
      probes.push_back(std::nextafter(fmid, inf));
      if (hi <= std::numeric_limits<float>::max()) {
        probes.push_back(std::nextafter(static_cast<float>(hi), 0.0f));
      }
    }
    probes.push_back(std::numeric_limits<float>::max());
    probes.push_back(std::numeric_limits<float>::infinity());
    probes.push_back(std::numeric_limits<float>::denorm_min());
    probes.push_back(std::numeric_limits<float>::min());
    for (float p : probes) {
      for (float x : {p, -p}) {
        INFO("x = " << x << " bits " << bits(x));
        REQUIRE(f->narrow(x) == r.round(x));
      }
    }
  }
}

TEST_CASE("float to narrow matches the reference on random floats", "[numeric]") {
  std::mt19937 gen(12345);
  for (const Format* f : kFormats) {
    INFO(f->name);
    const Rounder r(*f);
    // Exponents from below the smallest subnormal to past the largest value of the format.
    const int emin = 1 - f->bias - f->man_bits - 3;
    const int emax = std::min(127, (1 << f->exp_bits) - f->bias + 1);
    std::uniform_int_distribution<int> exp_dist(emin, emax);
    for (int i = 0; i < 200000; ++i) {
      const float any = from_bits(static_cast<std::uint32_t>(gen()));
      const float ranged = std::ldexp(1.0f + static_cast<float>(gen() & 0x7FFFFF) * 0x1p-23f,
                                      exp_dist(gen)) * ((gen() & 1) ? -1.0f : 1.0f);
      for (float x : {any, ranged}) {
        INFO("x bits " << bits(x));
        REQUIRE(f->narrow(x) == r.round(x));
      }
    }
  }
}

TEST_CASE("hand-picked conversions", "[numeric]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  // fp16
  CHECK(float_to_f16(1.0f) == 0x3C00);
  CHECK(float_to_f16(-0.0f) == 0x8000);
  CHECK(float_to_f16(65504.0f) == 0x7BFF);
  CHECK(float_to_f16(std::nextafter(65520.0f, 0.0f)) == 0x7BFF);
  CHECK(float_to_f16(65520.0f) == 0x7C00);  // halfway to 2^16: ties to even, which is infinity
  CHECK(float_to_f16(1e6f) == 0x7C00);
  CHECK(float_to_f16(-inf) == 0xFC00);
  CHECK(float_to_f16(nan) == 0x7FFF);
  CHECK(float_to_f16(-nan) == 0x7FFF);
  CHECK(float_to_f16(from_bits(0x7F800001u)) == 0x7FFF);  // signalling NaN stays a NaN
  CHECK(float_to_f16(0x1p-24f) == 0x0001);
  CHECK(float_to_f16(0x1p-25f) == 0x0000);
  CHECK(float_to_f16(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(float_to_f16(3 * 0x1p-25f) == 0x0002);
  CHECK(float_to_f16(0x1.ffcp-15f) == 0x0400);  // largest subnormal + half ulp: ties up
  CHECK(float_to_f16(0x1.ff8p-15f) == 0x03FF);
  CHECK(float_to_f16(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(float_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(float_to_f16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f16_to_float(0x0001) == 0x1p-24f);
  CHECK(f16_to_float(0x7BFF) == 65504.0f);
  CHECK(f16_to_float(0xFC00) == -inf);

  // bf16
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::max()) == 0xFF80);
  CHECK(float_to_bf16(from_bits(0x00008000u)) == 0x0000);
  CHECK(float_to_bf16(from_bits(0x00018000u)) == 0x0002);
  CHECK(float_to_bf16(from_bits(0x80008001u)) == 0x8001);
  CHECK(float_to_bf16(nan) == 0x7FFF);
  CHECK(float_to_bf16(inf) == 0x7F80);
  CHECK(bits(bf16_to_float(0x0001)) == 0x00010000u);

  // fp8 e4m3
  CHECK(float_to_f8e4m3(448.0f) == 0x7E);
  CHECK(float_to_f8e4m3(464.0f) == 0x7E);
  CHECK(float_to_f8e4m3(1000.0f) == 0x7E);
  CHECK(float_to_f8e4m3(inf) == 0x7E);
  CHECK(float_to_f8e4m3(-inf) == 0xFE);
  CHECK(float_to_f8e4m3(nan) == 0x7F);
  CHECK(float_to_f8e4m3(240.0f) == 0x77);
  CHECK(float_to_f8e4m3(0x1p-9f) == 0x01);
  CHECK(float_to_f8e4m3(0x1p-10f) == 0x00);
  CHECK(float_to_f8e4m3(-0x1p-10f) == 0x80);
  CHECK(float_to_f8e4m3(3 * 0x1p-10f) == 0x02);
  CHECK(float_to_f8e4m3(0x1.ep-7f) == 0x08);  // 7.5 subnormal units: ties to 8, the smallest normal
  CHECK(f8e4m3_to_float(0x7E) == 448.0f);
  CHECK(f8e4m3_to_float(0x01) == 0x1p-9f);
  CHECK(std::isnan(f8e4m3_to_float(0xFF)));
  CHECK(f8e4m3_to_float(0xF8) == -256.0f);  // S.1111.000 is a number, not infinity

  // fp8 e5m2
  CHECK(float_to_f8e5m2(57344.0f) == 0x7B);
  CHECK(float_to_f8e5m2(61440.0f) == 0x7B);
  CHECK(float_to_f8e5m2(inf) == 0x7B);
  CHECK(float_to_f8e5m2(-1e9f) == 0xFB);
  CHECK(float_to_f8e5m2(nan) == 0x7F);
  CHECK(float_to_f8e5m2(1.25f) == 0x3D);
  CHECK(float_to_f8e5m2(0x1p-16f) == 0x01);
  CHECK(float_to_f8e5m2(0x1p-17f) == 0x00);
  CHECK(float_to_f8e5m2(3 * 0x1p-17f) == 0x02);
  CHECK(f8e5m2_to_float(0x7B) == 57344.0f);
  CHECK(f8e5m2_to_float(0xFC) == -inf);
  CHECK(std::isnan(f8e5m2_to_float(0x7D)));

  // typed spellings
  CHECK(from_float<f16_t>(2.0f).bits == 0x4000);
  CHECK(to_float(bf16_t{0x4040}) == 3.0f);
  CHECK(from_float<f8e4m3_t>(-2.0f).bits == 0xC0);
  CHECK(to_float(f8e5m2_t{0x40}) == 2.0f);
}

TEST_CASE("names follow nccl-tests", "[numeric]") {
  CHECK(std::string(name_of(DataType::f16)) == "half");
  CHECK(std::string(name_of(DataType::bf16)) == "bfloat16");
  CHECK(std::string(name_of(DataType::f8e4m3)) == "f8e4m3");
  CHECK(std::string(name_of(DataType::uint64)) == "uint64");
  CHECK(std::string(name_of(RedOpKind::premulsum)) == "premulsum");
  CHECK(std::string(name_of(RedOpKind::avg)) == "avg");
  for (int t = 0; t < kNumDataTypes; ++t) {
    CHECK(std::string(name_of(static_cast<DataType>(t))) != "unknown");
  }
  CHECK(std::string(name_of(static_cast<DataType>(99))) == "unknown");
}

#if defined(PURLIN_TEST_CUDA_CONVERSIONS)

namespace {

std::uint32_t cuda_narrow(const Format& f, float x) {
  if (&f == &kF16) return __half_raw(__float2half_rn(x)).x;
  if (&f == &kBF16) return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
  if (&f == &kE4M3) return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
}

float cuda_widen(const Format& f, std::uint32_t c) {
  if (&f == &kF16) {
    __half_raw r;
    r.x = static_cast<unsigned short>(c);
    return __half2float(__half(r));
  }
  if (&f == &kBF16) {
    __nv_bfloat16_raw r;
    r.x = static_cast<unsigned short>(c);
    return __bfloat162float(__nv_bfloat16(r));
  }
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c),
                                               &f == &kE4M3 ? __NV_E4M3 : __NV_E5M2);
  return __half2float(__half(h));
}

}  // namespace

TEST_CASE("conversions agree with the CUDA toolkit bit for bit", "[numeric][cuda]") {
  for (const Format* f : kFormats) {
    INFO(f->name);
    for (std::uint32_t c = 0; c < f->ncodes(); ++c) {
      INFO("code " << c);
      REQUIRE(bits(f->widen(c)) == bits(cuda_widen(*f, c)));
    }
  }

  std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), from_bits(0xFFC00000u),
                           from_bits(0x7F800001u), from_bits(0xFFBFFFFFu),
                           std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::denorm_min(), 448.0f, 464.0f, 480.0f,
                           57344.0f, 61440.0f, 65504.0f, 65520.0f};
  std::mt19937 gen(777);
  std::uniform_int_distribution<int> exp_dist(-30, 20);  // the fp16 and fp8 ranges and a margin
  for (int i = 0; i < 1500000; ++i) {
    xs.push_back(from_bits(static_cast<std::uint32_t>(gen())));
    xs.push_back(std::ldexp(1.0f + static_cast<float>(gen() & 0x7FFFFF) * 0x1p-23f,
                            exp_dist(gen)) * ((gen() & 1) ? -1.0f : 1.0f));
  }
  for (const Format* f : kFormats) {
    INFO(f->name);
    std::size_t mismatches = 0;
    std::uint32_t first_bad = 0;
    for (float x : xs) {
      if (f->narrow(x) != cuda_narrow(*f, x)) {
        if (mismatches++ == 0) first_bad = bits(x);
      }
    }
    INFO("first mismatch at float bits " << first_bad);
    REQUIRE(mismatches == 0);
  }
}

#endif  // PURLIN_TEST_CUDA_CONVERSIONS
