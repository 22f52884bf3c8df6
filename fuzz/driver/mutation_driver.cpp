// A small mutation-loop driver for the fuzz targets when libFuzzer is not available (g++ builds):
//   fuzz_X -max_total_time=SECONDS [-timeout=S] [-artifact_prefix=DIR/] CORPUS_DIR...
// It loads the corpus, then repeatedly mutates a random entry (bit flips, byte sets to interesting
// values, inserts, deletes, chunk copies, splices with another entry) and calls
// LLVMFuzzerTestOneInput. Inputs that reach a new (size class, outcome) are added to the first corpus
// folder. Before each call the input is kept in memory; a crash (SIGSEGV/SIGABRT/...) or a hang (no
// return within -timeout) writes it to <artifact_prefix>crash-<n> / timeout-<n> and ends with exit 1.
// Prints "stat: execs N corpus M" at the end, as the script reads it.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

std::vector<uint8_t> g_current;
std::string g_prefix = "./";
const char* g_kind = "crash";

void dump_and_die(int sig) {
  const std::string path = g_prefix + g_kind + "-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    [[maybe_unused]] auto n = ::write(fd, g_current.data(), g_current.size());
    ::close(fd);
  }
  const char msg[] = "\n==driver== deadly signal or timeout; input written to the artifact prefix\n";
  [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig == SIGALRM ? SIGKILL : sig);
}

void on_alarm(int sig) {
  g_kind = "timeout";
  dump_and_die(sig);
}

std::vector<uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  double seconds = 60;
  int timeout = 20;
  size_t max_len = 1 << 20;
  std::vector<std::filesystem::path> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) seconds = std::stod(a.substr(16));
    else if (a.rfind("-timeout=", 0) == 0) timeout = std::stoi(a.substr(9));
    else if (a.rfind("-artifact_prefix=", 0) == 0) g_prefix = a.substr(17);
    else if (a.rfind("-max_len=", 0) == 0) max_len = std::stoul(a.substr(9));
    else if (!a.empty() && a[0] == '-') continue;  // other libFuzzer flags: ignored
    else dirs.emplace_back(a);
  }
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) ::signal(s, dump_and_die);
  ::signal(SIGALRM, on_alarm);
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& d : dirs)
    if (std::filesystem::is_directory(d))
      for (const auto& e : std::filesystem::directory_iterator(d))
        if (e.is_regular_file()) corpus.push_back(read_file(e.path()));
  if (corpus.empty()) corpus.push_back({});
  std::mt19937_64 rng(std::random_device{}());
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  static const uint8_t interesting[] = {0, 1, 0x7F, 0x80, 0xFF, '0', '9', '-', '.', 'e', ' ', '\n', ':', '[', ']',
                                        '{', '}', '"', '\\', ',', 0xC0, 0xED, 0xF4};
  std::set<std::pair<int, uint64_t>> seen;  // (log2 size, hash of the first bytes): keeps the corpus varied
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t execs = 0;
  for (const auto& c : corpus) {
    g_current = c;
    ::alarm(static_cast<unsigned>(timeout));
    LLVMFuzzerTestOneInput(g_current.data(), g_current.size());
    ::alarm(0);
    ++execs;
  }
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    std::vector<uint8_t> x = corpus[pick(corpus.size())];
    const int rounds = 1 + static_cast<int>(pick(4));
    for (int r = 0; r < rounds; ++r) {
      switch (pick(7)) {
        case 0: if (!x.empty()) x[pick(x.size())] ^= static_cast<uint8_t>(1u << pick(8)); break;
        case 1: if (!x.empty()) x[pick(x.size())] = interesting[pick(sizeof interesting)]; break;
        case 2: x.insert(x.begin() + static_cast<long>(pick(x.size() + 1)), interesting[pick(sizeof interesting)]); break;
        case 3: if (!x.empty()) { size_t a = pick(x.size()), n = 1 + pick(std::min<size_t>(16, x.size() - a)); x.erase(x.begin() + static_cast<long>(a), x.begin() + static_cast<long>(a + n)); } break;
        case 4: if (!x.empty()) { size_t a = pick(x.size()), n = 1 + pick(std::min<size_t>(64, x.size() - a)); std::vector<uint8_t> chunk(x.begin() + static_cast<long>(a), x.begin() + static_cast<long>(a + n)); x.insert(x.begin() + static_cast<long>(pick(x.size() + 1)), chunk.begin(), chunk.end()); } break;
        case 5: { const auto& o = corpus[pick(corpus.size())]; if (!o.empty()) { size_t a = pick(o.size()); x.insert(x.begin() + static_cast<long>(pick(x.size() + 1)), o.begin() + static_cast<long>(a), o.begin() + static_cast<long>(std::min(o.size(), a + 1 + pick(128)))); } } break;
        case 6: if (x.size() > 1) x.resize(pick(x.size())); break;
      }
    }
    if (x.size() > max_len) x.resize(max_len);
    g_current = x;
    ::alarm(static_cast<unsigned>(timeout));
    LLVMFuzzerTestOneInput(g_current.data(), g_current.size());
    ::alarm(0);
    ++execs;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < std::min<size_t>(x.size(), 32); ++i) h = (h ^ x[i]) * 1099511628211ull;
    int lg = 0;
    for (size_t s = x.size(); s > 1; s >>= 1) ++lg;
    if (corpus.size() < 4096 && seen.insert({lg, h % 64}).second) {
      corpus.push_back(x);
      if (!dirs.empty()) {
        std::ofstream f(dirs.front() / ("drv-" + std::to_string(::getpid()) + "-" + std::to_string(corpus.size())), std::ios::binary);
        f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size()));
      }
    }
  }
  std::printf("stat: execs %llu corpus %zu\n", static_cast<unsigned long long>(execs), corpus.size());
  return 0;
}
