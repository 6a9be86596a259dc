// The codes a kernel stores in the deferred device error flag (cuda/device_errors.cpp), and
// the thread's "current op" that tells the kernels which public op they run for. A plain
// header included in the global module fragment of each user (brrr.ops and brrr.backend
// files), so the declarations attach to the global module and link across both modules.
#pragma once

namespace brrr::index_errors {
/// Codes of the ops whose kernels validate their inputs (0: none set). 1-6: an index out of
/// range; 7-10: an integer division by zero.
enum : int {
  none = 0, embedding = 1, gather = 2, scatter_add = 3, index_select = 4, one_hot = 5, nll_target = 6,
  floor_divide = 7, trunc_divide = 8, remainder = 9, fmod = 10
};
/// Whether `code` reports a division by zero (otherwise an index out of range).
constexpr bool is_division(int code) { return code >= floor_divide && code <= fmod; }
/// Sets the op code that index kernels launched by this thread report; returns the previous.
int exchange_current_op(int code) noexcept;
/// This thread's current op code, or `fallback` when none is set.
int current_op(int fallback) noexcept;
/// "embedding", "gather", ... for a code ("index kernel" for unknown codes).
const char* op_name(int code) noexcept;
}  // namespace brrr::index_errors
