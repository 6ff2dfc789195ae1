//===- xla_gpu_opt.cpp - the opt-like driver of xla_gpu -------------------===//
//
// mlir-opt with the xla_gpu dialect and passes: MLIR's own MlirOptMain over
// every upstream dialect, extension and pass plus ours, so every mlir-opt
// flag works (--pass-pipeline, --split-input-file, --verify-diagnostics,
// --mlir-print-ir-*, --mlir-timing, --mlir-pass-statistics, ...).
//
// It runs on a thread with a large stack: MLIR's parser, verifier and
// walkers recurse once per nested region, and deeply nested input must get
// through (or fail with a diagnostic) rather than overflow the main
// thread's stack.
//
// The input is data from anywhere, so around MlirOptMain:
// - it is read here, not by MLIR: a regular file (checked with fstat on the
//   opened descriptor, opened without blocking, so a FIFO, a device or a
//   directory is refused at once) of at most XLA_GPU_MAX_INPUT_BYTES
//   (default 1 GiB), or stdin ("-") read up to the same limit;
// - everything written to stderr passes through a filter that escapes
//   control bytes and malformed UTF-8 (\x1b...): MLIR's diagnostics quote
//   the offending source line, which must not drive the terminal;
// - Ctrl-C (SIGINT) ends the tool at once with one line, exit status 130;
// - every failure (a flag, the input, a diagnostic) exits with status 2,
//   like xla_gpu's other tools (mlir-opt itself returns 1).
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/thread.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

// Virtual address space only: pages are committed as the recursion uses
// them.
constexpr unsigned kStackBytes = 1024u << 20;
constexpr uint64_t kDefaultMaxInputBytes = uint64_t(1) << 30;
constexpr int kErrorStatus = 2;
constexpr int kInterruptedStatus = 130;
constexpr char kToolName[] = "xla-gpu-opt";

// Defined here rather than by MLIR's parseCLIOptions, whose parse exits
// with status 1 on a bad flag.
llvm::cl::opt<std::string> inputFilename(llvm::cl::Positional,
                                         llvm::cl::desc("<input file>"),
                                         llvm::cl::init("-"));
llvm::cl::opt<std::string> outputFilename("o",
                                          llvm::cl::desc("Output filename"),
                                          llvm::cl::value_desc("filename"),
                                          llvm::cl::init("-"));

//===-- stderr filter -----------------------------------------------------===//

// Writes all of `data` to `fd` (async-signal-safe).
void writeAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    data += n;
    size -= size_t(n);
  }
}

// Copies bytes to a descriptor with every control byte (except newline and
// tab), DEL, C1 control and byte that is not part of well-formed UTF-8
// written as \xNN. Keeps an incomplete UTF-8 sequence across calls. No
// allocation: also used from a signal handler.
class Escaper {
public:
  explicit Escaper(int fd) : fd(fd) {}

  void feed(const unsigned char *data, size_t size) {
    for (size_t i = 0; i < size; ++i)
      byte(data[i]);
    flush();
  }

  void finish() {
    escapePending();
    flush();
  }

private:
  void byte(unsigned char b) {
    if (pendingSize > 0) {
      if (continues(b)) {
        pending[pendingSize++] = b;
        if (pendingSize == expected) {
          // U+0080..U+009F (C2 80..C2 9F) are the C1 controls.
          if (pending[0] == 0xC2 && pending[1] < 0xA0)
            escapePending();
          else
            for (unsigned k = 0; k < pendingSize; ++k)
              put(char(pending[k]));
          pendingSize = 0;
        }
        return;
      }
      escapePending();
    }
    if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7F)) {
      put(char(b));
    } else if (b >= 0xC2 && b <= 0xF4) {
      expected = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      pending[0] = b;
      pendingSize = 1;
    } else {
      escape(b);
    }
  }

  // Whether `b` may follow the pending bytes (RFC 3629: no overlong forms,
  // no surrogates, nothing past U+10FFFF).
  bool continues(unsigned char b) const {
    if (b < 0x80 || b > 0xBF)
      return false;
    if (pendingSize == 1) {
      switch (pending[0]) {
      case 0xE0: return b >= 0xA0;
      case 0xED: return b < 0xA0;
      case 0xF0: return b >= 0x90;
      case 0xF4: return b < 0x90;
      default: break;
      }
    }
    return true;
  }

  void escapePending() {
    for (unsigned k = 0; k < pendingSize; ++k)
      escape(pending[k]);
    pendingSize = 0;
  }

  void escape(unsigned char b) {
    static const char digits[] = "0123456789abcdef";
    put('\\');
    put('x');
    put(digits[b >> 4]);
    put(digits[b & 15]);
  }

  void put(char c) {
    if (outSize == sizeof(out))
      flush();
    out[outSize++] = c;
  }

  void flush() {
    writeAll(fd, out, outSize);
    outSize = 0;
  }

  int fd;
  unsigned char pending[4] = {};
  unsigned pendingSize = 0, expected = 0;
  char out[4096];
  size_t outSize = 0;
};

int realStderr = -1;      // the stderr the tool was started with
int filterInput = -1;     // the read end of the pipe that is now fd 2
std::thread *filterThread = nullptr;

void filterLoop() {
  Escaper escaper(realStderr);
  unsigned char buffer[4096];
  for (;;) {
    ssize_t n = ::read(filterInput, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      if (errno == EAGAIN) {
        pollfd p = {filterInput, POLLIN, 0};
        ::poll(&p, 1, -1);
      }
      continue;
    }
    if (n <= 0)
      break;
    escaper.feed(buffer, size_t(n));
  }
  escaper.finish();
}

// Routes fd 2 through the filter thread. Without a usable stderr the tool
// runs unfiltered (there is no terminal to protect).
void startStderrFilter() {
  int fds[2];
  realStderr = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (realStderr < 0)
    return;
  if (::pipe2(fds, O_CLOEXEC) != 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
    ::close(realStderr);
    realStderr = -1;
    return;
  }
  ::close(fds[1]);
  filterInput = fds[0];
  filterThread = new std::thread(filterLoop);
}

// Hands fd 2 back to the real stderr (closing the pipe's last write end)
// and waits until the filter has written everything. At exit() too.
void stopStderrFilter() {
  if (!filterThread)
    return;
  llvm::errs().flush();
  ::dup2(realStderr, STDERR_FILENO);
  // exit() can come from the filter thread itself (LLVM's SIGPIPE handler
  // when stderr's reader is gone): it cannot wait for itself.
  if (filterThread->get_id() == std::this_thread::get_id())
    filterThread->detach();
  else
    filterThread->join();
  delete filterThread;
  filterThread = nullptr;
}

// In a signal handler: fd 2 goes back to the real stderr and what the pipe
// still holds is written out (escaped), so that an assertion's message and
// the stack trace LLVM prints next are not lost with the filter thread.
void drainStderrFilter() {
  if (filterInput < 0)
    return;
  ::dup2(realStderr, STDERR_FILENO);
  int flags = ::fcntl(filterInput, F_GETFL);
  ::fcntl(filterInput, F_SETFL, flags | O_NONBLOCK);
  Escaper escaper(realStderr);
  unsigned char buffer[1024];
  for (;;) {
    ssize_t n = ::read(filterInput, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    escaper.feed(buffer, size_t(n));
  }
  escaper.finish();
}

void onCrashSignal(void *) { drainStderrFilter(); }

void onInterrupt(int) {
  // Partial output files (-o) go, as LLVM's own handler would remove them.
  llvm::sys::RunInterruptHandlers();
  drainStderrFilter();
  static const char message[] = "xla-gpu-opt: interrupted\n";
  writeAll(realStderr >= 0 ? realStderr : STDERR_FILENO, message,
           sizeof(message) - 1);
  ::_exit(kInterruptedStatus);
}

//===-- bounded input -----------------------------------------------------===//

std::optional<uint64_t> maxInputBytes(std::string &error) {
  const char *value = ::getenv("XLA_GPU_MAX_INPUT_BYTES");
  if (!value || !*value)
    return kDefaultMaxInputBytes;
  char *end = nullptr;
  errno = 0;
  unsigned long long limit = ::strtoull(value, &end, 0);
  if (errno != 0 || *end != '\0' || limit == 0 || value[0] == '-') {
    error = std::string("XLA_GPU_MAX_INPUT_BYTES must be a positive number "
                        "of bytes, got '") + value + "'";
    return std::nullopt;
  }
  return uint64_t(limit);
}

const char *fileKind(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a file";
}

// Reads the input file (or stdin for "-") within the limit; on failure
// returns null and sets `error`.
std::unique_ptr<llvm::MemoryBuffer> readInput(const std::string &name,
                                              std::string &error) {
  std::optional<uint64_t> limit = maxInputBytes(error);
  if (!limit)
    return nullptr;
  bool isStdin = name == "-";
  std::string shown = isStdin ? "<stdin>" : "'" + name + "'";
  int fd = STDIN_FILENO;
  if (!isStdin) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
    // below); reads of a regular file ignore the flag.
    do
      fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      error = "cannot open input file " + shown + ": " + ::strerror(errno);
      return nullptr;
    }
  }
  struct CloseOnExit {
    int fd;
    bool owned;
    ~CloseOnExit() {
      if (owned)
        ::close(fd);
    }
  } closer{fd, !isStdin};

  struct stat info;
  if (::fstat(fd, &info) != 0) {
    error = "cannot read input " + shown + ": " + ::strerror(errno);
    return nullptr;
  }
  if (!isStdin && S_ISDIR(info.st_mode)) {
    error = "input " + shown + " is a directory, not a file";
    return nullptr;
  }
  if (!isStdin && !S_ISREG(info.st_mode)) {
    error = "input " + shown + " is not a regular file (" +
            fileKind(info.st_mode) + ")";
    return nullptr;
  }
  auto tooLarge = [&] {
    error = "input " + shown + " is larger than the limit of " +
            std::to_string(*limit) +
            " bytes (XLA_GPU_MAX_INPUT_BYTES)";
    return nullptr;
  };
  if (S_ISREG(info.st_mode) && uint64_t(info.st_size) > *limit)
    return tooLarge();

  std::string data;
  if (S_ISREG(info.st_mode))
    data.reserve(size_t(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {  // a non-blocking stdin
      pollfd p = {fd, POLLIN, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n < 0) {
      error = "cannot read input " + shown + ": " + ::strerror(errno);
      return nullptr;
    }
    if (n == 0)
      break;
    if (data.size() + size_t(n) > *limit)
      return tooLarge();
    data.append(buffer, size_t(n));
  }
  // The buffer's name is what diagnostics and locations show, as MLIR's
  // own reader names it.
  return llvm::MemoryBuffer::getMemBufferCopy(data,
                                              isStdin ? "<stdin>" : name);
}

int fail(const std::string &message) {
  llvm::errs() << kToolName << ": " << message << "\n";
  return kErrorStatus;
}

int run(int argc, char **argv, mlir::DialectRegistry &registry) {
  std::string helpHeader = mlir::registerCLIOptions(
      "xla_gpu optimizer driver (mlir-opt with the xla_gpu dialect and "
      "passes)\n",
      registry);
  // With an error stream the parse reports a bad flag instead of exiting.
  if (!llvm::cl::ParseCommandLineOptions(argc, argv, helpHeader,
                                         &llvm::errs()))
    return kErrorStatus;

  llvm::InitLLVM initLLVM(argc, argv);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (inputFilename == "-" && ::isatty(STDIN_FILENO))
    llvm::errs() << "(" << kToolName << " reads its input from stdin: end it "
                 << "with ctrl-d, or interrupt with ctrl-c)\n";
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = readInput(inputFilename, error);
  if (!input)
    return fail(error);
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &error);
  if (!output)
    return fail(error);
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry,
                                     config)))
    return kErrorStatus;
  output->keep();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  startStderrFilter();
  std::atexit(stopStderrFilter);
  // LLVM's handlers, installed next, remove partial output files on SIGINT
  // and then hand the signal to the handler they replaced: this one.
  struct sigaction action = {};
  action.sa_handler = onInterrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  // Before InitLLVM's stack-trace printer, so it runs first on a crash.
  llvm::sys::AddSignalHandler(onCrashSignal, nullptr);

  mlir::registerAllPasses();
  mlir::xla_gpu::registerXlaGpuPasses();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::xla_gpu::registerXlaGpuDialect(registry);

  int status = kErrorStatus;
  llvm::thread worker(std::optional<unsigned>(kStackBytes),
                      [&] { status = run(argc, argv, registry); });
  worker.join();
  llvm::outs().flush();
  stopStderrFilter();
  return status;
}
