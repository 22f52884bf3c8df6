#pragma once
// Every file libreyolo writes as a whole (export, checkpoints, results, predictions, profile artifacts,
// images, caches) goes through here, so one rule holds everywhere:
//   - a target that exists and is not a regular file (a device such as /dev/null, a FIFO, a socket, a
//     directory, a symlink) is refused with an OutputPathError that names it, says what it is and
//     what to do; nothing is written and nothing is replaced;
//   - the bytes go to `<target>.tmp.<pid>` (opened with O_EXCL | O_NOFOLLOW: a planted symlink is never
//     followed), are fsync'ed and renamed over the target; on every failure the temp file is removed
//     and the old target is left as it was.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/utf8.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace libreyolo {

// An output path that libreyolo will not replace (exists and is not a regular file). A ConfigError:
// the path is an argument the user chose (out=, project=/name=), so the CLI exits with the usage code.
struct OutputPathError : ConfigError {
  using ConfigError::ConfigError;
};

namespace atomic_file {

// What `p` is when it exists and is not a regular file: "a character device", "a FIFO", "a socket",
// "a directory", "a block device", "a symlink to '<where>'"; "" when it is a regular file or absent.
inline std::string non_regular_kind(const std::filesystem::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return {};  // absent (or unreadable: the write itself will say)
  if (S_ISREG(st.st_mode)) return {};
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const auto to = std::filesystem::read_symlink(p, ec);
    return "a symlink to '" + (ec ? std::string("?") : utf8::escaped(to.string())) + "'";
  }
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISDIR(st.st_mode)) return "a directory";
  return "not a regular file";
}

// Throws OutputPathError when `target` exists and is not a regular file. `what` names the file's role
// ("checkpoint", "export"); `remedy` says what to do instead.
inline void check_target(const std::filesystem::path& target, std::string_view what,
                         std::string_view remedy = "remove or rename it, or choose another path") {
  const std::string kind = non_regular_kind(target);
  if (kind.empty()) return;
  throw OutputPathError("refusing to write the " + std::string(what) + " to '" + utf8::escaped(target.string()) +
                        "': it is " + kind + ", not a regular file, and would be replaced; nothing was written (" +
                        std::string(remedy) + ")");
}

// The advice for a file the user named with out=.
inline constexpr std::string_view out_remedy = "choose another out= path: a new file, or an existing regular file to replace";

using ByteSink = std::function<void(const void*, size_t)>;
using Producer = std::function<void(const ByteSink&)>;

struct Options {
  std::string_view remedy = "remove or rename it, or choose another path";  // what to do about a bad target
  std::string tag;    // makes the temp name unique when threads of one process may write the same target
  bool sync = true;   // fsync before the rename (caches that can be rebuilt skip it)
};

// Writes `target` atomically from the bytes `produce` pushes through its sink. Returns "" on success,
// else why it failed (the temp file removed, the target untouched). Throws OutputPathError (only) for
// a target that is not a regular file, checked before and again just before the rename.
inline std::string write(const std::filesystem::path& target, std::string_view what, const Producer& produce,
                         const Options& o = {}) {
  check_target(target, what, o.remedy);
  const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid()) + (o.tag.empty() ? "" : "." + o.tag);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    // A leftover of ours (an earlier failed write, a recycled pid) or a planted link: unlinking never
    // follows it. A directory or anything else there is not ours to remove: the write fails.
    struct stat st {};
    if (::lstat(tmp.c_str(), &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && ::unlink(tmp.c_str()) == 0)
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    else
      errno = EEXIST;
  }
  if (fd < 0) return "creating the temp file " + tmp + " failed: " + std::strerror(errno);
  const auto fail = [&](const std::string& why) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return why;
  };
  // The sink never throws (it may be called from inside LibTorch's zip writer, whose destructor also
  // writes): the first write error is remembered and reported once `produce` returns.
  int write_errno = 0;
  const ByteSink sink = [&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0 && write_errno == 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        write_errno = w < 0 ? errno : EIO;
        return;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  try {
    produce(sink);
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error while producing the bytes");
  }
  if (write_errno != 0) return fail("write to " + tmp + " failed: " + std::strerror(write_errno));
  if (o.sync && ::fsync(fd) != 0) return fail("fsync of " + tmp + " failed: " + std::strerror(errno));
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail(std::string("close failed: ") + std::strerror(errno));
  try {
    check_target(target, what, o.remedy);  // it may have appeared while the bytes were produced
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    return fail("rename from " + tmp + " failed: " + std::strerror(e));
  }
  // Persist the rename itself; best effort, the data is already safe in the file.
  if (!o.sync) return {};
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

inline std::string write(const std::filesystem::path& target, std::string_view what, std::string_view bytes,
                         const Options& o = {}) {
  return write(target, what, Producer([bytes](const ByteSink& sink) { sink(bytes.data(), bytes.size()); }), o);
}

// As write(), but a failure throws E("cannot write <what> '<target>': <why>").
template <class E = Error, class Bytes>
void write_or_throw(const std::filesystem::path& target, std::string_view what, const Bytes& bytes,
                    const Options& o = {}) {
  if (auto why = write(target, what, bytes, o); !why.empty())
    throw E("cannot write " + std::string(what) + " '" + target.string() + "': " + why);
}

}  // namespace atomic_file
}  // namespace libreyolo
