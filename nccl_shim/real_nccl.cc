#include "nccl_shim/real_nccl.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/config.h"
#include "core/log.h"

namespace purlin::shim {
namespace {

// The oldest NCCL with everything forwarding uses (ncclRedOpCreatePreMulSum, ncclAvg, bfloat16).
constexpr int kOldestVersion = 21100;

// Where the system keeps libnccl.so.2 (distribution packages, NVIDIA's repositories, tarballs).
constexpr const char* kSystemPaths[] = {
    "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2",
    "/usr/lib/sbsa-linux-gnu/libnccl.so.2",   "/usr/lib64/libnccl.so.2",
    "/usr/lib/libnccl.so.2",                  "/usr/local/lib/libnccl.so.2",
    "/usr/local/cuda/lib64/libnccl.so.2",     "/usr/local/nccl/lib/libnccl.so.2",
};
// Within a Python packages directory: the nvidia-nccl-cu12/-cu13 wheels.
constexpr const char* kWheelPaths[] = {"nvidia/nccl/lib/libnccl.so.2", "nvidia/cu13/lib/libnccl.so.2"};

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool ok = false;
};

FileId file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, true};
}

// This library as the loader sees it.
struct Self {
  FileId file;
  void* base = nullptr;
};

Self self() {
  Self s;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&RealNccl::get), &info) != 0) {
    s.base = info.dli_fbase;
    if (info.dli_fname) s.file = file_id(info.dli_fname);
  }
  return s;
}

// The Python packages directories (…/site-packages/, …/dist-packages/) of every loaded object:
// torch's libraries live in one, and its NCCL wheel beside them.
std::vector<std::string> python_package_dirs() {
  std::vector<std::string> dirs;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* out = static_cast<std::vector<std::string>*>(data);
        std::string_view name = info->dlpi_name ? info->dlpi_name : "";
        for (std::string_view marker : {"/site-packages/", "/dist-packages/"}) {
          std::size_t at = name.find(marker);
          if (at == std::string_view::npos) continue;
          std::string dir(name.substr(0, at + marker.size()));
          bool seen = false;
          for (const auto& d : *out) seen = seen || d == dir;
          if (!seen) out->push_back(dir);
        }
        return 0;
      },
      &dirs);
  return dirs;
}

std::vector<std::string> candidates() {
  const std::string& chosen = config().nccl_library;
  if (!chosen.empty()) return {chosen};
  std::vector<std::string> paths;
  for (const std::string& dir : python_package_dirs())
    for (const char* wheel : kWheelPaths) paths.push_back(dir + wheel);
  for (const char* p : kSystemPaths) paths.emplace_back(p);
  return paths;
}

template <class Fn>
bool resolve(void* dl, const char* name, Fn* out) {
  void* f = ::dlsym(dl, name);
  if (!f) f = ::dlsym(dl, (std::string("p") + name).c_str());
  *out = reinterpret_cast<Fn>(f);
  return f != nullptr;
}

}  // namespace

std::string RealNccl::version_text() const {
  if (version_ >= 10000) return fmt::format("{}.{}.{}", version_ / 10000, version_ % 10000 / 100, version_ % 100);
  return fmt::format("{}.{}.{}", version_ / 1000, version_ % 1000 / 100, version_ % 100);
}

RealNccl* RealNccl::load(std::string* why) {
  const Self me = self();
  const bool chosen = !config().nccl_library.empty();
  std::vector<std::string> tried;
  for (const std::string& path : candidates()) {
    // A bare name (no '/') is searched for by the loader, which could find this library: only a
    // path can be compared before loading.
    const bool bare = path.find('/') == std::string::npos;
    FileId id = bare ? FileId{} : file_id(path);
    if (!bare && !id.ok) {
      tried.push_back(path + " (missing)");
      continue;
    }
    if (id.ok && me.file.ok && id.dev == me.file.dev && id.ino == me.file.ino) {
      tried.push_back(path + " (is this library)");
      continue;
    }
    void* dl = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!dl) {
      const char* e = ::dlerror();
      tried.push_back(fmt::format("{} ({})", path, e ? e : "dlopen failed"));
      continue;
    }
    auto reject = [&](const std::string& reason) {
      tried.push_back(fmt::format("{} ({})", path, reason));
      ::dlclose(dl);
    };
    if (::dlsym(dl, "ncclPurlinReductionMode") != nullptr) {
      reject("a Purlin build, not NCCL");
      continue;
    }
    std::unique_ptr<RealNccl> lib(new RealNccl());
    const char* missing = nullptr;
    auto need = [&](const char* name, auto* fn) {
      if (!resolve(dl, name, fn) && !missing) missing = name;
    };
    need("ncclGetVersion", &lib->GetVersion);
    need("ncclGetUniqueId", &lib->GetUniqueId);
    need("ncclCommInitRank", &lib->CommInitRank);
    need("ncclCommDestroy", &lib->CommDestroy);
    need("ncclCommAbort", &lib->CommAbort);
    need("ncclCommGetAsyncError", &lib->CommGetAsyncError);
    need("ncclGetErrorString", &lib->GetErrorString);
    need("ncclAllReduce", &lib->AllReduce);
    need("ncclBroadcast", &lib->Broadcast);
    need("ncclReduce", &lib->Reduce);
    need("ncclAllGather", &lib->AllGather);
    need("ncclReduceScatter", &lib->ReduceScatter);
    need("ncclSend", &lib->Send);
    need("ncclRecv", &lib->Recv);
    need("ncclGroupStart", &lib->GroupStart);
    need("ncclGroupEnd", &lib->GroupEnd);
    need("ncclRedOpCreatePreMulSum", &lib->RedOpCreatePreMulSum);
    need("ncclRedOpDestroy", &lib->RedOpDestroy);
    if (missing) {
      reject(fmt::format("lacks {}", missing));
      continue;
    }
    resolve(dl, "ncclGetLastError", &lib->GetLastError);
    resolve(dl, "ncclAlltoAll", &lib->AlltoAll);
    resolve(dl, "ncclGather", &lib->Gather);
    resolve(dl, "ncclScatter", &lib->Scatter);
    resolve(dl, "ncclCommMemStats", &lib->CommMemStats);
    resolve(dl, "ncclCommSuspend", &lib->CommSuspend);
    resolve(dl, "ncclCommResume", &lib->CommResume);
    // The loader may hand back an object already loaded under that name: compare the code itself.
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(lib->GetVersion), &info) != 0 && info.dli_fbase == me.base) {
      reject("is this library");
      continue;
    }
    int version = 0;
    if (lib->GetVersion(&version) != ncclSuccess || version < kOldestVersion) {
      reject(fmt::format("version {} is older than 2.11", version));
      continue;
    }
    lib->dl_ = dl;
    lib->path_ = path;
    lib->version_ = version;
    log::info(log::kInit, "NCCL fallback: NCCL {} loaded from {}", lib->version_text(), path);
    return lib.release();
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  *why = chosen ? fmt::format("PURLIN_NCCL_LIBRARY={} is not a usable NCCL: {}", config().nccl_library, list)
                : fmt::format("no NCCL library found (set PURLIN_NCCL_LIBRARY to the path of the real libnccl.so.2); "
                              "tried {}", list.empty() ? "nothing" : list);
  return nullptr;
}

const RealNccl* RealNccl::get(std::string* why) {
  static std::string failure;
  static const RealNccl* lib = load(&failure);  // kept to the end of the process, like the loader's mapping
  if (!lib && why) *why = failure;
  return lib;
}

}  // namespace purlin::shim
