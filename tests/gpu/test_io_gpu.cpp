// brrr.io with CUDA tensors: save_safetensors copies device tensors (any layout) to the host
// (a sync point) and the file loads back into CPU tensors with the same bytes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using test::gpu;

namespace {

std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

}  // namespace

TEST_CASE("safetensors: CUDA tensors of every dtype and layout save and load back equal") {
  manual_seed(7);
  io::TensorMap in;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64,
                  DType::boolean}) {
    const std::string n = to_string(d);
    Tensor base = d == DType::boolean ? randint(0, 2, {6, 5}, {.dtype = DType::i64, .device = gpu()}).to(d)
                  : is_floating_point(d) ? randn({6, 5}, {.device = gpu()}).to(d)
                                         : randint(-1000, 1000, {6, 5}, {.dtype = d, .device = gpu()});
    REQUIRE(base.device() == gpu());
    in[n] = base;
    in[n + "_t"] = base.t();                    // non-contiguous on the device
    in[n + "_s"] = base.slice(0, 1, 6, 2);
    in[n + "_0d"] = base.select(0, 2).select(0, 3);
    in[n + "_empty"] = base.narrow(0, 0, 0);
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("brrr_io_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "gpu.safetensors").string();
  io::save_safetensors(path, in, {{"device", "cuda"}});
  io::TensorMap out = io::load_safetensors(path);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    const Tensor& got = out.at(name);
    CHECK(got.device().is_cpu());
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(bytes_of(got) == bytes_of(t));
    // And back on the device it equals the original there.
    CHECK(bytes_of(got.to(gpu())) == bytes_of(t));
  }
  CHECK(io::safetensors_metadata(path).at("device") == "cuda");
  std::filesystem::remove_all(dir);
}
