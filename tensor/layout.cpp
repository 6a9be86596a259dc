module;
#include <cstdint>
#include <string>
#include <vector>
module brrr.tensor;

namespace brrr {

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t checked_numel(const Shape& sizes, const char* op) {
  for (std::int64_t s : sizes)
    if (s < 0)
      throw Error(ErrorKind::value, std::string(op) + ": negative size in shape " + to_string(sizes));
  // A zero-size dim makes numel 0 even if the others would overflow.
  for (std::int64_t s : sizes)
    if (s == 0) return 0;
  std::int64_t n = 1;
  for (std::int64_t s : sizes) {
    if (n > INT64_MAX / s)
      throw Error(ErrorKind::value, std::string(op) + ": shape " + to_string(sizes) +
                                        " has more than 2^63 elements");
    n *= s;
  }
  return n;
}

Layout Layout::contiguous(Shape sizes) {
  Layout l;
  l.strides.assign(sizes.size(), 1);
  std::int64_t stride = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    l.strides[i] = stride;
    // Only an empty tensor ([2^40, 0, 2^40]) can overflow here, where strides don't matter.
    if (__builtin_mul_overflow(stride, sizes[i] > 1 ? sizes[i] : 1, &stride)) stride = INT64_MAX;
  }
  l.sizes = std::move(sizes);
  return l;
}

std::int64_t Layout::numel() const {
  // Zero first: [2^40, 2^40, 0] is empty, and the product of the others would overflow.
  for (std::int64_t s : sizes)
    if (s == 0) return 0;
  std::int64_t n = 1;
  for (std::int64_t s : sizes) n *= s;
  return n;
}

bool Layout::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

}  // namespace brrr
