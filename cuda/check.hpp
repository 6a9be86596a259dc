// Status-check macros for implementation units (macros do not cross module boundaries).
// Each throws brrr::Error(cuda) naming the call and file:line.
#pragma once
#define BRRR_CUDA_CHECK(call) ::brrr::backend::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)
#define BRRR_CUBLAS_CHECK(call) ::brrr::backend::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__)
#define BRRR_CURAND_CHECK(call) ::brrr::backend::check_curand(static_cast<int>(call), #call, __FILE__, __LINE__)
