#include <doctest/doctest.h>
import brrr;
using namespace brrr;
TEST_CASE("placeholder") { CHECK(itemsize(DType::f32) == 4); }
