// Main of the multi-process suites: each rank (started by brrr-run) joins the world, runs the
// same doctest cases in the same order (so their collectives match), and leaves. A short
// timeout keeps a broken case from hanging the suite: it fails within it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
import brrr;

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  brrr::dist::init_process_group({.backend = brrr::dist::Backend::gloo, .timeout = 30s});
  doctest::Context context(argc, argv);
  int rc = context.run();
  brrr::dist::destroy_process_group();
  return rc;
}
