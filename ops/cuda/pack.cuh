// Pack<T, V>: V elements of T moved as one aligned access (16 bytes at most: one vector load
// or store per thread), shared by the elementwise and copy kernels.
#pragma once

namespace brrr::kernels {

template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Four adjacent elements at p: one vector access when VEC (p aligned to 4 elements), else
// four scalar ones. The row kernels' lanes own groups of 4 columns (dropout_add_layer_norm).
template <class T, bool VEC> __device__ __forceinline__ void load4(const T* p, T (&v)[4]) {
  if constexpr (VEC) {
    const Pack<T, 4> x = *reinterpret_cast<const Pack<T, 4>*>(p);
#pragma unroll
    for (int r = 0; r < 4; ++r) v[r] = x.v[r];
  } else {
#pragma unroll
    for (int r = 0; r < 4; ++r) v[r] = p[r];
  }
}
template <class T, bool VEC> __device__ __forceinline__ void store4(T* p, const T (&v)[4]) {
  if constexpr (VEC) {
    Pack<T, 4> x;
#pragma unroll
    for (int r = 0; r < 4; ++r) x.v[r] = v[r];
    *reinterpret_cast<Pack<T, 4>*>(p) = x;
  } else {
#pragma unroll
    for (int r = 0; r < 4; ++r) p[r] = v[r];
  }
}

}  // namespace brrr::kernels
