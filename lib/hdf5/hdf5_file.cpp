// The HDF5 wrappers: typed, shape-checked attribute and dataset access with one-line
// errors naming the file and object, over the HDF5 1.10+ C API.
#include "lib/hdf5/hdf5_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>

#include "base/error.hpp"

namespace uipc {
namespace h5 {

namespace {

// Attribute strings and lists from users are small; anything bigger is a hostile or
// broken file, refused before we allocate for it.
constexpr size_t kMaxStringBytes = 1 << 20;
constexpr int kMaxRank = 32;
constexpr int64_t kMaxLinks = 1 << 20;

std::string describe_class(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    case H5T_ENUM: return "an enum";
    case H5T_COMPOUND: return "a compound";
    case H5T_ARRAY: return "an array type";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_REFERENCE: return "a reference";
    case H5T_OPAQUE: return "an opaque value";
    case H5T_BITFIELD: return "a bitfield";
    case H5T_TIME: return "a time";
    default: return "an unknown type";
  }
}

std::string shape_string(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

bool valid_link_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// A string type for writing: variable length, UTF-8, NUL-terminated (what h5py writes).
TypeId vlen_utf8_type() {
  TypeId t(H5Tcopy(H5T_C_S1));
  if (!t.valid() || H5Tset_size(t.get(), H5T_VARIABLE) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    throw RuntimeError("HDF5: cannot build a UTF-8 string type: " + last_hdf5_error());
  return t;
}

// The dataspace of an attribute or dataset: its dims ({} for a scalar); fails on a null
// dataspace (h5py's Empty) or absurd ranks.
std::vector<hsize_t> space_dims(const Object& o, const std::string& name, hid_t space) {
  H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) return {};
  if (cls == H5S_NULL) o.fail(name, "has no value (empty dataspace)");
  if (cls != H5S_SIMPLE) o.fail(name, "has an unreadable dataspace: " + last_hdf5_error());
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > kMaxRank) o.fail(name, "has an unreadable or absurd rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0)
    o.fail(name, "has an unreadable dataspace: " + last_hdf5_error());
  return dims;
}

uint64_t element_count(const std::vector<hsize_t>& dims) {
  uint64_t n = 1;
  for (hsize_t d : dims) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) return std::numeric_limits<uint64_t>::max();
    n *= d;
  }
  return n;
}

// Reads n strings (fixed or variable length) of attribute `attr` with file type `ftype`.
std::vector<std::string> read_strings_attr(const Object& o, const std::string& name, hid_t attr, hid_t ftype,
                                           hid_t space, size_t n) {
  std::vector<std::string> out;
  if (n == 0) return out;  // HDF5 refuses a read into no buffer
  out.reserve(n);
  H5T_cset_t cset = H5Tget_cset(ftype);
  htri_t is_vlen = H5Tis_variable_str(ftype);
  if (is_vlen < 0 || cset < 0) o.fail(name, "has an unreadable string type: " + last_hdf5_error());
  TypeId mem(H5Tcopy(H5T_C_S1));
  if (!mem.valid() || H5Tset_cset(mem.get(), cset) < 0) o.fail(name, "cannot read strings: " + last_hdf5_error());
  if (is_vlen > 0) {
    if (H5Tset_size(mem.get(), H5T_VARIABLE) < 0) o.fail(name, "cannot read strings: " + last_hdf5_error());
    std::vector<char*> ptrs(n, nullptr);
    if (H5Aread(attr, mem.get(), ptrs.data()) < 0) o.fail(name, "cannot read: " + last_hdf5_error());
    bool too_long = false;
    for (char* p : ptrs) {
      size_t len = p ? std::strlen(p) : 0;
      if (len > kMaxStringBytes) too_long = true;
      out.emplace_back(p ? std::string(p, len) : std::string());
    }
    // The library allocated the strings; it must free them.
#if H5_VERSION_GE(1, 12, 0)
    H5Treclaim(mem.get(), space, H5P_DEFAULT, ptrs.data());
#else
    H5Dvlen_reclaim(mem.get(), space, H5P_DEFAULT, ptrs.data());
#endif
    if (too_long) o.fail(name, "has a string longer than " + std::to_string(kMaxStringBytes) + " bytes");
    return out;
  }
  size_t size = H5Tget_size(ftype);
  if (size == 0 || size > kMaxStringBytes || n > kMaxStringBytes / size)
    o.fail(name, "has absurdly long fixed-length strings");
  H5T_str_t pad = H5Tget_strpad(ftype);
  if (H5Tset_size(mem.get(), size) < 0 || H5Tset_strpad(mem.get(), pad) < 0)
    o.fail(name, "cannot read strings: " + last_hdf5_error());
  std::vector<char> buf(size * n, '\0');
  if (H5Aread(attr, mem.get(), buf.data()) < 0) o.fail(name, "cannot read: " + last_hdf5_error());
  for (size_t i = 0; i < n; ++i) {
    const char* p = buf.data() + i * size;
    size_t len = strnlen(p, size);
    if (pad == H5T_STR_SPACEPAD)
      while (len > 0 && p[len - 1] == ' ') --len;
    out.emplace_back(p, len);
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    size_t a = item.find_first_not_of(" \t");
    size_t b = item.find_last_not_of(" \t");
    item = a == std::string::npos ? std::string() : item.substr(a, b - a + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// Is `t` the FALSE=0 / TRUE=1 enum that h5py (numpy bool) writes?
bool is_bool_enum(hid_t t) {
  if (H5Tget_class(t) != H5T_ENUM || H5Tget_nmembers(t) != 2) return false;
  bool ok = true;
  for (unsigned i = 0; i < 2 && ok; ++i) {
    char* nm = H5Tget_member_name(t, i);
    if (!nm) return false;
    ok = std::string(nm) == (i == 0 ? "FALSE" : "TRUE");
    H5free_memory(nm);
  }
  if (!ok) return false;
  long long v0 = -1, v1 = -1;
  TypeId super(H5Tget_super(t));
  if (!super.valid() || H5Tget_size(super.get()) > sizeof(long long)) return false;
  // Member values come out in the enum's base type; convert to long long for the check.
  unsigned char raw[2][sizeof(long long)] = {};
  if (H5Tget_member_value(t, 0, raw[0]) < 0 || H5Tget_member_value(t, 1, raw[1]) < 0) return false;
  if (H5Tconvert(super.get(), H5T_NATIVE_LLONG, 1, raw[0], nullptr, H5P_DEFAULT) < 0 ||
      H5Tconvert(super.get(), H5T_NATIVE_LLONG, 1, raw[1], nullptr, H5P_DEFAULT) < 0)
    return false;
  std::memcpy(&v0, raw[0], sizeof v0);
  std::memcpy(&v1, raw[1], sizeof v1);
  return v0 == 0 && v1 == 1;
}

}  // namespace

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    // Decks come from users: never load a filter plugin a file asks for.
    H5PLset_loading_state(0);
  });
  // Per thread in thread-safe builds, so not only once.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

void fail(ErrorKind kind, const std::string& msg) {
  if (kind == ErrorKind::kInput) throw InputError(msg);
  throw RuntimeError(msg);
}

std::string last_hdf5_error() {
  struct Walk {
    std::string text;
    static herr_t cb(unsigned n, const H5E_error2_t* e, void* data) {
      auto* w = static_cast<Walk*>(data);
      if (n == 0 && e) {  // innermost entry: the most specific cause
        if (e->desc && *e->desc) {
          w->text = e->desc;
        } else {
          char buf[256] = {};
          if (H5Eget_msg(e->min_num, nullptr, buf, sizeof buf) > 0) w->text = buf;
        }
      }
      return 0;
    }
  } walk;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, &Walk::cb, &walk);
  H5Eclear2(H5E_DEFAULT);
  return walk.text.empty() ? std::string("HDF5 call failed") : walk.text;
}

// ---------------------------------------------------------------- Object

void Object::fail(const std::string& name, const std::string& what) const {
  h5::fail(kind_, context_ + ": " + (name.empty() ? std::string() : name + ": ") + what);
}

bool Object::has_attr(const std::string& name) const {
  htri_t e = H5Aexists(id(), name.c_str());
  if (e < 0) fail(name, "cannot check for attribute: " + last_hdf5_error());
  return e > 0;
}

std::vector<std::string> Object::attr_names() const {
  std::vector<std::string> names;
  auto cb = [](hid_t, const char* nm, const H5A_info_t*, void* data) -> herr_t {
    auto* v = static_cast<std::vector<std::string>*>(data);
    if (v->size() >= static_cast<size_t>(kMaxLinks)) return -1;
    v->emplace_back(nm);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names) < 0)
    fail("", "cannot list attributes: " + last_hdf5_error());
  return names;
}

AttrId Object::open_attr(const std::string& name) const {
  if (!has_attr(name)) fail(name, "missing");
  AttrId a(H5Aopen(id(), name.c_str(), H5P_DEFAULT));
  if (!a.valid()) fail(name, "cannot open attribute: " + last_hdf5_error());
  return a;
}

AttrClass Object::attr_class(const std::string& name) const {
  AttrId a = open_attr(name);
  TypeId t(H5Aget_type(a.get()));
  if (!t.valid()) fail(name, "has an unreadable type: " + last_hdf5_error());
  switch (H5Tget_class(t.get())) {
    case H5T_INTEGER: return AttrClass::kInteger;
    case H5T_FLOAT: return AttrClass::kFloat;
    case H5T_STRING: return AttrClass::kString;
    case H5T_ENUM: return is_bool_enum(t.get()) ? AttrClass::kBoolEnum : AttrClass::kOther;
    default: return AttrClass::kOther;
  }
}

namespace {

// Opened attribute with its type and the number of elements, after checking the type
// class against `allowed` and the shape (scalar or one element, unless list).
struct OpenedAttr {
  AttrId attr;
  TypeId type;
  SpaceId space;
  size_t count = 0;
  H5T_class_t cls = H5T_NO_CLASS;
};

OpenedAttr open_checked(const Object& o, AttrId attr, const std::string& name,
                        std::initializer_list<H5T_class_t> allowed, const char* expected, bool list,
                        size_t max_items = 1) {
  OpenedAttr r;
  r.attr = std::move(attr);
  r.type = TypeId(H5Aget_type(r.attr.get()));
  if (!r.type.valid()) o.fail(name, "has an unreadable type: " + last_hdf5_error());
  r.cls = H5Tget_class(r.type.get());
  bool ok = false;
  for (H5T_class_t c : allowed) ok = ok || c == r.cls;
  if (r.cls == H5T_ENUM && !is_bool_enum(r.type.get())) ok = false;
  if (!ok) o.fail(name, std::string("expected ") + expected + ", found " + describe_class(r.cls));
  r.space = SpaceId(H5Aget_space(r.attr.get()));
  if (!r.space.valid()) o.fail(name, "has an unreadable dataspace: " + last_hdf5_error());
  std::vector<hsize_t> dims = space_dims(o, name, r.space.get());
  if (list) {
    if (dims.size() > 1) o.fail(name, std::string("expected a 1-D list, found shape ") + shape_string(dims));
    r.count = dims.empty() ? 1 : static_cast<size_t>(dims[0]);
    if (r.count > max_items)
      o.fail(name, "has " + std::to_string(r.count) + " entries (at most " + std::to_string(max_items) + ")");
  } else {
    if (element_count(dims) != 1 || dims.size() > 1)
      o.fail(name, std::string("expected a single value, found shape ") + shape_string(dims));
    r.count = 1;
  }
  return r;
}

}  // namespace

int64_t Object::read_int(const std::string& name) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_INTEGER}, "an integer", false);
  if (H5Tget_size(a.type.get()) > 8) fail(name, "is an integer wider than 64 bits");
  if (H5Tget_sign(a.type.get()) == H5T_SGN_NONE) {
    uint64_t u = 0;
    if (H5Aread(a.attr.get(), H5T_NATIVE_UINT64, &u) < 0) fail(name, "cannot read: " + last_hdf5_error());
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(name, std::to_string(u) + " is out of range");
    return static_cast<int64_t>(u);
  }
  int64_t v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &v) < 0) fail(name, "cannot read: " + last_hdf5_error());
  return v;
}

uint64_t Object::read_uint64(const std::string& name) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_INTEGER}, "an integer", false);
  if (H5Tget_size(a.type.get()) > 8) fail(name, "is an integer wider than 64 bits");
  if (H5Tget_sign(a.type.get()) == H5T_SGN_NONE) {
    uint64_t u = 0;
    if (H5Aread(a.attr.get(), H5T_NATIVE_UINT64, &u) < 0) fail(name, "cannot read: " + last_hdf5_error());
    return u;
  }
  int64_t v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &v) < 0) fail(name, "cannot read: " + last_hdf5_error());
  if (v < 0) fail(name, std::to_string(v) + " is negative (allowed: 0 .. 2^64-1)");
  return static_cast<uint64_t>(v);
}

double Object::read_double(const std::string& name) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_FLOAT, H5T_INTEGER}, "a number", false);
  double v = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail(name, "cannot read: " + last_hdf5_error());
  return v;
}

bool Object::read_bool(const std::string& name) const {
  OpenedAttr a =
      open_checked(*this, open_attr(name), name, {H5T_INTEGER, H5T_ENUM}, "an integer 0/1 or a boolean", false);
  long long v = 0;
  if (a.cls == H5T_ENUM) {
    // No enum -> integer conversion in HDF5: read the raw base value and convert it.
    // The value lands in the native enum's base type, which is what we convert from.
    TypeId mem(H5Tget_native_type(a.type.get(), H5T_DIR_ASCEND));
    TypeId super(mem.valid() ? H5Tget_super(mem.get()) : kInvalidId);
    size_t size = super.valid() ? H5Tget_size(super.get()) : 0;
    if (size == 0 || size > sizeof(long long)) fail(name, "has an unreadable boolean type");
    unsigned char raw[sizeof(long long)] = {};
    if (H5Aread(a.attr.get(), mem.get(), raw) < 0 ||
        H5Tconvert(super.get(), H5T_NATIVE_LLONG, 1, raw, nullptr, H5P_DEFAULT) < 0)
      fail(name, "cannot read: " + last_hdf5_error());
    std::memcpy(&v, raw, sizeof v);
  } else {
    if (H5Tget_size(a.type.get()) > 8) fail(name, "is an integer wider than 64 bits");
    if (H5Aread(a.attr.get(), H5T_NATIVE_LLONG, &v) < 0) fail(name, "cannot read: " + last_hdf5_error());
  }
  if (v != 0 && v != 1) fail(name, "must be 0 or 1, found " + std::to_string(v));
  return v == 1;
}

std::string Object::read_string(const std::string& name) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_STRING}, "a string", false);
  return read_strings_attr(*this, name, a.attr.get(), a.type.get(), a.space.get(), 1).at(0);
}

std::vector<std::string> Object::read_string_list(const std::string& name, size_t max_items) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_STRING}, "a list of strings", true, max_items);
  std::vector<hsize_t> dims = space_dims(*this, name, a.space.get());
  std::vector<std::string> v = read_strings_attr(*this, name, a.attr.get(), a.type.get(), a.space.get(), a.count);
  if (dims.empty()) return split_commas(v.at(0));  // scalar "a,b": a convenience for hand-made decks
  return v;
}

std::vector<double> Object::read_double_list(const std::string& name) const {
  OpenedAttr a = open_checked(*this, open_attr(name), name, {H5T_FLOAT, H5T_INTEGER}, "a list of numbers", true,
                              std::numeric_limits<size_t>::max() / sizeof(double));
  std::vector<double> v(a.count);
  if (a.count > 0 && H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, v.data()) < 0)
    fail(name, "cannot read: " + last_hdf5_error());
  return v;
}

void Object::write_scalar(const std::string& name, hid_t file_type, hid_t mem_type, const void* v) const {
  if (has_attr(name) && H5Adelete(id(), name.c_str()) < 0)
    fail(name, "cannot replace attribute: " + last_hdf5_error());
  SpaceId space(H5Screate(H5S_SCALAR));
  AttrId a(space.valid() ? H5Acreate2(id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)
                         : kInvalidId);
  if (!a.valid()) fail(name, "cannot create attribute: " + last_hdf5_error());
  if (H5Awrite(a.get(), mem_type, v) < 0) fail(name, "cannot write attribute: " + last_hdf5_error());
}

void Object::write_attr(const std::string& name, int64_t v) const {
  write_scalar(name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

void Object::write_attr(const std::string& name, uint64_t v) const {
  write_scalar(name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

void Object::write_attr(const std::string& name, double v) const {
  write_scalar(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

void Object::write_attr(const std::string& name, const std::string& v) const {
  TypeId t = vlen_utf8_type();
  const char* p = v.c_str();
  write_scalar(name, t.get(), t.get(), &p);
}

void Object::write_attr(const std::string& name, const std::vector<std::string>& v) const {
  if (has_attr(name) && H5Adelete(id(), name.c_str()) < 0)
    fail(name, "cannot replace attribute: " + last_hdf5_error());
  TypeId t = vlen_utf8_type();
  hsize_t n = v.size();
  SpaceId space(H5Screate_simple(1, &n, nullptr));
  AttrId a(space.valid() ? H5Acreate2(id(), name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)
                         : kInvalidId);
  if (!a.valid()) fail(name, "cannot create attribute: " + last_hdf5_error());
  std::vector<const char*> ptrs;
  ptrs.reserve(v.size());
  for (const std::string& s : v) ptrs.push_back(s.c_str());
  if (!v.empty() && H5Awrite(a.get(), t.get(), ptrs.data()) < 0)
    fail(name, "cannot write attribute: " + last_hdf5_error());
}

namespace {
// A 1-D numeric attribute of n values (replacing one of the same name).
void write_array_attr(const Object& o, const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                      size_t n) {
  if (o.has_attr(name) && H5Adelete(o.id(), name.c_str()) < 0)
    o.fail(name, "cannot replace attribute: " + last_hdf5_error());
  hsize_t dim = n;
  SpaceId space(H5Screate_simple(1, &dim, nullptr));
  AttrId a(space.valid() ? H5Acreate2(o.id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT)
                         : kInvalidId);
  if (!a.valid()) o.fail(name, "cannot create attribute: " + last_hdf5_error());
  if (n > 0 && H5Awrite(a.get(), mem_type, data) < 0) o.fail(name, "cannot write attribute: " + last_hdf5_error());
}
}  // namespace

void Object::write_attr(const std::string& name, const std::vector<double>& v) const {
  write_array_attr(*this, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), v.size());
}

void Object::write_attr(const std::string& name, const std::vector<int64_t>& v) const {
  write_array_attr(*this, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v.data(), v.size());
}

// ---------------------------------------------------------------- Dataset

std::vector<int64_t> Dataset::dims() const {
  SpaceId space(H5Dget_space(id()));
  if (!space.valid()) fail("", "has an unreadable dataspace: " + last_hdf5_error());
  std::vector<int64_t> out;
  for (hsize_t d : space_dims(*this, "", space.get())) out.push_back(static_cast<int64_t>(d));
  return out;
}

// ---------------------------------------------------------------- Group

namespace {
std::string child_path(const std::string& parent, const std::string& name) {
  return parent == "/" ? "/" + name : parent + "/" + name;
}
std::string child_context(const Object& parent, const std::string& name) {
  return parent.context() + (parent.path() == "/" ? ":/" : "/") + name;
}
}  // namespace

bool Group::has_link(const std::string& name) const {
  if (!valid_link_name(name)) fail(name, "is not a valid object name");
  htri_t e = H5Lexists(id(), name.c_str(), H5P_DEFAULT);
  if (e < 0) fail(name, "cannot check for link: " + last_hdf5_error());
  return e > 0;
}

void Group::check_hard_link(const std::string& name) const {
  if (!has_link(name)) fail(name, "missing");
  H5L_info_t info;
  if (H5Lget_info(id(), name.c_str(), &info, H5P_DEFAULT) < 0) fail(name, "cannot read link: " + last_hdf5_error());
  switch (info.type) {
    case H5L_TYPE_HARD: return;
    case H5L_TYPE_SOFT: fail(name, "is a soft link (links are refused: store the object itself)");
    case H5L_TYPE_EXTERNAL: fail(name, "is an external link (links are refused: store the object itself)");
    default: fail(name, "is a user-defined link (links are refused: store the object itself)");
  }
}

std::vector<std::string> Group::link_names() const {
  H5G_info_t info;
  if (H5Gget_info(id(), &info) < 0) fail("", "cannot list members: " + last_hdf5_error());
  if (info.nlinks > static_cast<hsize_t>(kMaxLinks)) fail("", "has an absurd number of members");
  PlistId gcpl(H5Gget_create_plist(id()));
  unsigned order = 0;
  if (gcpl.valid()) H5Pget_link_creation_order(gcpl.get(), &order);
  H5_index_t index = (order & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0 || static_cast<size_t>(len) > kMaxStringBytes) fail("", "cannot list members: " + last_hdf5_error());
    std::string nm(static_cast<size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, &nm[0], nm.size(), H5P_DEFAULT) < 0)
      fail("", "cannot list members: " + last_hdf5_error());
    nm.resize(static_cast<size_t>(len));
    names.push_back(nm);
  }
  return names;
}

Group Group::open_group(const std::string& name) const {
  check_hard_link(name);
  ObjectId o(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
  if (!o.valid()) fail(name, "cannot open: " + last_hdf5_error());
  if (H5Iget_type(o.get()) != H5I_GROUP) fail(name, "is not a group");
  return Group(std::move(o), child_path(path(), name), child_context(*this, name), kind());
}

Dataset Group::open_dataset(const std::string& name) const {
  check_hard_link(name);
  ObjectId o(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
  if (!o.valid()) fail(name, "cannot open: " + last_hdf5_error());
  if (H5Iget_type(o.get()) != H5I_DATASET) fail(name, "is not a dataset");
  return Dataset(std::move(o), child_path(path(), name), child_context(*this, name), kind());
}

Group Group::create_group(const std::string& name) const {
  if (has_link(name)) fail(name, "already exists");
  // Creation order, so that h5py and h5dump list members and attributes as written;
  // no timestamps, so that regenerating a file gives the same bytes.
  PlistId gcpl(H5Pcreate(H5P_GROUP_CREATE));
  if (!gcpl.valid() || H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
      H5Pset_attr_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
      H5Pset_obj_track_times(gcpl.get(), 0) < 0)
    fail(name, "cannot set up group: " + last_hdf5_error());
  ObjectId g(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
  if (!g.valid()) fail(name, "cannot create group: " + last_hdf5_error());
  return Group(std::move(g), child_path(path(), name), child_context(*this, name), kind());
}

Dataset Group::write_numeric(const std::string& name, const std::vector<int64_t>& dims, hid_t file_type,
                             hid_t mem_type, const void* data) const {
  if (has_link(name)) fail(name, "already exists");
  if (dims.size() > static_cast<size_t>(kMaxRank)) fail(name, "has an absurd rank");
  std::vector<hsize_t> hd;
  for (int64_t d : dims) {
    if (d < 0) fail(name, "negative dimension");
    hd.push_back(static_cast<hsize_t>(d));
  }
  SpaceId space(hd.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr));
  PlistId dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!space.valid() || !dcpl.valid() || H5Pset_obj_track_times(dcpl.get(), 0) < 0 ||
      H5Pset_attr_creation_order(dcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0)
    fail(name, "cannot set up dataset: " + last_hdf5_error());
  // A report's timings (every layer's stages, host enqueue, V's copy: tens to hundreds of KB a
  // run) compress to about a third with byte shuffle and deflate, HDF5's built-in filters,
  // which every HDF5 reader (h5py too) undoes: one chunk a dataset. Small datasets stay
  // contiguous; large ones (tensor dumps) too, where deflate would cost seconds a GB.
  const size_t bytes = element_count(hd) * H5Tget_size(file_type);
  if (!hd.empty() && bytes >= kCompressMinBytes && bytes <= kCompressMaxBytes &&
      H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 && H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0 &&
      (H5Pset_chunk(dcpl.get(), static_cast<int>(hd.size()), hd.data()) < 0 || H5Pset_shuffle(dcpl.get()) < 0 ||
       H5Pset_deflate(dcpl.get(), 4) < 0))
    fail(name, "cannot set up compression: " + last_hdf5_error());
  ObjectId d(H5Dcreate2(id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) fail(name, "cannot create dataset: " + last_hdf5_error());
  if (element_count(hd) > 0 && H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(name, "cannot write dataset: " + last_hdf5_error());
  return Dataset(std::move(d), child_path(path(), name), child_context(*this, name), kind());
}

Dataset Group::write_dataset(const std::string& name, const std::vector<int64_t>& dims, const double* data) const {
  return write_numeric(name, dims, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data);
}

Dataset Group::write_dataset(const std::string& name, const std::vector<int64_t>& dims, const float* data) const {
  return write_numeric(name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data);
}

Dataset Group::write_dataset(const std::string& name, const std::vector<int64_t>& dims, const int64_t* data) const {
  return write_numeric(name, dims, H5T_STD_I64LE, H5T_NATIVE_INT64, data);
}

Dataset Group::write_dataset(const std::string& name, const std::vector<std::string>& v) const {
  TypeId t = vlen_utf8_type();
  std::vector<const char*> ptrs;
  for (const std::string& s : v) ptrs.push_back(s.c_str());
  return write_numeric(name, {static_cast<int64_t>(v.size())}, t.get(), t.get(), ptrs.data());
}

void Group::read_numeric(const std::string& name, std::vector<int64_t>* dims, hid_t mem_type, bool integer_target,
                         size_t elem_size, std::vector<char>* out, size_t* count) const {
  Dataset d = open_dataset(name);
  TypeId t(H5Dget_type(d.id()));
  if (!t.valid()) fail(name, "has an unreadable type: " + last_hdf5_error());
  H5T_class_t cls = H5Tget_class(t.get());
  if (integer_target ? cls != H5T_INTEGER : (cls != H5T_INTEGER && cls != H5T_FLOAT))
    fail(name, std::string("expected ") + (integer_target ? "integers" : "numbers") + ", found " + describe_class(cls));
  SpaceId space(H5Dget_space(d.id()));
  if (!space.valid()) fail(name, "has an unreadable dataspace: " + last_hdf5_error());
  std::vector<hsize_t> hd = space_dims(*this, name, space.get());
  uint64_t n = element_count(hd);
  if (n > (static_cast<uint64_t>(1) << 34) / elem_size) fail(name, "is too large to read");
  out->assign(static_cast<size_t>(n) * elem_size, 0);
  if (n > 0 && H5Dread(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data()) < 0)
    fail(name, "cannot read: " + last_hdf5_error());
  *count = static_cast<size_t>(n);
  if (dims) {
    dims->clear();
    for (hsize_t x : hd) dims->push_back(static_cast<int64_t>(x));
  }
}

std::vector<double> Group::read_doubles(const std::string& name, std::vector<int64_t>* dims) const {
  std::vector<char> raw;
  size_t n = 0;
  read_numeric(name, dims, H5T_NATIVE_DOUBLE, false, sizeof(double), &raw, &n);
  std::vector<double> v(n);
  if (n) std::memcpy(v.data(), raw.data(), n * sizeof(double));
  return v;
}

std::vector<float> Group::read_floats(const std::string& name, std::vector<int64_t>* dims) const {
  std::vector<char> raw;
  size_t n = 0;
  read_numeric(name, dims, H5T_NATIVE_FLOAT, false, sizeof(float), &raw, &n);
  std::vector<float> v(n);
  if (n) std::memcpy(v.data(), raw.data(), n * sizeof(float));
  return v;
}

std::vector<int64_t> Group::read_int64s(const std::string& name, std::vector<int64_t>* dims) const {
  std::vector<char> raw;
  size_t n = 0;
  read_numeric(name, dims, H5T_NATIVE_INT64, true, sizeof(int64_t), &raw, &n);
  std::vector<int64_t> v(n);
  if (n) std::memcpy(v.data(), raw.data(), n * sizeof(int64_t));
  return v;
}

// ---------------------------------------------------------------- File

namespace {
// File locking breaks on parallel file systems without flock (Lustre, some NFS); a
// lock that cannot be taken there is not a reason to refuse the file.
void relax_locking(hid_t fapl, bool use_locking) {
#if H5_VERSION_GE(1, 12, 1) || (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)
  H5Pset_file_locking(fapl, use_locking ? 1 : 0, 1);
#else
  (void)fapl;
  (void)use_locking;
#endif
}
}  // namespace

File File::open_read(const std::string& path) {
  init();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) h5::fail(ErrorKind::kInput, path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) h5::fail(ErrorKind::kInput, path + ": is a directory, not an HDF5 file");
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) h5::fail(ErrorKind::kInput, path + ": cannot read: " + std::strerror(errno));
  ::close(fd);
#if H5_VERSION_GE(1, 12, 0)
  htri_t is_h5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  htri_t is_h5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_h5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    h5::fail(ErrorKind::kInput, path + ": not an HDF5 file");
  }
  PlistId fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (!fapl.valid()) h5::fail(ErrorKind::kInput, path + ": cannot open: " + last_hdf5_error());
  relax_locking(fapl.get(), false);
  File f;
  f.path_ = path;
  f.kind_ = ErrorKind::kInput;
  f.id_ = FileId(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!f.id_.valid()) h5::fail(ErrorKind::kInput, path + ": cannot open as HDF5: " + last_hdf5_error());
  return f;
}

File File::create(const std::string& path) {
  init();
  PlistId fcpl(H5Pcreate(H5P_FILE_CREATE));
  PlistId fapl(H5Pcreate(H5P_FILE_ACCESS));
  // Root group in creation order and without timestamps, as every group we create; 1.8
  // format so that any HDF5 >= 1.8 (and so any h5py) reads it; strong close so that
  // close() really flushes.
  if (!fcpl.valid() || !fapl.valid() ||
      H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
      H5Pset_attr_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0 ||
      H5Pset_obj_track_times(fcpl.get(), 0) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 ||
      H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0)
    h5::fail(ErrorKind::kRuntime, path + ": cannot set up file: " + last_hdf5_error());
  relax_locking(fapl.get(), true);
  File f;
  f.path_ = path;
  f.kind_ = ErrorKind::kRuntime;
  f.id_ = FileId(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!f.id_.valid()) h5::fail(ErrorKind::kRuntime, path + ": cannot create: " + last_hdf5_error());
  return f;
}

Group File::root() const {
  ObjectId g(H5Gopen2(id_.get(), "/", H5P_DEFAULT));
  if (!g.valid()) h5::fail(kind_, path_ + ": cannot open the root group: " + last_hdf5_error());
  return Group(std::move(g), "/", path_, kind_);
}

void File::close() {
  if (id_.valid() && id_.close() < 0) h5::fail(kind_, path_ + ": cannot close: " + last_hdf5_error());
}

}  // namespace h5
}  // namespace uipc
