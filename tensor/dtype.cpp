module;
#include <bit>
#include <cstdint>
#include <cstring>
#include <ostream>
module brrr.tensor;

namespace brrr {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << to_string(dtype); }

// bfloat16: keep the top half of the f32 bits, rounding the dropped half to nearest even.
bfloat16::bfloat16(float value) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet and NaN
    bits = static_cast<std::uint16_t>((u >> 16) | 0x0040u);
    return;
  }
  std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  bits = static_cast<std::uint16_t>((u + rounding) >> 16);
}
bfloat16::operator float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

// IEEE binary16 <-> binary32 (round to nearest even, subnormals, inf and NaN handled).
half::half(float value) {
  std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  std::uint32_t sign = (f >> 16) & 0x8000u;
  std::uint32_t abs = f & 0x7fffffffu;
  std::uint16_t h;
  if (abs > 0x7f800000u) {
    h = static_cast<std::uint16_t>(0x7e00u);  // NaN
  } else if (abs >= 0x477ff000u) {
    h = 0x7c00u;  // overflow to inf (values >= 65520 round to inf)
  } else if (abs < 0x38800000u) {
    // subnormal half (or zero): value = abs_float / 2^-24, rounded to nearest even
    float magnitude = std::bit_cast<float>(abs);
    // adding 0.5f (2^-1) aligns the half-subnormal unit (2^-24) at the f32 mantissa's LSB
    // region: use the classic "magic number" trick.
    float r = magnitude + std::bit_cast<float>(0x3f000000u);  // + 0.5
    h = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(r) - 0x3f000000u);
  } else {
    std::uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    h = static_cast<std::uint16_t>(abs >> 13);
  }
  bits = static_cast<std::uint16_t>(h | sign);
}

half::operator float() const {
  std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t mant = bits & 0x3ffu;
  std::uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: mant * 2^-24
      float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
      out = sign | std::bit_cast<std::uint32_t>(v);
    }
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

}  // namespace brrr
