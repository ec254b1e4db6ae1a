#include "core/numeric.h"

#include "core/types.h"

namespace purlin {

// The names nccl-tests prints.
const char* name_of(DataType t) {
  switch (t) {
    case DataType::int8: return "int8";
    case DataType::uint8: return "uint8";
    case DataType::int32: return "int32";
    case DataType::uint32: return "uint32";
    case DataType::int64: return "int64";
    case DataType::uint64: return "uint64";
    case DataType::f16: return "half";
    case DataType::f32: return "float";
    case DataType::f64: return "double";
    case DataType::bf16: return "bfloat16";
    case DataType::f8e4m3: return "f8e4m3";
    case DataType::f8e5m2: return "f8e5m2";
  }
  return "unknown";
}

const char* name_of(RedOpKind k) {
  switch (k) {
    case RedOpKind::sum: return "sum";
    case RedOpKind::prod: return "prod";
    case RedOpKind::max: return "max";
    case RedOpKind::min: return "min";
    case RedOpKind::avg: return "avg";
    case RedOpKind::premulsum: return "premulsum";
  }
  return "unknown";
}

}  // namespace purlin
