// Tensor: a non-owning view of contiguous, row-major memory with a dtype, a
// shape of up to kMaxDims dimensions and the device that holds it. Memory is
// owned by arenas (arena.h) or by parameter buffers; views are cheap to copy
// and are what ops, collectives and I/O take.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "dapo/core/bf16.h"
#include "dapo/core/error.h"

namespace dapo {

enum class DType : uint8_t { f32, bf16, i32, i64 };
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

struct Tensor {
  static constexpr int kMaxDims = 5;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> dims, Device device = Device::cpu);

  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  // size(-1) is the last dimension.
  int64_t size(int dim) const;
  bool empty() const { return numel() == 0; }
  // False for Tensor{}: how an op is told that an optional input or output
  // (a bias, an upstream gradient) is left out.
  bool defined() const { return ndim > 0 || data != nullptr; }

  // Typed pointer; fails if T does not match the dtype.
  template <class T>
  T* ptr() const {
    DAPO_CHECK(dtype == dtype_of<T>(), "tensor is ", dtype_name(dtype), ", not ",
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(data);
  }

  // Same memory, another shape with the same number of elements.
  Tensor reshape(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of the first dimension.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  std::string shape_string() const;  // "(2, 3, 4)"
  bool same_shape(const Tensor& other) const;
};

// Whether the bytes of x and y intersect. Tensors without elements or data
// never do. Ops and collectives use it to refuse an output that aliases an
// input in part (which would read values already overwritten).
bool overlaps(const Tensor& x, const Tensor& y);

// Typed constructors for host views: tensor_f32(ptr, {T, C}).
inline Tensor tensor_f32(float* p, std::initializer_list<int64_t> d) { return Tensor(p, DType::f32, d); }
inline Tensor tensor_i32(int32_t* p, std::initializer_list<int64_t> d) { return Tensor(p, DType::i32, d); }
inline Tensor tensor_i64(int64_t* p, std::initializer_list<int64_t> d) { return Tensor(p, DType::i64, d); }
inline Tensor tensor_bf16(bf16* p, std::initializer_list<int64_t> d) { return Tensor(p, DType::bf16, d); }

}  // namespace dapo

// Shape checks used by ops: DAPO_CHECK_SHAPE(x, {T, C}) fails with both shapes.
#define DAPO_CHECK_SHAPE(t, ...) DAPO_CHECK(::dapo::detail::shape_is((t), __VA_ARGS__), \
    #t " has shape ", (t).shape_string(), ", expected ", ::dapo::detail::dims_string(__VA_ARGS__))
#define DAPO_CHECK_DTYPE(t, dt) DAPO_CHECK((t).dtype == (dt), #t " is ", \
    ::dapo::dtype_name((t).dtype), ", expected ", ::dapo::dtype_name(dt))

namespace dapo::detail {
bool shape_is(const Tensor& t, std::initializer_list<int64_t> dims);
std::string dims_string(std::initializer_list<int64_t> dims);
}  // namespace dapo::detail
