// The checks of a one-process test program: each passes, or prints a FAIL line that says what it
// checked; the program ends with the counts.
//
//   tally::check(rc == ncclSuccess, "ncclMemFree of ...");
//   std::printf("%d passed, %d failed\n", tally::passed, tally::failed);
#pragma once

#include <cstdio>
#include <string>

namespace tally {

inline int passed = 0;
inline int failed = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
    return;
  }
  ++failed;
  std::printf("FAIL %s\n", what.c_str());
}

}  // namespace tally
