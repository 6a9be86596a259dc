// The cases of the edge-semantics suites (issue 9; docs/semantics.md), written once and run
// on a given device: tests/ops/test_edge_semantics.cpp runs them on the CPU,
// tests/gpu/test_edge_semantics_parity.cpp on CUDA, where it also compares what they return
// with the CPU's results. Each case checks PyTorch 2.11's values: hand-computed ones, or a
// float64 reference computed here from the input's host values (after rounding to the
// dtype). The random cases return their outputs and gradients (Results) for that comparison.
//
// Include AFTER `import brrr;` and tests/tensor/helpers.hpp, in a doctest file that has
// already included <doctest/doctest.h>, <algorithm>, <array>, <cmath>, <cstdint>,
// <functional>, <limits>, <memory>, <random>, <sstream>, <string> and <vector>.
#pragma once

// The cases, by concept:
#include "tests/ops/edge_common.hpp"      // comparisons, inputs, Results
#include "tests/ops/edge_reductions.hpp"  // softmax, empty reductions, cross_entropy, var/std
#include "tests/ops/edge_kinks.hpp"       // kinks, ties, where
#include "tests/ops/edge_layers.hpp"      // pools, embedding, amsgrad
