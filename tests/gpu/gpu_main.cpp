// Main of the GPU suites: exits 77 (CTest: skipped) when no CUDA device is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
import brrr;

int main(int argc, char** argv) {
  if (!brrr::cuda::is_available()) {
    std::puts("no CUDA device: skipping the GPU suite");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
