// brrr.testing — comparing tensors across devices and dtypes, for test suites.
module;
#include <string>
export module brrr.testing;
import brrr.tensor;

export namespace brrr::testing {
}  // namespace brrr::testing
