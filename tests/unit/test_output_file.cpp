// core::OutputFile and write_shared_output_file: a file appears whole or not at all, whatever step
// fails (the fault hook, /dev/full, a read-only directory), special files are written in place, and
// several ranks write one file together.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/and_barrier.h"
#include "core/error.h"
#include "core/output_file.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using tf::core::FaultHook;
using tf::core::FaultPoint;
using tf::core::InputError;
using tf::core::OutputFile;
using tf::core::RuntimeFailure;
using tf::core::write_output_file;
using tf::core::write_shared_output_file;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(OutputFile, NewFileAppearsWholeAndLeavesNothingElse) {
  tf::test::TempDir dir("tf_out");
  const fs::path p = dir.path() / "a.json";
  {
    OutputFile f(p, "--json");
    f.write("{\"x\": ");
    EXPECT_FALSE(fs::exists(p)) << "the target must not exist before commit()";
    f.write("1}\n");
    f.commit();
  }
  EXPECT_EQ(read_all(p), "{\"x\": 1}\n");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"a.json"});
}

TEST(OutputFile, ReplacesAnExistingFileKeepingItsModeAndLinks) {
  tf::test::TempDir dir("tf_out");
  const fs::path real = dir.write("runs/r1.csv", "old\n");
  ASSERT_EQ(::chmod(real.c_str(), 0640), 0);
  const fs::path link = dir.path() / "latest.csv";
  fs::create_symlink(real, link);
  write_output_file(link, "new,1\n", "--csv");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_all(real), "new,1\n");
  struct stat st {};
  ASSERT_EQ(::stat(real.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(names_in(real.parent_path()), std::vector<std::string>{"r1.csv"});
}

TEST(OutputFile, DestroyedWithoutCommitRemovesItsTemporaryFile) {
  tf::test::TempDir dir("tf_out");
  const fs::path p = dir.write("keep.svg", "<svg/>");
  {
    OutputFile f(p, "--svg");
    f.write("half");
  }
  EXPECT_EQ(read_all(p), "<svg/>");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"keep.svg"});
}

// Every durable step failing in turn: a RuntimeFailure naming the option, the file and the errno text;
// the old content stays and no temporary file is left.
TEST(OutputFile, AFailingStepLeavesTheTargetAsItWas) {
  for (const char* op : {"create", "write", "fsync", "close", "rename"}) {
    SCOPED_TRACE(op);
    tf::test::TempDir dir("tf_out");
    const fs::path p = dir.write("t.json", "old");
    const FaultHook hook = [op](const FaultPoint& f) { return f.op == op ? ENOSPC : 0; };
    const std::string msg =
        tf::test::error_of<RuntimeFailure>([&] { write_output_file(p, "new content", "--trace", hook); });
    EXPECT_NE(msg.find("--trace " + p.string() + ": cannot "), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOSPC)), std::string::npos) << msg;
    EXPECT_NE(msg.find("was left as it was"), std::string::npos) << msg;
    EXPECT_EQ(read_all(p), "old");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"t.json"});
  }
}

TEST(OutputFile, DevFullFailsWithTheWriteError) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  const std::string msg = tf::test::error_of<RuntimeFailure>([] { write_output_file("/dev/full", "{}\n", "--json"); });
  EXPECT_EQ(msg,
            std::string("--json /dev/full: cannot write: ") + std::strerror(ENOSPC) + " (the file system is full)");
}

TEST(OutputFile, DevicesAndProcPathsAreWrittenInPlace) {
  EXPECT_NO_THROW(write_output_file("/dev/null", "discarded", "--csv"));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string path = "/dev/fd/" + std::to_string(fds[1]);  // /dev/fd -> /proc/self/fd: no temporary there
  {
    OutputFile f(path, "--json");
    EXPECT_TRUE(f.in_place());
    f.write("through the pipe");
    f.commit();
  }
  ::close(fds[1]);
  char buf[64] = {};
  EXPECT_EQ(::read(fds[0], buf, sizeof buf), 16);
  EXPECT_STREQ(buf, "through the pipe");
  ::close(fds[0]);
}

TEST(OutputFile, MissingDirectoryFailsAndCreatesNothing) {
  tf::test::TempDir dir("tf_out");
  const std::string msg =
      tf::test::error_of<RuntimeFailure>([&] { write_output_file(dir.path() / "no/such/x.csv", "a", "--csv"); });
  EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
  EXPECT_TRUE(names_in(dir.path()).empty());
}

TEST(OutputFile, ReadOnlyDirectoryFailsAndLeavesTheFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories (the fault hook covers it above)";
  tf::test::TempDir dir("tf_out");
  const fs::path ro = dir.path() / "ro";
  fs::create_directory(ro);
  const fs::path p = dir.write("ro/x.csv", "old");
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  const std::string msg = tf::test::error_of<RuntimeFailure>([&] { write_output_file(p, "new", "--csv"); });
  ::chmod(ro.c_str(), 0755);
  EXPECT_NE(msg.find(std::strerror(EACCES)), std::string::npos) << msg;
  EXPECT_EQ(read_all(p), "old");
  EXPECT_EQ(names_in(ro), std::vector<std::string>{"x.csv"});
}

TEST(OutputFile, ADirectoryIsRefusedAsBadInput) {
  tf::test::TempDir dir("tf_out");
  EXPECT_THROW(write_output_file(dir.path(), "x", "--json"), InputError);
  EXPECT_THROW(write_output_file("", "x", "--json"), InputError);
}

// Three ranks (threads) write interleaved 4-byte slots of one file: the file holds every rank's part,
// bit for bit, and nothing else is left in the directory.
TEST(SharedOutputFile, RanksWriteTheirPartsOfOneFile) {
  tf::test::TempDir dir("tf_out");
  const fs::path p = dir.path() / "master.bin";
  dir.write("master.bin.tmp-shared", "stale, from a crash");
  constexpr int kWorld = 3, kSlots = 1000;
  tf::core::AndBarrier barrier(kWorld);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(kWorld);
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      try {
        write_shared_output_file(p, "--save-master", kSlots * 4, r, kWorld, barrier.callback(), [&](OutputFile& f) {
          for (uint32_t i = uint32_t(r); i < kSlots; i += kWorld) {
            const uint32_t v = i * 7 + 1;
            f.write_at(&v, 4, uint64_t(i) * 4);
          }
        });
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const std::string bytes = read_all(p);
  ASSERT_EQ(bytes.size(), size_t(kSlots) * 4);
  for (uint32_t i = 0; i < kSlots; ++i) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + size_t(i) * 4, 4);
    ASSERT_EQ(v, i * 7 + 1) << "slot " << i;
  }
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"master.bin"});
}

// Rank 1 cannot write its part: every rank throws, the old file stays, the shared temporary is gone.
TEST(SharedOutputFile, ARankThatFailsLeavesTheTargetAsItWas) {
  tf::test::TempDir dir("tf_out");
  const fs::path p = dir.write("master.bin", "old");
  constexpr int kWorld = 2;
  tf::core::AndBarrier barrier(kWorld);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(kWorld);
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      const FaultHook hook = [r](const FaultPoint& f) { return r == 1 && f.op == "write" ? EIO : 0; };
      errors[size_t(r)] = tf::test::error_of<RuntimeFailure>([&] {
        write_shared_output_file(
            p, "--save-master", 8, r, kWorld, barrier.callback(),
            [&](OutputFile& f) {
              const float v = float(r);
              f.write_at(&v, 4, uint64_t(r) * 4);
            },
            hook);
      });
    });
  for (auto& t : ranks) t.join();
  EXPECT_NE(errors[0].find("another rank failed to write its part"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find(std::strerror(EIO)), std::string::npos) << errors[1];
  EXPECT_EQ(read_all(p), "old");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"master.bin"});
}
