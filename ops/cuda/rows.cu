#include "ops/cuda/common.cuh"
