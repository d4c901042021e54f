// Private to the io module: DAPO_H5_CHECK around every HDF5 call, HDF5's
// error stack as text, and RAII for HDF5 identifiers. Only src/io includes
// hdf5.h (which pulls in mpi.h: the documented exception to "only the
// parallel module includes mpi.h").
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "dapo/core/error.h"

namespace dapo::io::detail {

static_assert(sizeof(hid_t) == sizeof(int64_t), "H5File stores hid_t as int64_t (HDF5 >= 1.10)");

// Turns off HDF5's printing of its error stack to stderr: failures are
// reported once, by us, with the stack's text in the message.
void h5_quiet();
// The current thread's HDF5 error stack as one line ("H5Dopen2: not found;
// ..."), innermost cause last; the stack is cleared.
std::string h5_error_stack();
// Why a write-side call (H5Dwrite, H5Dcreate2, H5Fclose) failed: empty for
// rc >= 0, else errno `err`'s text (a full disk, a quota, a size limit) with
// the HDF5 stack. Call it before any other HDF5 call clears that stack.
std::string write_failure(int64_t rc, int err);

// An HDF5 identifier closed by its own close function (H5Dclose, H5Sclose...).
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, -1)), closer_(o.closer_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      closer_ = o.closer_;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

}  // namespace dapo::io::detail

// Evaluates an HDF5 call, returns its result; a negative result (failure)
// is fatal, with the call, file:line, rank, host and HDF5's error stack.
#define DAPO_H5_CHECK(call)                                                                    \
  ([&] {                                                                                       \
    const auto dapo_h5_rc_ = (call);                                                           \
    if (dapo_h5_rc_ < 0) [[unlikely]]                                                          \
      ::dapo::fatal(__FILE__, __LINE__, ::dapo::cat(#call ": ", ::dapo::io::detail::h5_error_stack())); \
    return dapo_h5_rc_;                                                                        \
  }())

namespace dapo::io::detail {

// For reads of files we did not write: a failed call is bad input, not a
// bug. Returns `rc`, or throws UserError("<context>: <HDF5 error stack>").
template <class T>
T h5_or_throw(T rc, const std::string& context) {
  if (rc < 0) throw UserError(cat(context, ": ", h5_error_stack()));
  return rc;
}

}  // namespace dapo::io::detail
