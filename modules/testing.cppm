// brrr.testing — comparing tensors across devices and dtypes, for test suites (e.g. CPU
// results against GPU results).
module;
#include <optional>
#include <string>
export module brrr.testing;
import brrr.tensor;

export namespace brrr::testing {

/// Tolerances: |actual - expected| <= atol + rtol * |expected| elementwise. Unset values take
/// PyTorch's defaults for the less precise of the two dtypes: f64 1e-7/1e-7, f32 1.3e-6/1e-5,
/// f16 1e-3/1e-5, bf16 1.6e-2/1e-5, integers and bool exact.
struct CloseOptions {
  std::optional<double> rtol;
  std::optional<double> atol;
  bool equal_nan = false;  ///< NaN == NaN counts as close
};

/// Throws Error(value) unless shapes are equal and every element is close. The message names
/// the worst element's index, both values, the tolerance there and how many elements failed.
/// Tensors may be on any devices and of any dtypes (both are read back as f64: a sync point
/// for CUDA tensors).
void assert_close(const Tensor& actual, const Tensor& expected, CloseOptions options = {});
/// True when assert_close would not throw (shape mismatch gives false).
bool allclose(const Tensor& actual, const Tensor& expected, CloseOptions options = {});

}  // namespace brrr::testing
