// Tensor view helpers: sizes, reshapes, row slices, shape strings, overlap.
#include "dapo/core/tensor.h"

namespace dapo {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  DAPO_FAIL("bad dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_)
    : data(data_), dtype(dtype_), device(device_), ndim(int(dims.size())) {
  DAPO_CHECK(ndim <= kMaxDims, "tensor with ", ndim, " dimensions (at most ", kMaxDims, ")");
  int i = 0;
  for (int64_t d : dims) {
    DAPO_CHECK(d >= 0, "negative dimension ", d);
    shape[i++] = d;
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::size(int dim) const {
  const int d = dim < 0 ? ndim + dim : dim;
  DAPO_CHECK(d >= 0 && d < ndim, "dimension ", dim, " of a ", ndim, "-d tensor");
  return shape[d];
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims, device);
  DAPO_CHECK(t.numel() == numel(), "reshape ", shape_string(), " -> ", t.shape_string());
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  DAPO_CHECK(ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0], "rows [", begin, ", ",
             end, ") of ", shape_string());
  Tensor t = *this;
  const int64_t row = shape[0] == 0 ? 0 : numel() / shape[0];
  t.data = static_cast<char*>(data) + size_t(begin * row) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

bool Tensor::same_shape(const Tensor& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (shape[i] != o.shape[i]) return false;
  return true;
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.data == nullptr || y.data == nullptr || x.nbytes() == 0 || y.nbytes() == 0) return false;
  const char* xb = static_cast<const char*>(x.data);
  const char* yb = static_cast<const char*>(y.data);
  return xb < yb + y.nbytes() && yb < xb + x.nbytes();
}

namespace detail {
bool shape_is(const Tensor& t, std::initializer_list<int64_t> dims) {
  if (t.ndim != int(dims.size())) return false;
  int i = 0;
  for (int64_t d : dims)
    if (t.shape[i++] != d) return false;
  return true;
}
std::string dims_string(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  int i = 0;
  for (int64_t d : dims) s += (i++ ? ", " : "") + std::to_string(d);
  return s + ")";
}
}  // namespace detail

}  // namespace dapo
