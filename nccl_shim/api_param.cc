// NCCL 2.30's parameter API (nccl_shim/nccl_next.h) over this library's own parameters: the
// environment variables its configuration reads (core/config.h's env_variables), each a string with
// the value read when the configuration was. Keys are the variables' full names; the NCCL_ ones are
// listed, the PURLIN_ ones too under NCCL_PARAM_DUMP_ALL (NCCL lists its private parameters so). A
// parameter has no integer type here: the typed getters answer a type mismatch, as NCCL does for a
// string parameter.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"
#include "nccl_shim/nccl_next.h"
#include "nccl_shim/shim.h"

using namespace purlin;
using namespace purlin::shim;

struct ncclParamHandle {
  EnvVariable variable;
};

namespace {

bool listed(const EnvVariable& v) { return v.name.rfind("NCCL_", 0) == 0 || config().param_dump_all; }

// The handles: one per variable, made once and never freed (NCCL owns its handles too).
const std::vector<ncclParamHandle*>& handles() {
  static const std::vector<ncclParamHandle*> all = [] {
    std::vector<ncclParamHandle*> v;
    for (EnvVariable& e : env_variables()) v.push_back(new ncclParamHandle{std::move(e)});
    return v;
  }();
  return all;
}

ncclParamHandle* find(const char* key) {
  for (ncclParamHandle* h : handles())
    if (h->variable.name == key) return h;
  log::info(log::kEnv, "PARAM: key \"{}\" not found in registry", key);
  return nullptr;
}

ncclResult_t bad(const std::string& message) { return fail(nullptr, ncclInvalidArgument, message); }

template <class T>
ncclResult_t typed(const char* fn, ncclParamHandle_t h, T* out) {
  if (h == nullptr || out == nullptr) return bad(fmt::format("{}: handle or out is NULL", fn));
  log::info(log::kEnv, "PARAM: type mismatch for key \"{}\" (a string parameter)", h->variable.name);
  return ncclInvalidArgument;
}

}  // namespace

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key) {
  if (out == nullptr || key == nullptr) return bad("ncclParamBind: out or key is NULL");
  ncclParamHandle* h = find(key);
  if (h == nullptr) return ncclInvalidArgument;
  *out = h;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetI8, ncclParamHandle_t h, int8_t* out) { return typed("ncclParamGetI8", h, out); }
NCCL_API(ncclResult_t, ncclParamGetI16, ncclParamHandle_t h, int16_t* out) { return typed("ncclParamGetI16", h, out); }
NCCL_API(ncclResult_t, ncclParamGetI32, ncclParamHandle_t h, int32_t* out) { return typed("ncclParamGetI32", h, out); }
NCCL_API(ncclResult_t, ncclParamGetI64, ncclParamHandle_t h, int64_t* out) { return typed("ncclParamGetI64", h, out); }
NCCL_API(ncclResult_t, ncclParamGetU8, ncclParamHandle_t h, uint8_t* out) { return typed("ncclParamGetU8", h, out); }
NCCL_API(ncclResult_t, ncclParamGetU16, ncclParamHandle_t h, uint16_t* out) { return typed("ncclParamGetU16", h, out); }
NCCL_API(ncclResult_t, ncclParamGetU32, ncclParamHandle_t h, uint32_t* out) { return typed("ncclParamGetU32", h, out); }
NCCL_API(ncclResult_t, ncclParamGetU64, ncclParamHandle_t h, uint64_t* out) { return typed("ncclParamGetU64", h, out); }

// The pointer stays valid for the life of the process (handles are never freed or changed).
NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out) {
  if (h == nullptr || out == nullptr) return bad("ncclParamGetStr: handle or out is NULL");
  *out = h->variable.value.c_str();
  return ncclSuccess;
}

// The value's bytes with their terminating NUL; a buffer too small takes nothing (*len = 0).
NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len) {
  if (h == nullptr || out == nullptr || len == nullptr || maxLen <= 0)
    return bad(fmt::format("ncclParamGet: handle, out or len is NULL or maxLen {} is not positive", maxLen));
  const std::string& v = h->variable.value;
  if (v.size() + 1 > static_cast<std::size_t>(maxLen)) {
    *len = 0;
    return ncclInvalidArgument;
  }
  std::memcpy(out, v.c_str(), v.size() + 1);
  *len = static_cast<int>(v.size() + 1);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen) {
  if (key == nullptr || value == nullptr || valueLen == nullptr)
    return bad("ncclParamGetParameter: key, value or valueLen is NULL");
  ncclParamHandle* h = find(key);
  if (h == nullptr) {
    *value = nullptr;
    *valueLen = 0;
    return ncclInvalidArgument;
  }
  *value = h->variable.value.c_str();
  *valueLen = static_cast<int>(h->variable.value.size());
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen) {
  if (table == nullptr || tableLen == nullptr) return bad("ncclParamGetAllParameterKeys: table or tableLen is NULL");
  // The listed keys are fixed once the configuration is read: one table for the process.
  static std::vector<const char*> keys = [] {
    std::vector<const char*> k;
    for (const ncclParamHandle* h : handles())
      if (listed(h->variable)) k.push_back(h->variable.name.c_str());
    return k;
  }();
  *table = keys.data();
  *tableLen = static_cast<int>(keys.size());
  return ncclSuccess;
}

// To standard output, as NCCL prints it.
NCCL_API(void, ncclParamDumpAll) {
  std::printf("=== ncclParam Registry Dump ===\n");
  for (const ncclParamHandle* h : handles()) {
    if (!listed(h->variable)) continue;
    std::printf("%s (string)\n  Current value=%s set_by=%s\n", h->variable.name.c_str(), h->variable.value.c_str(),
                h->variable.set ? "Env" : "Default");
  }
  std::fflush(stdout);
}
