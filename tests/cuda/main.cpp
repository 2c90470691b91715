// Runs the CUDA device tests, or exits 77 (CTest's "skipped") with the
// reason when this machine has no usable GPU, as CI machines do not.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "engine/backend.h"

int main(int argc, char** argv) {
  std::string why;
  if (!troupe::cuda_available(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
