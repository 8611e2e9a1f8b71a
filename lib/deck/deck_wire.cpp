// The deck on the wire: a versioned, length-checked binary encoding of a Deck, the
// deck parsed in a child process (crashes and endless loops of libhdf5 become clean
// errors), and the root-only read that broadcasts the deck (or rank 0's error).
#include "lib/deck/deck_wire.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"

namespace uipc {

namespace {

// "UDKW": a buffer that is not ours (or not aligned with ours) fails at once.
constexpr unsigned char kMagic[4] = {'U', 'D', 'K', 'W'};

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v) { le(v, 4); }
  void i32(int32_t v) { le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void f32(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);  // bit pattern: NaN payloads and -0 travel unchanged
    u32(bits);
  }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    u64(bits);
  }
  void str(const std::string& s) {
    if (s.size() > UINT32_MAX) throw RuntimeError("deck encoding: a string of " + std::to_string(s.size()) + " bytes");
    u32(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void list(const std::vector<std::string>& v) {
    if (v.size() > UINT32_MAX) throw RuntimeError("deck encoding: a list of " + std::to_string(v.size()) + " items");
    u32(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) str(s);
  }
  void raw(const unsigned char* p, size_t n) { buf_.insert(buf_.end(), p, p + n); }
  std::vector<unsigned char> take() { return std::move(buf_); }

 private:
  // Explicit little-endian bytes, so the encoding does not depend on the host.
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<unsigned char>(v >> (8 * i)));
  }
  std::vector<unsigned char> buf_;
};

class Reader {
 public:
  Reader(const unsigned char* p, size_t n) : p_(p), n_(n) {}
  size_t left() const { return n_ - at_; }
  size_t offset() const { return at_; }

  uint8_t u8(const char* what) { return static_cast<uint8_t>(le(1, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
  int32_t i32(const char* what) { return static_cast<int32_t>(static_cast<uint32_t>(le(4, what))); }
  uint64_t u64(const char* what) { return le(8, what); }
  int64_t i64(const char* what) { return static_cast<int64_t>(le(8, what)); }
  float f32(const char* what) {
    uint32_t bits = u32(what);
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  double f64(const char* what) {
    uint64_t bits = u64(what);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  bool flag(const char* what) {
    uint8_t v = u8(what);
    if (v > 1) corrupt(what, "boolean " + std::to_string(v));
    return v == 1;
  }
  // A length is checked against the bytes left before anything is allocated for it.
  std::string str(const char* what) {
    uint32_t len = u32(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }
  std::vector<std::string> list(const char* what) {
    uint32_t n = u32(what);
    // Each item needs at least its 4-byte length: a count beyond that is corrupt.
    if (n > left() / 4) truncated(what, static_cast<size_t>(n) * 4);
    std::vector<std::string> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(str(what));
    return v;
  }
  void expect_magic() {
    need(sizeof kMagic, "the magic bytes");
    if (std::memcmp(p_, kMagic, sizeof kMagic) != 0) corrupt("the magic bytes", "not a deck encoding");
    at_ += sizeof kMagic;
  }
  [[noreturn]] void corrupt(const char* what, const std::string& found) const {
    throw RuntimeError("deck encoding: corrupt " + std::string(what) + " at byte " + std::to_string(at_) + ": " +
                       found);
  }
  [[noreturn]] void truncated(const char* what, size_t want) const {
    throw RuntimeError("deck encoding: truncated at byte " + std::to_string(at_) + " reading " + what + " (needs " +
                       std::to_string(want) + " bytes, " + std::to_string(left()) + " left of " +
                       std::to_string(n_) + ")");
  }

 private:
  void need(size_t k, const char* what) const {
    if (k > left()) truncated(what, k);
  }
  uint64_t le(int k, const char* what) {
    need(static_cast<size_t>(k), what);
    uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= static_cast<uint64_t>(p_[at_ + i]) << (8 * i);
    at_ += static_cast<size_t>(k);
    return v;
  }
  const unsigned char* p_;
  size_t n_;
  size_t at_ = 0;
};

// The fixed-size part of one encoded case plus its string/list length prefixes: a
// case count beyond left/kMinCaseBytes cannot be genuine.
constexpr size_t kMinCaseBytes =
    4 + 4 + 8 + 8 + 4 + 4 + 1 + 1 + 4 + 1 + 4 + 1 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 1 + 4 + 8 + 4 + 8 + 8;

template <class E>
E read_enum(Reader& r, const char* what, int max_value) {
  uint8_t v = r.u8(what);
  if (v > max_value) r.corrupt(what, "value " + std::to_string(v));
  return static_cast<E>(v);
}

}  // namespace

std::vector<unsigned char> serialize_deck(const Deck& deck) {
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u32(kDeckWireVersion);
  w.i32(deck.schema_version);
  w.str(deck.description);
  if (deck.cases.size() > UINT32_MAX) throw RuntimeError("deck encoding: too many cases");
  w.u32(static_cast<uint32_t>(deck.cases.size()));
  for (const Case& c : deck.cases) {
    // Field order of struct Case; a new field means a new kDeckWireVersion.
    w.str(c.name);
    w.str(c.description);
    w.i64(c.batch);
    w.i64(c.seq_len);
    w.i32(c.heads);
    w.i32(c.head_dim);
    w.u8(static_cast<uint8_t>(c.dtype));
    w.u8(static_cast<uint8_t>(c.qk_norm));
    w.f32(c.norm_eps);
    w.u8(static_cast<uint8_t>(c.rope));
    w.f32(c.rope_theta);
    w.u8(c.fused_qkv ? 1 : 0);
    w.i32(c.ulysses);
    w.i32(c.tp);
    w.list(c.transports);
    w.list(c.schedules);
    w.i32(c.warmup);
    w.i32(c.iterations);
    w.i32(c.repeats);
    w.u64(c.seed);
    w.f64(c.tol_max_abs);
    w.f64(c.tol_rel_l2);
    w.f64(c.watchdog_s);
    w.list(c.ablations);
    w.u8(static_cast<uint8_t>(c.rank_order));
    w.i32(c.steps);
    w.f64(c.step_similarity);
    w.i32(c.full_steps);
    w.f64(c.vmajor_threshold);
    w.f64(c.vmajor_tol_rel_l2);
  }
  return w.take();
}

Deck deserialize_deck(const unsigned char* data, size_t size) {
  if (data == nullptr && size != 0) throw RuntimeError("deck encoding: null buffer of " + std::to_string(size) + " bytes");
  Reader r(data, size);
  r.expect_magic();
  uint32_t version = r.u32("the encoding version");
  if (version != kDeckWireVersion)
    r.corrupt("the encoding version", std::to_string(version) + " (this program reads " +
                                          std::to_string(kDeckWireVersion) + ")");
  Deck d;
  d.schema_version = r.i32("schema_version");
  d.description = r.str("the deck description");
  uint32_t n = r.u32("the case count");
  if (n > r.left() / kMinCaseBytes) r.truncated("the cases", static_cast<size_t>(n) * kMinCaseBytes);
  d.cases.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Case c;
    c.name = r.str("name");
    c.description = r.str("description");
    c.batch = r.i64("batch");
    c.seq_len = r.i64("seq_len");
    c.heads = r.i32("heads");
    c.head_dim = r.i32("head_dim");
    c.dtype = read_enum<DType>(r, "dtype", static_cast<int>(DType::kFP32));
    c.qk_norm = read_enum<NormKind>(r, "qk_norm", static_cast<int>(NormKind::kLayerPerHead));
    c.norm_eps = r.f32("norm_eps");
    c.rope = read_enum<RopeKind>(r, "rope", static_cast<int>(RopeKind::k1D));
    c.rope_theta = r.f32("rope_theta");
    c.fused_qkv = r.flag("fused_qkv");
    c.ulysses = r.i32("ulysses");
    c.tp = r.i32("tp");
    c.transports = r.list("transports");
    c.schedules = r.list("schedules");
    c.warmup = r.i32("warmup");
    c.iterations = r.i32("iterations");
    c.repeats = r.i32("repeats");
    c.seed = r.u64("seed");
    c.tol_max_abs = r.f64("tol_max_abs");
    c.tol_rel_l2 = r.f64("tol_rel_l2");
    c.watchdog_s = r.f64("watchdog_s");
    c.ablations = r.list("ablations");
    c.rank_order = read_enum<RankOrder>(r, "rank_order", static_cast<int>(RankOrder::kTpInner));
    c.steps = r.i32("steps");
    c.step_similarity = r.f64("step_similarity");
    c.full_steps = r.i32("full_steps");
    c.vmajor_threshold = r.f64("vmajor_threshold");
    c.vmajor_tol_rel_l2 = r.f64("vmajor_tol_rel_l2");
    d.cases.push_back(std::move(c));
  }
  if (r.left() != 0) r.corrupt("the end", std::to_string(r.left()) + " bytes left over");
  return d;
}

namespace {

// The child's answer: [int32 exit code, 0 = a deck follows][uint64 length][payload:
// the encoded deck or the error message]. Bounded: a runaway child cannot make the
// parent allocate without end.
constexpr size_t kMaxAnswerBytes = size_t{64} << 20;

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Sanitizer runtimes reserve terabytes of address space: no RLIMIT_AS under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kCanLimitAddressSpace = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kCanLimitAddressSpace = false;
#else
constexpr bool kCanLimitAddressSpace = true;
#endif
#else
constexpr bool kCanLimitAddressSpace = true;
#endif

// In the child: a crafted file that makes libhdf5 allocate without bound gets
// bad_alloc (a clean error) instead of the node's OOM killer. The limit is what the
// process already maps (MPI, Kokkos) plus 2 GiB for parsing.
void limit_child_memory() {
  if (!kCanLimitAddressSpace) return;
  unsigned long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages == 0 || page <= 0) return;
  struct rlimit r;
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(pages) * static_cast<rlim_t>(page) + (rlim_t{2} << 30);
  ::setrlimit(RLIMIT_AS, &r);
}

[[noreturn]] void child_parse(const std::string& path, int fd) {
  // A crash here is the answer, not something to handle: the default actions (not a
  // sanitizer's report, nor the app's SIGINT/SIGTERM handler, which would clean up the
  // parent's shared memory and print "interrupted" a second time).
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGTERM}) ::signal(sig, SIG_DFL);
  limit_child_memory();
  int32_t code = 0;
  std::string body;
  try {
    std::vector<unsigned char> b = serialize_deck(read_deck(path));
    body.assign(b.begin(), b.end());
  } catch (const Error& e) {
    code = e.exit_code() != 0 ? e.exit_code() : kExitRuntime;
    body = e.what();
  } catch (const std::exception& e) {
    code = kExitRuntime;
    body = std::string("internal error reading the deck ") + path + ": " + e.what();
  }
  if (body.size() > kMaxAnswerBytes) body.resize(kMaxAnswerBytes);
  unsigned char head[12];
  const uint64_t len = body.size();
  for (int i = 0; i < 4; ++i) head[i] = static_cast<unsigned char>(static_cast<uint32_t>(code) >> (8 * i));
  for (int i = 0; i < 8; ++i) head[4 + i] = static_cast<unsigned char>(len >> (8 * i));
  const bool ok = write_all(fd, head, sizeof head) && write_all(fd, body.data(), body.size());
  // _exit: no atexit handlers, no stdio flush, nothing of the parent's MPI state touched.
  ::_exit(ok ? 0 : 1);
}

[[noreturn]] void throw_coded(int code, const std::string& what) {
  if (code == kExitBadInput) throw InputError(what);
  if (code == kExitRuntime) throw RuntimeError(what);
  throw Error(what, code);
}

}  // namespace

double deck_parse_timeout_s() {
  const char* v = std::getenv("ULYSSES_DECK_PARSE_TIMEOUT");
  if (!v || !*v) return kDeckParseTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return (*end == '\0' && s > 0 && s <= 86400) ? s : kDeckParseTimeoutS;
}

Deck read_deck_isolated(const std::string& path, double timeout_s) {
  const char* in_process = std::getenv("ULYSSES_DECK_IN_PROCESS");
  if (in_process && std::strcmp(in_process, "1") == 0) return read_deck(path);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw RuntimeError(path + ": cannot start the deck reader: pipe: " + std::strerror(errno));
  // Nothing buffered may be written twice (by the child's copy of the buffers).
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw RuntimeError(path + ": cannot start the deck reader: fork: " + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_parse(path, fds[1]);
  }
  ::close(fds[1]);

  auto reap = [pid](bool kill_first) {
    if (kill_first) ::kill(pid, SIGKILL);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0) {
      if (errno != EINTR) return -1;  // ECHILD: someone else reaped it; nothing to learn
    }
    return st;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string answer;
  bool eof = false, too_big = false;
  while (!eof && !too_big) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd p = {fds[0], POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    char buf[65536];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      eof = true;
      break;
    }
    answer.append(buf, static_cast<size_t>(n));
    too_big = answer.size() > kMaxAnswerBytes + 12;
  }
  ::close(fds[0]);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.0f", timeout_s);
  if (!eof) {
    reap(/*kill_first=*/true);
    if (too_big) throw RuntimeError(path + ": the deck reader sent more than " + std::to_string(kMaxAnswerBytes) + " bytes");
    throw InputError(path + ": reading the deck did not finish within " + secs +
                     " s (a corrupt or crafted file can make the HDF5 library loop): refused");
  }
  const int st = reap(/*kill_first=*/false);
  if (st != -1 && WIFSIGNALED(st)) {
    const int sig = WTERMSIG(st);
    const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" :
                       sig == SIGILL ? "SIGILL" : sig == SIGABRT ? "SIGABRT" : sig == SIGSYS ? "SIGSYS" :
                       sig == SIGKILL ? "SIGKILL" : nullptr;
    const std::string which = std::to_string(sig) + (name ? std::string(", ") + name : std::string());
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT || sig == SIGSYS)
      throw InputError(path + ": reading the deck crashed the HDF5 library (signal " + which +
                       "): the file is corrupt or crafted; refused");
    throw RuntimeError(path + ": the deck reader was killed by signal " + which);
  }
  if (answer.size() < 12 || (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)))
    throw RuntimeError(path + ": the deck reader ended without an answer (status " + std::to_string(st) + ")");
  uint32_t code = 0;
  uint64_t len = 0;
  for (int i = 0; i < 4; ++i) code |= static_cast<uint32_t>(static_cast<unsigned char>(answer[i])) << (8 * i);
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(answer[4 + i])) << (8 * i);
  if (len != answer.size() - 12)
    throw RuntimeError(path + ": the deck reader's answer is garbled (" + std::to_string(answer.size()) + " bytes)");
  if (code != 0) throw_coded(static_cast<int>(code), answer.substr(12));
  return deserialize_deck(reinterpret_cast<const unsigned char*>(answer.data()) + 12, len);
}

Deck read_deck_on_root(const std::string& path, MPI_Comm comm, double timeout_s) {
  int rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // head[0]: 0 when a deck follows, else rank 0's exit code and its message follows;
  // head[1]: the bytes that follow.
  int64_t head[2] = {0, 0};
  std::vector<unsigned char> payload;
  if (rank == 0) {
    std::string error;
    try {
      payload = serialize_deck(read_deck_isolated(path, std::min(deck_parse_timeout_s(), timeout_s / 2)));
    } catch (const Error& e) {
      head[0] = e.exit_code() != 0 ? e.exit_code() : kExitRuntime;
      error = e.what();
    } catch (const std::exception& e) {
      // bad_alloc and the like: still one clear error on every rank, not a hang.
      head[0] = kExitRuntime;
      error = std::string("internal error reading the deck ") + path + ": " + e.what();
    }
    if (head[0] == 0 && payload.size() > static_cast<size_t>(INT_MAX)) {
      head[0] = kExitBadInput;
      error = path + ": the deck is too large to share between ranks (" + std::to_string(payload.size()) + " bytes)";
    }
    if (head[0] != 0) {
      error = printable(error);
      payload.assign(error.begin(), error.end());
    }
    if (payload.size() > static_cast<size_t>(INT_MAX)) payload.resize(4096);  // an absurd message: its start
    head[1] = static_cast<int64_t>(payload.size());
  }
  // Only rank 0 can be missing here; rank 0 itself cannot name who is.
  const std::vector<int> root_peer = rank == 0 ? std::vector<int>{} : std::vector<int>{0};
  const std::string what = "the deck from rank 0 (" + path + ")";
  MPI_Request req;
  UIPC_MPI_CHECK(MPI_Ibcast(head, 2, MPI_INT64_T, 0, comm, &req));
  wait_bounded(&req, 1, timeout_s, what, root_peer);
  if (head[1] < 0 || head[1] > INT_MAX)
    throw CollectiveError("internal error: rank 0 announced a deck of " + std::to_string(head[1]) + " bytes",
                          kExitRuntime);
  if (rank != 0) payload.resize(static_cast<size_t>(head[1]));
  if (head[1] > 0) {
    UIPC_MPI_CHECK(MPI_Ibcast(payload.data(), static_cast<int>(head[1]), MPI_BYTE, 0, comm, &req));
    wait_bounded(&req, 1, timeout_s, what, root_peer);
  }
  if (head[0] != 0)
    throw CollectiveError(std::string(payload.begin(), payload.end()), static_cast<int>(head[0]));
  // Rank 0 decodes its own bytes too: every rank returns the very same values, and a
  // decoding failure (a bug) happens identically everywhere.
  try {
    return deserialize_deck(payload.data(), payload.size());
  } catch (const Error& e) {
    throw CollectiveError(e.what(), e.exit_code());
  }
}

}  // namespace uipc
