#include "element.h"

namespace perf {
namespace {

struct OpName { Op op; const char* name; };
constexpr OpName kOpNames[] = {
    {Op::sum, "sum"}, {Op::prod, "prod"}, {Op::max, "max"}, {Op::min, "min"},
    {Op::avg, "avg"}, {Op::premulsum, "premulsum"}, {Op::none, "none"}};

struct TypeName { ncclDataType_t type; const char* name; };
// The first name of each type is the one printed (nccl-tests' spelling); the others are accepted.
constexpr TypeName kTypeNames[] = {
    {ncclInt8, "int8"}, {ncclUint8, "uint8"}, {ncclInt32, "int32"}, {ncclUint32, "uint32"},
    {ncclInt64, "int64"}, {ncclUint64, "uint64"}, {ncclFloat16, "half"}, {ncclFloat32, "float"},
    {ncclFloat64, "double"}, {ncclBfloat16, "bfloat16"}, {ncclFloat8e4m3, "f8e4m3"},
    {ncclFloat8e5m2, "f8e5m2"},
    {ncclInt8, "char"}, {ncclInt32, "int"}, {ncclFloat16, "fp16"}, {ncclFloat16, "float16"},
    {ncclFloat32, "fp32"}, {ncclFloat32, "float32"}, {ncclFloat64, "fp64"},
    {ncclFloat64, "float64"}, {ncclBfloat16, "bf16"}, {ncclFloat8e4m3, "fp8e4m3"},
    {ncclFloat8e5m2, "fp8e5m2"}};

__half to_half(std::uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half(raw);
}

}  // namespace

const char* name_of(Op op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  return "?";
}

std::optional<Op> parse_op(std::string_view name) {
  for (const auto& entry : kOpNames) {
    if (name == entry.name && entry.op != Op::none) return entry.op;
  }
  if (name == "mulsum") return Op::premulsum;  // nccl-tests' name for it
  return std::nullopt;
}

const char* name_of(ncclDataType_t type) {
  for (const auto& entry : kTypeNames) {
    if (entry.type == type) return entry.name;
  }
  return "?";
}

std::optional<ncclDataType_t> parse_type(std::string_view name) {
  for (const auto& entry : kTypeNames) {
    if (name == entry.name) return entry.type;
  }
  return std::nullopt;
}

std::size_t size_of(ncclDataType_t type) {
  return visit_type(type, [](auto tag) { return sizeof(typename decltype(tag)::type); });
}

float to_float(Half v) { return __half2float(to_half(v.bits)); }

float to_float(BFloat16 v) {
  __nv_bfloat16_raw raw;
  raw.x = v.bits;
  return __bfloat162float(__nv_bfloat16(raw));
}

float to_float(F8E4M3 v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, __NV_E4M3)));
}

float to_float(F8E5M2 v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v.bits, __NV_E5M2)));
}

template <> Half from_float<Half>(float v) {
  __half_raw raw = __float2half_rn(v);
  return Half{raw.x};
}

template <> BFloat16 from_float<BFloat16>(float v) {
  __nv_bfloat16_raw raw = __float2bfloat16_rn(v);
  return BFloat16{raw.x};
}

template <> F8E4M3 from_float<F8E4M3>(float v) {
  return F8E4M3{__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)};
}

template <> F8E5M2 from_float<F8E5M2>(float v) {
  return F8E5M2{__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2)};
}

}  // namespace perf
