// Errors of the Tensor core: every brrr::Error kind it raises, with kind() and the message
// content (op name, offending shapes, dtypes, values) checked.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
import brrr;

#include "helpers.hpp"

using namespace brrr;
using namespace test;

// The out-of-memory test asks malloc for 2^60 bytes. Under AddressSanitizer (the CI's asan
// preset) such a request aborts the process unless the allocator may return null; this hook
// (ignored without ASan) lets it return null, as glibc does, so brrr's error path runs.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {
constexpr std::int64_t big = std::int64_t{1} << 40;
constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
}  // namespace

TEST_CASE("Error: a std::runtime_error with a kind; every kind has a name") {
  Error e(ErrorKind::shape, "op: message");
  CHECK(e.kind() == ErrorKind::shape);
  CHECK(std::string(e.what()) == "op: message");
  const std::runtime_error& base = e;
  CHECK(std::string(base.what()) == "op: message");
  CHECK(std::string(to_string(ErrorKind::shape)) == "shape");
  CHECK(std::string(to_string(ErrorKind::dtype)) == "dtype");
  CHECK(std::string(to_string(ErrorKind::device)) == "device");
  CHECK(std::string(to_string(ErrorKind::index)) == "index");
  CHECK(std::string(to_string(ErrorKind::value)) == "value");
  CHECK(std::string(to_string(ErrorKind::io)) == "io");
  CHECK(std::string(to_string(ErrorKind::cuda)) == "cuda");
  CHECK(std::string(to_string(ErrorKind::out_of_memory)) == "out_of_memory");
  CHECK(std::string(to_string(ErrorKind::sync)) == "sync");
  CHECK(std::string(to_string(ErrorKind::autograd)) == "autograd");
  CHECK(std::string(to_string(ErrorKind::stream)) == "stream");
  // Thrown errors are catchable as std::exception too.
  CHECK_THROWS_AS((void)zeros({-1}), std::runtime_error);
  CHECK_THROWS_WITH_AS((void)arange(4).view({3}), "view: shape [3] is invalid for input [4] of size 4", Error);
}

TEST_CASE("impossible views and bad view shapes: Error(shape)") {
  Tensor q = arange(24).view({4, 6}).slice(1, 1, 5);  // [4, 4] strides [6, 1]
  CHECK_BRRR_ERROR(q.view({16}), ErrorKind::shape, "view", "[16]", "[4, 4]", "[6, 1]", "reshape");
  CHECK_BRRR_ERROR(q.t().view({-1}), ErrorKind::shape, "view", "[16]", "[4, 4]", "[1, 6]");
  CHECK_BRRR_ERROR(arange(6).view({4}), ErrorKind::shape, "view", "[4]", "[6]", "size 6");
  CHECK_BRRR_ERROR(arange(6).view({4, -1}), ErrorKind::shape, "view", "[4, -1]", "size 6");
  CHECK_BRRR_ERROR(arange(6).view({-1, -1}), ErrorKind::shape, "view", "only one dimension can be -1", "[-1, -1]");
  CHECK_BRRR_ERROR(arange(6).view({-2, 3}), ErrorKind::shape, "view", "invalid size -2", "[-2, 3]");
  CHECK_BRRR_ERROR(zeros({0, 3}).view({-1, 0}), ErrorKind::shape, "view", "[-1, 0]", "size 0");
  CHECK_BRRR_ERROR(arange(6).reshape({5}), ErrorKind::shape, "reshape", "[5]", "[6]");
  CHECK_BRRR_ERROR(arange(6).reshape({-1, 4}), ErrorKind::shape, "reshape", "[-1, 4]", "size 6");
  // Sizes whose product overflows int64 must be rejected, not wrap around.
  CHECK_BRRR_ERROR(arange(6).view({big, big}), ErrorKind::shape, "view", "[1099511627776, 1099511627776]");
  CHECK_BRRR_ERROR(zeros({0}).view({big, big, big}), ErrorKind::shape, "view");
  CHECK_BRRR_ERROR(zeros({0}).reshape({-1, big, big, big}), ErrorKind::shape, "reshape");
  // 24 = 6 * (2^62 + 1) * 4 modulo 2^64: a wrapped product must not pass for 24 elements.
  CHECK_BRRR_ERROR(arange(24).view({6, (std::int64_t{1} << 62) + 1, 4}), ErrorKind::shape, "view");
}

TEST_CASE("out-of-range dims, indices, slices, narrows, selects: Error(index)") {
  Tensor x = zeros({2, 3, 4});
  Tensor m = zeros({4, 5});
  CHECK_BRRR_ERROR(x.transpose(0, 3), ErrorKind::index, "transpose", "dim 3", "3-d", "[2, 3, 4]", "[-3, 2]");
  CHECK_BRRR_ERROR(x.transpose(-4, 0), ErrorKind::index, "transpose", "dim -4");
  CHECK_BRRR_ERROR(x.permute({0, 1, 3}), ErrorKind::index, "permute", "dim 3", "[2, 3, 4]");
  CHECK_BRRR_ERROR(x.slice(3, 0, 1), ErrorKind::index, "slice", "dim 3", "[2, 3, 4]");
  CHECK_BRRR_ERROR(x.slice(-4, 0, 1), ErrorKind::index, "slice", "dim -4");
  CHECK_BRRR_ERROR(full({}, 1.0).slice(0, 0, 1), ErrorKind::index, "slice", "0-d");
  CHECK_BRRR_ERROR(m.narrow(1, 3, 3), ErrorKind::index, "narrow", "start 3", "length 3", "size 5", "[4, 5]");
  CHECK_BRRR_ERROR(m.narrow(1, 6, 0), ErrorKind::index, "narrow", "start 6", "size 5");
  CHECK_BRRR_ERROR(m.narrow(1, -6, 1), ErrorKind::index, "narrow", "start -6");
  CHECK_BRRR_ERROR(m.narrow(0, 0, -1), ErrorKind::index, "narrow", "length -1");
  CHECK_BRRR_ERROR(m.narrow(0, 1, i64max), ErrorKind::index, "narrow", "size 4");  // no overflow
  CHECK_BRRR_ERROR(m.narrow(2, 0, 1), ErrorKind::index, "narrow", "dim 2", "[4, 5]");
  CHECK_BRRR_ERROR(full({}, 1.0).narrow(0, 0, 1), ErrorKind::index, "narrow", "0-d");
  CHECK_BRRR_ERROR(m.select(0, 4), ErrorKind::index, "select", "index 4", "size 4", "[4, 5]");
  CHECK_BRRR_ERROR(m.select(1, -6), ErrorKind::index, "select", "index -6", "size 5");
  CHECK_BRRR_ERROR(m.select(2, 0), ErrorKind::index, "select", "dim 2");
  CHECK_BRRR_ERROR(zeros({2, 0}).select(1, 0), ErrorKind::index, "select", "index 0", "size 0");
  CHECK_BRRR_ERROR(full({}, 1.0).select(0, 0), ErrorKind::index, "select", "0-d");
  CHECK_BRRR_ERROR(x.squeeze(3), ErrorKind::index, "squeeze", "dim 3");
  CHECK_BRRR_ERROR(x.unsqueeze(4), ErrorKind::index, "unsqueeze", "dim 4", "[-4, 3]");
  CHECK_BRRR_ERROR(x.unsqueeze(-5), ErrorKind::index, "unsqueeze", "dim -5");
  CHECK_BRRR_ERROR(x.flatten(2, 1), ErrorKind::index, "flatten", "start_dim 2", "end_dim 1", "[2, 3, 4]");
  CHECK_BRRR_ERROR(x.flatten(0, 3), ErrorKind::index, "flatten", "dim 3");
  CHECK_BRRR_ERROR(x.size(3), ErrorKind::index, "size", "dim 3", "[2, 3, 4]");
  CHECK_BRRR_ERROR(x.stride(-4), ErrorKind::index, "stride", "dim -4", "[2, 3, 4]");
  CHECK_BRRR_ERROR(full({}, 1.0).size(0), ErrorKind::index, "size", "0-d");
  // as_strided outside the storage, including strides whose span overflows int64.
  Tensor s = arange(12);
  CHECK_BRRR_ERROR(s.as_strided({13}, {1}, 0), ErrorKind::index, "as_strided", "[13]", "12");
  CHECK_BRRR_ERROR(s.as_strided({3, 3}, {4, 1}, 2), ErrorKind::index, "as_strided", "[3, 3]", "[4, 1]", "offset 2");
  CHECK_BRRR_ERROR(s.as_strided({2}, {1}, -1), ErrorKind::index, "as_strided", "negative offset -1");
  CHECK_BRRR_ERROR(s.as_strided({2}, {-1}, 0), ErrorKind::index, "as_strided");
  CHECK_BRRR_ERROR(s.as_strided({(std::int64_t{1} << 32) + 1}, {std::int64_t{1} << 32}, 0), ErrorKind::index,
                   "as_strided", "[4294967297]", "[4294967296]");
  CHECK_BRRR_ERROR(s.as_strided({2, 2}, {i64max, i64max}, 0), ErrorKind::index, "as_strided");
  CHECK_BRRR_ERROR(s.as_strided({2}, {1}, i64max), ErrorKind::index, "as_strided");
  CHECK_BRRR_ERROR(s.as_strided({2, 3}, {1}, 0), ErrorKind::shape, "as_strided", "[2, 3]", "[1]");
  // Slices that clamp are fine, even with extreme bounds and steps.
  CHECK(s.slice(0, std::numeric_limits<std::int64_t>::min(), i64max).numel() == 12);
  CHECK(values(s.slice(0, 1, i64max, i64max)) == std::vector<double>{1});
  CHECK(values(s.slice(0, 0, 12, i64max - 1)) == std::vector<double>{0});
}

TEST_CASE("item and to_host: numel and dtype mismatches") {
  Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3});
  CHECK_BRRR_ERROR(v.item<float>(), ErrorKind::shape, "item", "[3]", "f32", "3 elements");
  CHECK_BRRR_ERROR(zeros({0}).item<float>(), ErrorKind::shape, "item", "[0]", "0 elements");
  CHECK_BRRR_ERROR(zeros({2, 2}).item<float>(), ErrorKind::shape, "item", "[2, 2]");
  // item<T>() converts (tests/tensor/test_call_forms.cpp); item_exact<T>() is the strict form.
  CHECK_BRRR_ERROR(full({}, 1.0).item_exact<double>(), ErrorKind::dtype, "item_exact<f64>", "f32");
  CHECK_BRRR_ERROR(full({1}, 1.0).item_exact<std::int64_t>(), ErrorKind::dtype, "item_exact<i64>", "f32");
  CHECK_BRRR_ERROR(arange(1).item_exact<std::int32_t>(), ErrorKind::dtype, "item_exact<i32>", "i64");
  CHECK_BRRR_ERROR(full({1}, 1.0, {.dtype = DType::f16}).item_exact<bfloat16>(), ErrorKind::dtype, "item_exact<bf16>",
                   "f16");
  CHECK_BRRR_ERROR(zeros({2, 2}).to_host<double>(), ErrorKind::dtype, "to_host<f64>", "[2, 2] f32 on cpu",
                   "to(DType::f64)");
  CHECK_BRRR_ERROR(arange(3).to_host<std::int32_t>(), ErrorKind::dtype, "to_host<i32>", "[3] i64");
  CHECK_BRRR_ERROR(arange(3).to_host<bool>(), ErrorKind::dtype, "to_host<bool>", "i64");
  CHECK_BRRR_ERROR(zeros({1}, {.dtype = DType::boolean}).to_host<float>(), ErrorKind::dtype, "to_host<f32>", "bool");
  CHECK_BRRR_ERROR(zeros({1}, {.dtype = DType::bf16}).to_host<half>(), ErrorKind::dtype, "to_host<f16>", "bf16");
  // The right T works on the same tensors.
  CHECK(full({}, 1.5).item<float>() == 1.5f);
  CHECK(arange(3).to_host<std::int64_t>().size() == 3);
}

TEST_CASE("negative, overflowing and too large sizes: Error(value); allocation failure: out_of_memory") {
  CHECK_BRRR_ERROR(zeros({-1, 3}), ErrorKind::value, "zeros", "negative size", "[-1, 3]");
  CHECK_BRRR_ERROR(ones({2, -5}), ErrorKind::value, "ones", "[2, -5]");
  CHECK_BRRR_ERROR(full({-2}, 1.0), ErrorKind::value, "full", "[-2]");
  CHECK_BRRR_ERROR(empty({3, -1}), ErrorKind::value, "empty", "negative size", "[3, -1]");
  CHECK_BRRR_ERROR(rand({-4}), ErrorKind::value, "rand", "[-4]");
  CHECK_BRRR_ERROR(randn({2, -4}), ErrorKind::value, "randn", "[2, -4]");
  CHECK_BRRR_ERROR(randint(0, 3, {-1}), ErrorKind::value, "randint", "[-1]");
  CHECK_BRRR_ERROR(zeros({big, big}), ErrorKind::value, "zeros", "[1099511627776, 1099511627776]", "2^63");
  CHECK_BRRR_ERROR(empty({big, big, 0, -1}), ErrorKind::value, "empty", "negative size");
  CHECK_BRRR_ERROR(zeros({std::int64_t{1} << 31, std::int64_t{1} << 31}), ErrorKind::value, "zeros",
                   "[2147483648, 2147483648]", "too large");
  CHECK_BRRR_ERROR(eye(-3), ErrorKind::value, "eye", "-3");
  CHECK_BRRR_ERROR(eye(big, big), ErrorKind::value, "eye", "[1099511627776, 1099511627776]");
  // A zero-size dim makes numel 0 whatever the others are: allowed, in any position.
  CHECK(empty({big, 0, big}).numel() == 0);
  CHECK(empty({big, big, 0}).numel() == 0);
  CHECK(empty({big, 0, big}).strides() == Shape{big, big, 1});  // PyTorch's strides, no overflow
  CHECK(empty({big, big, 0}).strides() == Shape{big, 1, 1});
  CHECK(empty({big, big, 0}).view({-1}).shape() == Shape{0});
  CHECK(empty({big, big, 0}).reshape({0, big}).strides() == Shape{big, 1});
  CHECK(zeros({0, big, big}).shape() == Shape{0, big, big});
  CHECK(checked_numel({big, big, 0}, "op") == 0);
  CHECK(checked_numel({3, 4, 5}, "op") == 60);
  CHECK(checked_numel({}, "op") == 1);
  // Representable but impossible to allocate: 2^58 floats = 2^60 bytes.
  CHECK_BRRR_ERROR(zeros({std::int64_t{1} << 30, std::int64_t{1} << 28}), ErrorKind::out_of_memory,
                   "cannot allocate", "1152921504606846976 bytes");
  // from_vector: the values must fill the shape exactly.
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), ErrorKind::shape, "from_vector",
                   "3 values", "[2, 2]", "4 elements");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<std::int64_t>{1, 2}, {3}), ErrorKind::shape, "from_vector",
                   "2 values", "[3]");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<bool>{true}, {0}), ErrorKind::shape, "from_vector", "1 values");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<double>{1, 2}, {-1, -2}), ErrorKind::value, "from_vector",
                   "[-1, -2]");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<half>(4), {2, 3}), ErrorKind::shape, "from_vector", "[2, 3]");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<bfloat16>(4), {5}), ErrorKind::shape, "from_vector", "[5]");
  CHECK_BRRR_ERROR(Tensor::from_vector(std::vector<std::int32_t>(4), {1, 3}), ErrorKind::shape, "from_vector");
  // expand to sizes whose product overflows.
  CHECK_BRRR_ERROR(full({1}, 1.0).expand({big, big}), ErrorKind::value, "[1099511627776, 1099511627776]", "2^63");
}

TEST_CASE("permute not a permutation, expand incompatible, t() of >2 dims: Error(shape)") {
  Tensor x = zeros({2, 3, 4});
  CHECK_BRRR_ERROR(x.permute({0, 1}), ErrorKind::shape, "permute", "[0, 1]", "2 dims", "[2, 3, 4]", "3");
  CHECK_BRRR_ERROR(x.permute({0, 1, 2, 3}), ErrorKind::shape, "permute", "[0, 1, 2, 3]");
  CHECK_BRRR_ERROR(x.permute({0, 0, 1}), ErrorKind::shape, "permute", "[0, 0, 1]", "repeats dim 0");
  CHECK_BRRR_ERROR(x.permute({2, -1, 0}), ErrorKind::shape, "permute", "[2, -1, 0]", "repeats dim 2");
  CHECK_BRRR_ERROR(x.t(), ErrorKind::shape, "t", "[2, 3, 4]", "transpose");
  Tensor a = zeros({3, 1});
  CHECK_BRRR_ERROR(a.expand({4, 4}), ErrorKind::shape, "expand", "[3, 1]", "[4, 4]", "dim 0 has size 3");
  CHECK_BRRR_ERROR(a.expand({4}), ErrorKind::shape, "expand", "[3, 1]", "[4]", "fewer dims");
  CHECK_BRRR_ERROR(a.expand({-1, 3, 1}), ErrorKind::shape, "expand", "[-1, 3, 1]", "new leading dim");
  CHECK_BRRR_ERROR(a.expand({3, -2}), ErrorKind::shape, "expand", "[3, -2]");
  CHECK_BRRR_ERROR(zeros({0}).expand({1}), ErrorKind::shape, "expand", "[0]", "[1]");
  CHECK_BRRR_ERROR(a.broadcast_to({3, 2, 2}), ErrorKind::shape, "broadcast_to", "[3, 1]", "[3, 2, 2]", "NumPy");
  CHECK_BRRR_ERROR(zeros({2, 3}).broadcast_to({3}), ErrorKind::shape, "broadcast_to", "[2, 3]", "[3]");
  // copy_ broadcasts the source like expand.
  Tensor dst = zeros({2, 3});
  CHECK_BRRR_ERROR(dst.copy_(zeros({4})), ErrorKind::shape, "copy_", "[4]", "[2, 3]");
  // Tensor's own constructor checks its layout.
  Storage st = Storage::allocate(16, Device::cpu());
  CHECK_BRRR_ERROR(Tensor(st, Layout{{2, 3}, {3}, 0}, DType::f32), ErrorKind::shape, "Tensor", "[2, 3]", "[3]");
  CHECK_BRRR_ERROR(Tensor(st, Layout{{2, 3}, {3, 1}, 0}, DType::f32), ErrorKind::index, "Tensor", "[2, 3]",
                   "[3, 1]", "4 f32 elements");
  CHECK_BRRR_ERROR(Tensor(st, Layout{{3}, {1}, 0}, DType::f64), ErrorKind::index, "2 f64 elements");
  CHECK_NOTHROW((void)Tensor(st, Layout{{2}, {1}, 0}, DType::f64).numel());
  CHECK_BRRR_ERROR(Tensor(Storage(), Layout::contiguous({2}), DType::f32), ErrorKind::value, "Tensor",
                   "undefined storage");
  CHECK_BRRR_ERROR(Tensor(st, Layout{{-2}, {1}, 0}, DType::f32), ErrorKind::value, "Tensor", "negative size");
}

TEST_CASE("step <= 0 and arange with a zero or wrong-way step: Error(value)") {
  Tensor x = arange(10);
  CHECK_BRRR_ERROR(x.slice(0, 0, 10, 0), ErrorKind::value, "slice", "step must be positive", "0");
  CHECK_BRRR_ERROR(x.slice(0, 10, 0, -1), ErrorKind::value, "slice", "got -1");
  CHECK_BRRR_ERROR(arange(0, 5, 0), ErrorKind::value, "arange", "step", "non-zero");
  CHECK_BRRR_ERROR(arange(0, 5, -1), ErrorKind::value, "arange", "points away");
  CHECK_BRRR_ERROR(arange(5, 0, 1), ErrorKind::value, "arange", "points away");
  CHECK_BRRR_ERROR(arange(-3), ErrorKind::value, "arange", "points away");
  CHECK_BRRR_ERROR(arange(0, INFINITY), ErrorKind::value, "arange", "finite");
  CHECK_BRRR_ERROR(arange(NAN, 1), ErrorKind::value, "arange", "finite");
  CHECK_BRRR_ERROR(arange(0, 1, NAN), ErrorKind::value, "arange");
  // Finite bounds whose element count does not fit in int64.
  CHECK_BRRR_ERROR(arange(0, 1e30), ErrorKind::value, "arange", "elements");
  CHECK_BRRR_ERROR(arange(0, 1, 1e-300), ErrorKind::value, "arange", "elements");
  CHECK_BRRR_ERROR(randint(5, 5, {3}), ErrorKind::value, "randint", "high (5)", "low (5)");
  CHECK_BRRR_ERROR(randint(5, -5, {3}), ErrorKind::value, "randint", "high (-5)");
}

TEST_CASE("dtype errors: random draws, randint bounds the dtype cannot hold, requires_grad_ on integers") {
  CHECK_BRRR_ERROR(rand({2}, {.dtype = DType::i64}), ErrorKind::dtype, "rand", "floating-point", "i64");
  CHECK_BRRR_ERROR(randn({2}, {.dtype = DType::boolean}), ErrorKind::dtype, "randn", "bool");
  CHECK_BRRR_ERROR(randn({2}, {.dtype = DType::i32}), ErrorKind::dtype, "randn", "i32");
  CHECK_BRRR_ERROR(randint(0, 2, {2}, {.dtype = DType::boolean}), ErrorKind::dtype, "randint", "bool");
  // Values outside the dtype's range (or its exact integers) could not stay in [low, high).
  CHECK_BRRR_ERROR(randint(0, std::int64_t{1} << 40, {4}, {.dtype = DType::i32}), ErrorKind::value, "randint",
                   "i32", "1099511627776");
  CHECK_BRRR_ERROR(randint(-(std::int64_t{1} << 31) - 1, 0, {4}, {.dtype = DType::i32}), ErrorKind::value,
                   "randint", "i32");
  CHECK_BRRR_ERROR(randint(0, 258, {4}, {.dtype = DType::bf16}), ErrorKind::value, "randint", "bf16");
  CHECK_BRRR_ERROR(randint(0, 2050, {4}, {.dtype = DType::f16}), ErrorKind::value, "randint", "f16");
  CHECK_BRRR_ERROR(randint(0, (std::int64_t{1} << 24) + 2, {4}, {.dtype = DType::f32}), ErrorKind::value,
                   "randint", "f32");
  // The extremes that fit work, and stay in range.
  std::vector<std::int32_t> r = randint(-(std::int64_t{1} << 31), std::int64_t{1} << 31, {1000},
                                        {.dtype = DType::i32}).to_host<std::int32_t>();
  int negative = 0;
  for (auto v : r) negative += v < 0;
  CHECK(negative > 400);
  CHECK(negative < 600);
  for (double v : values(randint(0, 257, {2000}, {.dtype = DType::bf16}))) {
    if (!(v >= 0 && v < 257)) {
      FAIL_CHECK("bf16 randint out of range: " << v);
      break;
    }
  }
  CHECK_BRRR_ERROR(zeros({2}, {.dtype = DType::i64}).requires_grad_(), ErrorKind::dtype, "requires_grad_", "i64");
  CHECK_BRRR_ERROR(zeros({2}, {.dtype = DType::boolean, .requires_grad = true}), ErrorKind::dtype, "requires_grad_",
                   "bool");
}

TEST_CASE("device errors: bad device strings") {
  CHECK_BRRR_ERROR(Device::parse("tpu"), ErrorKind::value, "Device::parse", "'tpu'", "cpu, cuda or cuda:N");
  CHECK_BRRR_ERROR(Device::parse("cuda:"), ErrorKind::value, "Device::parse", "'cuda:'");
  CHECK_BRRR_ERROR(Device::parse("cuda:x"), ErrorKind::value, "Device::parse", "'cuda:x'");
  CHECK_BRRR_ERROR(Device::parse("CPU"), ErrorKind::value, "Device::parse", "'CPU'");
  CHECK_BRRR_ERROR(Device::parse(""), ErrorKind::value, "Device::parse");
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device().is_cpu());
  std::ostringstream os;
  os << Device::cpu();
  CHECK(os.str() == "cpu");
}

TEST_CASE("calls on an undefined Tensor: Error(value) naming the call") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK_BRRR_ERROR(u.shape(), ErrorKind::value, "shape", "undefined");
  CHECK_BRRR_ERROR(u.strides(), ErrorKind::value, "strides", "undefined");
  CHECK_BRRR_ERROR(u.storage_offset(), ErrorKind::value, "storage_offset", "undefined");
  CHECK_BRRR_ERROR(u.layout(), ErrorKind::value, "layout", "undefined");
  CHECK_BRRR_ERROR(u.dtype(), ErrorKind::value, "dtype", "undefined");
  CHECK_BRRR_ERROR(u.device(), ErrorKind::value, "device", "undefined");
  CHECK_BRRR_ERROR(u.numel(), ErrorKind::value, "numel", "undefined");
  CHECK_BRRR_ERROR(u.dim(), ErrorKind::value, "dim", "undefined");
  CHECK_BRRR_ERROR(u.is_contiguous(), ErrorKind::value, "is_contiguous", "undefined");
  CHECK_BRRR_ERROR(u.storage(), ErrorKind::value, "storage", "undefined");
  CHECK_BRRR_ERROR(u.data_ptr(), ErrorKind::value, "data_ptr", "undefined");
  CHECK_BRRR_ERROR(u.is_pinned(), ErrorKind::value, "is_pinned", "undefined");
  CHECK_BRRR_ERROR(u.size(0), ErrorKind::value, "size", "undefined");
  CHECK_BRRR_ERROR(u.stride(0), ErrorKind::value, "stride", "undefined");
  CHECK_BRRR_ERROR(u.itemsize(), ErrorKind::value, "undefined");
  CHECK_BRRR_ERROR(u.nbytes(), ErrorKind::value, "undefined");
  CHECK_BRRR_ERROR(u.view({1}), ErrorKind::value, "view", "undefined");
  CHECK_BRRR_ERROR(u.reshape({1}), ErrorKind::value, "reshape", "undefined");
  CHECK_BRRR_ERROR(u.permute({0}), ErrorKind::value, "permute", "undefined");
  CHECK_BRRR_ERROR(u.transpose(0, 1), ErrorKind::value, "transpose", "undefined");
  CHECK_BRRR_ERROR(u.t(), ErrorKind::value, "t: the tensor is undefined");
  CHECK_BRRR_ERROR(u.slice(0, 0, 1), ErrorKind::value, "slice", "undefined");
  CHECK_BRRR_ERROR(u.narrow(0, 0, 1), ErrorKind::value, "narrow", "undefined");
  CHECK_BRRR_ERROR(u.select(0, 0), ErrorKind::value, "select", "undefined");
  CHECK_BRRR_ERROR(u.expand({2}), ErrorKind::value, "expand", "undefined");
  CHECK_BRRR_ERROR(u.broadcast_to({2}), ErrorKind::value, "broadcast_to", "undefined");
  CHECK_BRRR_ERROR(u.squeeze(), ErrorKind::value, "squeeze", "undefined");
  CHECK_BRRR_ERROR(u.squeeze(0), ErrorKind::value, "squeeze", "undefined");
  CHECK_BRRR_ERROR(u.unsqueeze(0), ErrorKind::value, "unsqueeze", "undefined");
  CHECK_BRRR_ERROR(u.flatten(), ErrorKind::value, "flatten", "undefined");
  CHECK_BRRR_ERROR(u.as_strided({1}, {1}, 0), ErrorKind::value, "as_strided", "undefined");
  CHECK_BRRR_ERROR(u.contiguous(), ErrorKind::value, "contiguous", "undefined");
  CHECK_BRRR_ERROR(u.clone(), ErrorKind::value, "clone", "undefined");
  CHECK_BRRR_ERROR(u.to(DType::f64), ErrorKind::value, "to", "undefined");
  CHECK_BRRR_ERROR(u.to(Device::cpu()), ErrorKind::value, "to", "undefined");
  CHECK_BRRR_ERROR(u.pin_memory(), ErrorKind::value, "pin_memory", "undefined");
  CHECK_BRRR_ERROR(u.fill_(1.0), ErrorKind::value, "fill_", "undefined");
  CHECK_BRRR_ERROR(u.copy_(zeros({1})), ErrorKind::value, "copy_", "undefined");
  CHECK_BRRR_ERROR(zeros({1}).copy_(u), ErrorKind::value, "copy_", "source", "undefined");
  CHECK_BRRR_ERROR(u.to_host<float>(), ErrorKind::value, "to_host", "undefined");
  CHECK_BRRR_ERROR(u.item<float>(), ErrorKind::value, "item", "undefined");
  CHECK_BRRR_ERROR(u.requires_grad(), ErrorKind::value, "requires_grad", "undefined");
  CHECK_BRRR_ERROR(u.requires_grad_(), ErrorKind::value, "requires_grad_", "undefined");
  CHECK_BRRR_ERROR(zeros_like(u), ErrorKind::value, "undefined");
  // Handles compare by identity; a default one is the same as no other.
  CHECK_FALSE(u.is_same(zeros({1})));
  CHECK(u.is_same(Tensor()));
}
