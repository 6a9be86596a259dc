// The CUDA runtime on a machine without a GPU (the CI and build hosts): nothing crashes, no
// device is reported, and every call that needs one throws brrr::Error(device). The same file
// runs on the GPU machine, where each case checks the with-GPU side of the same contract.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "helpers.hpp"

using namespace brrr;
using namespace test;

TEST_CASE("is_available and device_count agree, and never throw") {
  bool available = false;
  int count = -1;
  CHECK_NOTHROW(available = cuda::is_available());
  CHECK_NOTHROW(count = cuda::device_count());
  CHECK(available == (count > 0));
  CHECK(count >= 0);
  if (!available) {
    CHECK(count == 0);
  }
  // Cached and stable.
  CHECK(cuda::device_count() == count);
  CHECK(cuda::is_available() == available);
}

TEST_CASE("Device::cuda: Error(device) saying that no CUDA device is available") {
  if (!cuda::is_available()) {
    CHECK_BRRR_ERROR(Device::cuda(0), ErrorKind::device, "Device::cuda(0)", "no CUDA device is available");
    CHECK_BRRR_ERROR(Device::cuda(), ErrorKind::device, "no CUDA device is available");
    CHECK_BRRR_ERROR(Device::cuda(3), ErrorKind::device, "Device::cuda(3)", "no CUDA device is available");
  } else {
    Device d = Device::cuda(0);
    CHECK(d.is_cuda());
    CHECK(d.index() == 0);
    CHECK(d.str() == "cuda:0");
    int n = cuda::device_count();
    CHECK_BRRR_ERROR(Device::cuda(n), ErrorKind::device, "Device::cuda(" + std::to_string(n) + ")", "out of range");
    CHECK_BRRR_ERROR(Device::cuda(-1), ErrorKind::device, "out of range");
  }
}

TEST_CASE("Device::parse of cuda strings throws without a GPU; cpu always parses") {
  CHECK(Device::parse("cpu") == Device::cpu());
  if (!cuda::is_available()) {
    CHECK_BRRR_ERROR(Device::parse("cuda:1"), ErrorKind::device, "Device::cuda(1)", "no CUDA device is available");
    CHECK_BRRR_ERROR(Device::parse("cuda:0"), ErrorKind::device, "no CUDA device is available");
    CHECK_BRRR_ERROR(Device::parse("cuda"), ErrorKind::device, "no CUDA device is available");
  } else {
    CHECK(Device::parse("cuda") == Device::cuda(0));
    CHECK(Device::parse("cuda:0") == Device::cuda(0));
    int n = cuda::device_count();
    CHECK_BRRR_ERROR(Device::parse("cuda:" + std::to_string(n)), ErrorKind::device, "out of range");
  }
  // Malformed strings are value errors either way.
  CHECK_BRRR_ERROR(Device::parse("cuda:-1"), ErrorKind::value, "Device::parse", "'cuda:-1'");
  CHECK_BRRR_ERROR(Device::parse("gpu"), ErrorKind::value, "Device::parse", "'gpu'");
}

TEST_CASE("pinned memory without a GPU: pageable memory instead (warned once, tests/tensor/test_portable.cpp)") {
  if (!cuda::is_available()) {
    CHECK_FALSE(empty({2}, {.pinned = true}).is_pinned());
    CHECK(zeros({3, 4}, {.pinned = true}).to_host<float>() == std::vector<float>(12, 0.0f));
    Tensor copy = Tensor::from_vector(std::vector<float>{1, 2}).pin_memory();
    CHECK_FALSE(copy.is_pinned());
    CHECK(copy.to_host<float>() == std::vector<float>{1, 2});
    CHECK_FALSE(Storage::allocate(64, Device::cpu(), true).pinned());
    // Pageable CPU work is unaffected afterwards.
    Tensor t = Tensor::from_vector(std::vector<float>{1, 2});
    CHECK_FALSE(t.is_pinned());
    CHECK(t.to(Device::cpu()).is_same(t));
    CHECK(t.to_host<float>() == std::vector<float>{1, 2});
  } else {
    Tensor p = empty({2}, {.pinned = true});
    CHECK(p.is_pinned());
    CHECK(p.device() == Device::cpu());
    Tensor q = Tensor::from_vector(std::vector<float>{1, 2}).pin_memory();
    CHECK(q.is_pinned());
    CHECK(q.to_host<float>() == std::vector<float>{1, 2});
  }
}

TEST_CASE("cuda:: calls that need a device throw Error(device) without one") {
  if (!cuda::is_available()) {
    CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::device, "no CUDA device is available");
    CHECK_BRRR_ERROR(cuda::Stream::create(Device::cuda(0)), ErrorKind::device, "no CUDA device is available");
    CHECK_BRRR_ERROR(cuda::current_stream(Device::cuda(0)), ErrorKind::device, "no CUDA device is available");
  }
  // A CPU device is refused by every device-taking call, GPU or not.
  CHECK_BRRR_ERROR(cuda::synchronize(Device::cpu()), ErrorKind::device, "cuda::synchronize", "needs a CUDA device",
                   "cpu");
  CHECK_BRRR_ERROR(cuda::Stream::create(Device::cpu()), ErrorKind::device, "Stream::create", "cpu");
  CHECK_BRRR_ERROR(cuda::memory_stats(Device::cpu()), ErrorKind::device, "memory_stats", "cpu");
  CHECK_BRRR_ERROR(cuda::empty_cache(Device::cpu()), ErrorKind::device, "empty_cache", "cpu");
  // Sync accounting works without a device: CPU reads are not device syncs.
  std::uint64_t before = cuda::sync_count();
  Tensor t = randn({4});
  (void)t.to_host<float>();
  (void)t.select(0, 0).item<float>();
  CHECK(cuda::sync_count() == before);
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    CHECK(cuda::sync_policy() == cuda::SyncPolicy::error);
    CHECK(t.to_host<float>().size() == 4);  // host memory: no sync, no error
  }
  CHECK(cuda::sync_policy() == cuda::SyncPolicy::allow);
}

TEST_CASE("CPU tensors work normally whatever the GPU situation") {
  manual_seed(11);  // seeds every device present; fine with none
  Tensor a = rand({3, 3});
  Tensor b = a.to(Device::cpu());
  CHECK(b.is_same(a));
  CHECK(a.device().str() == "cpu");
  std::vector<float> v = a.t().contiguous().to_host<float>();
  std::vector<float> w = a.to_host<float>();
  CHECK(v[1] == w[3]);
  CHECK(v[5] == w[7]);
}

TEST_CASE("the stream check switches on and off anywhere; CPU work is unaffected by it") {
  CHECK_FALSE(cuda::stream_check_enabled());  // off by default (BRRR_STREAM_CHECK unset)
  std::vector<float> off, on;
  {
    manual_seed(5);
    Tensor a = randn({8, 8});
    off = sum(matmul(a, a) + 1.0, {0}).to_host<float>();
  }
  {
    cuda::StreamCheckGuard check(true);
    CHECK(cuda::stream_check_enabled());
    {
      cuda::StreamCheckGuard nested(false);
      CHECK_FALSE(cuda::stream_check_enabled());
    }
    CHECK(cuda::stream_check_enabled());
    manual_seed(5);
    Tensor a = randn({8, 8});
    std::uint64_t before = cuda::sync_count();
    on = sum(matmul(a, a) + 1.0, {0}).to_host<float>();
    CHECK(cuda::sync_count() == before);
  }
  CHECK_FALSE(cuda::stream_check_enabled());
  CHECK(on == off);
  cuda::set_stream_check(true);
  cuda::set_stream_check(false);
  CHECK_FALSE(cuda::stream_check_enabled());
}
