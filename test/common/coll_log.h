// The library's COLL lines of a GPU test's rank processes, gathered from one file per process in a
// temporary folder. Made before the ranks are forked (they inherit the NCCL_DEBUG variables it
// sets); the folder goes with the object.
//
//   coll_log::Files logs("zs-sequence");
//   ranks::Group group(...);  ...
//   for (const std::string& line : logs.lines("zero-staging:")) ...
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace coll_log {

class Files {
 public:
  explicit Files(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() / ("purlin-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    ::setenv("NCCL_DEBUG", "INFO", 1);
    ::setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
    ::setenv("NCCL_DEBUG_FILE", (dir_ / "rank.%p").c_str(), 1);
  }
  ~Files() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;

  // Every logged line that contains `needle`, file by file.
  std::vector<std::string> lines(const std::string& needle) const {
    std::vector<std::string> found;
    for (const auto& f : std::filesystem::directory_iterator(dir_)) {
      std::ifstream in(f.path());
      for (std::string line; std::getline(in, line);)
        if (line.find(needle) != std::string::npos) found.push_back(line);
    }
    return found;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace coll_log
