// Small RAII wrappers over HDF5 ids and the typed attribute/dataset helpers that the
// deck reader/writer and the report writer use, turning every HDF5 failure into a
// uipc::InputError (files we read from users) or uipc::RuntimeError (files we write).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace uipc {

struct Case;

namespace h5 {

// Once per process: silence HDF5's automatic error-stack printing (we report errors
// ourselves, in one line) and disable filter plugins, so a crafted file cannot make
// the library dlopen arbitrary code. Idempotent; every File entry point calls it.
void init();

// Which error a failure raises: reading user input is an InputError, writing our own
// output is a RuntimeError.
enum class ErrorKind { kInput, kRuntime };
[[noreturn]] void fail(ErrorKind kind, const std::string& msg);
// The innermost message of the current thread's HDF5 error stack ("" if none); clears it.
std::string last_hdf5_error();

constexpr hid_t kInvalidId = -1;

// An owning hid_t, closed with Close when the handle dies (never a predefined type).
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = kInvalidId; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = kInvalidId;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = kInvalidId;
  }
  // Closes now and returns HDF5's verdict (a file's flush errors surface here).
  herr_t close() {
    herr_t rc = id_ >= 0 ? Close(id_) : 0;
    id_ = kInvalidId;
    return rc;
  }

 private:
  hid_t id_ = kInvalidId;
};

using FileId = Handle<H5Fclose>;
using ObjectId = Handle<H5Oclose>;  // groups and datasets
using SpaceId = Handle<H5Sclose>;
using TypeId = Handle<H5Tclose>;
using AttrId = Handle<H5Aclose>;
using PlistId = Handle<H5Pclose>;

// Type class of an attribute as the deck reader sees it.
enum class AttrClass { kInteger, kFloat, kString, kBoolEnum, kOther };

// A group or a dataset: something that carries attributes. Every error message starts
// with context() ("FILE:/hdf5/path" unless set otherwise), then the attribute or link
// name, then what is wrong.
class Object {
 public:
  Object() = default;
  Object(ObjectId id, std::string path, std::string context, ErrorKind kind)
      : id_(std::move(id)), path_(std::move(path)), context_(std::move(context)), kind_(kind) {}

  hid_t id() const { return id_.get(); }
  const std::string& path() const { return path_; }  // HDF5 path inside the file
  const std::string& context() const { return context_; }
  void set_context(std::string c) { context_ = std::move(c); }
  ErrorKind kind() const { return kind_; }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const;

  // --- attributes: reading checks class and shape before anything is read
  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  AttrClass attr_class(const std::string& name) const;  // fails when missing
  // Scalar (or one-element 1-D) integer attribute.
  int64_t read_int(const std::string& name) const;
  // Scalar unsigned 64-bit value (a signed integer attribute must be >= 0).
  uint64_t read_uint64(const std::string& name) const;
  // Scalar float or integer attribute, as double.
  double read_double(const std::string& name) const;
  // Integer 0/1, or the FALSE/TRUE enum that h5py writes for Python bools.
  bool read_bool(const std::string& name) const;
  // Scalar string, fixed- or variable-length, ASCII or UTF-8.
  std::string read_string(const std::string& name) const;
  // 1-D array of strings (fixed or variable length) of at most max_items entries; a
  // scalar string is read as a comma-separated list.
  std::vector<std::string> read_string_list(const std::string& name, size_t max_items = 4096) const;
  // 1-D float or integer array, as double.
  std::vector<double> read_double_list(const std::string& name) const;

  // --- attributes: writing replaces an existing attribute of the same name.
  void write_attr(const std::string& name, int64_t v) const;
  void write_attr(const std::string& name, int v) const { write_attr(name, static_cast<int64_t>(v)); }
  void write_attr(const std::string& name, uint64_t v) const;
  void write_attr(const std::string& name, double v) const;
  void write_attr(const std::string& name, const std::string& v) const;  // variable-length UTF-8
  void write_attr(const std::string& name, const char* v) const { write_attr(name, std::string(v)); }
  void write_attr(const std::string& name, const std::vector<std::string>& v) const;
  void write_attr(const std::string& name, const std::vector<double>& v) const;
  void write_attr(const std::string& name, const std::vector<int64_t>& v) const;
  // bool would silently pick the int overload: say what is meant instead.
  void write_attr(const std::string& name, bool v) const = delete;

 protected:
  ObjectId id_;
  std::string path_;
  std::string context_;
  ErrorKind kind_ = ErrorKind::kRuntime;

 private:
  AttrId open_attr(const std::string& name) const;
  void write_scalar(const std::string& name, hid_t file_type, hid_t mem_type, const void* v) const;
};

class Dataset : public Object {
 public:
  using Object::Object;
  std::vector<int64_t> dims() const;
};

// Numeric datasets of this many bytes, inclusive, are written compressed (Group::write_dataset).
inline constexpr size_t kCompressMinBytes = 16 * 1024;
inline constexpr size_t kCompressMaxBytes = 8 * 1024 * 1024;

class Group : public Object {
 public:
  using Object::Object;

  // --- links: anything we open by name must be a hard link (no soft or external
  // links: a deck must not make us read some other file or a path outside the deck).
  bool has_link(const std::string& name) const;
  std::vector<std::string> link_names() const;  // in creation order where tracked, else by name
  Group open_group(const std::string& name) const;
  Group create_group(const std::string& name) const;
  Dataset open_dataset(const std::string& name) const;

  // --- datasets of shape dims (row-major). Those of kCompressMinBytes to kCompressMaxBytes
  // are one chunk with byte shuffle and deflate (HDF5's built-in filters); the rest
  // contiguous, unfiltered.
  Dataset write_dataset(const std::string& name, const std::vector<int64_t>& dims, const double* data) const;
  Dataset write_dataset(const std::string& name, const std::vector<int64_t>& dims, const float* data) const;
  Dataset write_dataset(const std::string& name, const std::vector<int64_t>& dims, const int64_t* data) const;
  // 1-D variable-length UTF-8 strings.
  Dataset write_dataset(const std::string& name, const std::vector<std::string>& v) const;
  // Reads a float or integer dataset (dims filled when given).
  std::vector<double> read_doubles(const std::string& name, std::vector<int64_t>* dims = nullptr) const;
  std::vector<float> read_floats(const std::string& name, std::vector<int64_t>* dims = nullptr) const;
  std::vector<int64_t> read_int64s(const std::string& name, std::vector<int64_t>* dims = nullptr) const;

 private:
  void check_hard_link(const std::string& name) const;
  Dataset write_numeric(const std::string& name, const std::vector<int64_t>& dims, hid_t file_type, hid_t mem_type,
                        const void* data) const;
  void read_numeric(const std::string& name, std::vector<int64_t>* dims, hid_t mem_type, bool integer_target,
                    size_t elem_size, std::vector<char>* out, size_t* count) const;
};

// One HDF5 file, opened for reading (errors are InputError) or created for writing
// (errors are RuntimeError).
class File {
 public:
  // Fails with a one-line message when the file is missing, unreadable, not HDF5.
  static File open_read(const std::string& path);
  // Creates (truncates) path; the library's newest-compatible-with-1.8 format.
  static File create(const std::string& path);

  const std::string& path() const { return path_; }
  ErrorKind kind() const { return kind_; }
  Group root() const;
  // Flushes and closes, failing when HDF5 reports an error (a write is complete only
  // after this returned). Objects opened from the file must be gone by then.
  void close();

 private:
  FileId id_;
  std::string path_;
  ErrorKind kind_ = ErrorKind::kInput;
};

}  // namespace h5

// The deck's per-case attributes, shared by the deck writer and the report (which
// stores each case's spec under the deck's own field names). Defined in deck.cpp.
void write_case_attributes(const h5::Group& g, const Case& c);

}  // namespace uipc
