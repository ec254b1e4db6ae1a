// The one main() every unit-test binary shares, for Catch2 v2 and v3 alike.
#if !__has_include(<catch2/catch_test_macros.hpp>)
#define CATCH_CONFIG_RUNNER
#endif
#include "test/catch.h"
#include "test/common/loopback.h"

int main(int argc, char** argv) {
  loopback::use();
  return Catch::Session().run(argc, argv);
}
