// The CLI's shared helpers (apps/twinflow/cli.h, master_weights.h): integer options that never wrap,
// the metrics options' ranges, the exit code of each kind of failure, escaped messages, the scenario
// record of --json, and --save-master's file written by several ranks.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "apps/twinflow/cli.h"
#include "apps/twinflow/commands.h"
#include "apps/twinflow/master_weights.h"
#include "core/and_barrier.h"
#include "core/error.h"
#include "core/scenario.h"
#include "core/settings.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace tf::app;
using tf::core::InputError;

namespace {

const IntOption kN{"n", 1, int64_t(1) << 31, 100003, "elements"};
const IntOption kWorld{"world", 1, 65536, std::nullopt, "ranks"};

po::variables_map parse(const std::vector<std::string>& args, void (*add)(po::options_description&)) {
  po::options_description desc("test");
  add(desc);
  return *parse_command(args, desc, nullptr);
}
void add_ints(po::options_description& d) {
  add_int_option(d, kN);
  add_int_option(d, kWorld);
}
void add_metrics(po::options_description& d) { add_metrics_options(d, "port", "address", "linger"); }

template <class E>
Failure classify(E e) {
  try {
    throw e;
  } catch (...) {
    return classify_current_exception("simulate");
  }
}

}  // namespace

TEST(CliIntOption, NegativeAndHugeValuesAreRangeErrorsNeverWrapped) {
  EXPECT_EQ(tf::test::error_of<InputError>([] {
              int_option(parse({"--n", "-1"}, add_ints), kN);
            }),
            "--n '-1': expected an integer in [1, 2147483648]");
  for (const char* bad :
       {"0", "2147483649", "18446744073709551615", "99999999999999999999999", "12abc", "1e3", "0x10", " 5", "", "+-3"})
    EXPECT_NE(tf::test::error_of<InputError>([&] {
                int_option(parse({"--n", bad}, add_ints), kN);
              }).find("expected an integer in"),
              std::string::npos)
        << bad;
  EXPECT_EQ(int_option(parse({"--n", "2147483648"}, add_ints), kN), int64_t(1) << 31);
  EXPECT_EQ(int_option(parse({}, add_ints), kN), 100003);  // the default
  EXPECT_EQ(optional_int_option(parse({}, add_ints), kWorld), std::nullopt);
  EXPECT_EQ(optional_int_option(parse({"--world", "65536"}, add_ints), kWorld), 65536);
  EXPECT_EQ(checked_int("9223372036854775807", "--seed", 0, INT64_MAX), INT64_MAX);
  EXPECT_THROW(int_option(parse({}, add_ints), kWorld), std::logic_error);  // no default: optional_int_option
}

TEST(CliIntOption, HelpStatesTheRange) {
  po::options_description d("test");
  add_int_option(d, kN);
  std::ostringstream os;
  os << d;
  EXPECT_NE(os.str().find("elements (an integer in [1, 2147483648])"), std::string::npos) << os.str();
}

TEST(CliMetricsOptions, LingerAndPortAreBoundedBeforeUse) {
  EXPECT_EQ(tf::test::error_of<InputError>([] {
              read_metrics_options(parse({"--metrics-linger", "1e10"}, add_metrics));
            }),
            "--metrics-linger 1e+10: allowed -1 (serve until interrupted) or [0, 1e+06] seconds");
  for (const char* bad : {"-2", "-0.5", "1000001", "inf", "nan"})
    EXPECT_NE(tf::test::error_of<InputError>([&] {
                read_metrics_options(parse({"--metrics-linger", bad}, add_metrics));
              }),
              "(no exception)")
        << bad;
  for (const char* bad : {"-1", "65536", "1e3"})
    EXPECT_NE(tf::test::error_of<InputError>([&] {
                read_metrics_options(parse({"--metrics-port", bad}, add_metrics));
              }).find("--metrics-port '"),
              std::string::npos)
        << bad;
  const MetricsOptions m = read_metrics_options(parse({"--metrics-port", "0", "--metrics-linger", "-1"}, add_metrics));
  EXPECT_EQ(m.port, 0);
  EXPECT_EQ(m.linger_s, -1);
  EXPECT_TRUE(m.linger_given);
  EXPECT_EQ(read_metrics_options(parse({"--metrics-linger", "1e6"}, add_metrics)).linger_s, 1e6);
}

TEST(CliExitCodes, EachKindOfFailureHasItsCode) {
  const struct {
    Failure got;
    int code;
    const char* kind;
  } cases[] = {
      {classify(InputError("bad key")), kExitBadInput, "error"},
      {classify(po::unknown_option("--frob")), kExitBadInput, "error"},
      {classify(tf::core::RuntimeFailure("cudaMalloc failed")), kExitRuntime, "failure"},
      {classify(std::bad_alloc()), kExitRuntime, "failure"},
      {classify(fs::filesystem_error("x", std::make_error_code(std::errc::io_error))), kExitRuntime, "failure"},
      {classify(boost::system::system_error(boost::asio::error::address_in_use)), kExitRuntime, "failure"},
      {classify(std::logic_error("broken invariant")), kExitInternal, "internal error"},
      {classify(std::invalid_argument("EventQueue: time in the past")), kExitInternal, "internal error"},
      {classify(std::length_error("vector")), kExitInternal, "internal error"},
      {classify(std::runtime_error("unclassified")), kExitInternal, "internal error"},
      {classify(42), kExitInternal, "internal error"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.got.exit_code, c.code) << c.got.message;
    EXPECT_EQ(c.got.kind, c.kind) << c.got.message;
  }
  EXPECT_EQ(cases[0].got.message, "bad key");
  EXPECT_NE(cases[1].got.message.find("(see `twinflow simulate --help`)"), std::string::npos);
  EXPECT_NE(cases[6].got.message.find("broken invariant (an internal error of twinflow"), std::string::npos);
  EXPECT_NE(cases[10].got.message.find("not a std::exception"), std::string::npos);
}

TEST(CliMessages, ControlCharactersAreEscapedNewlinesKept) {
  std::ostringstream os;
  print_message(os, "twinflow simulate: error", "key `\x1b[31mred` at 1:2\nnext line\a\x7f");
  EXPECT_EQ(os.str(), "twinflow simulate: error: key `\\x1b[31mred` at 1:2\nnext line\\x07\\x7f\n");
  std::ostringstream prefix;
  print_message(prefix, "w\x1b", "m");
  EXPECT_EQ(prefix.str(), "w\\x1b: m\n");
}

// The record's settings are settings_report's, numbers as JSON numbers (integers stay integers); its
// defaults are the scenario's applied_defaults in order; its warnings every warning printed.
TEST(CliScenarioRecord, SettingsDefaultsAndWarnings) {
  const tf::core::Scenario sc = tf::core::parse_scenario(
      "model: toy-mlp\n"
      "cluster: {profile: h200x2-32core, gpus_per_node: 2}\n"
      "ds_config:\n"
      "  train_batch_size: 256\n"
      "  steps_per_print: 1\n"
      "  optimizer: {type: Adam, params: {lr: 0.00015}}\n"
      "  fp16: {enabled: true}\n"
      "  zero_optimization: {stage: 3, offload_optimizer: {device: cpu, ratio: 0.4}}\n",
      {}, "record.yaml");
  ASSERT_FALSE(sc.applied_defaults.empty());
  warn("a warning for the record");
  nlohmann::json doc;
  add_scenario_record(doc, sc);
  const std::vector<tf::core::ReportedSetting> report = tf::core::settings_report(sc);
  ASSERT_EQ(doc["settings"].size(), report.size());
  for (const tf::core::ReportedSetting& r : report) {
    const nlohmann::json& v = doc["settings"][r.key];
    if (!r.number) {
      EXPECT_EQ(v, r.value) << r.key;
    } else {
      ASSERT_TRUE(v.is_number()) << r.key;
      EXPECT_EQ(v.get<double>(), std::stod(r.value)) << r.key;
    }
  }
  EXPECT_TRUE(doc["settings"]["zero.stage"].is_number_integer());
  EXPECT_EQ(doc["settings"]["zero.stage"], 3);
  EXPECT_EQ(doc["settings"]["optimizer.lr"].get<double>(), 0.00015);
  EXPECT_EQ(doc["settings"]["zero.offload_optimizer.ratio"].get<double>(), 0.4);
  ASSERT_EQ(doc["defaults"].size(), sc.applied_defaults.size());
  for (size_t i = 0; i < sc.applied_defaults.size(); ++i) {
    EXPECT_EQ(doc["defaults"][i]["key"], sc.applied_defaults[i].key);
    EXPECT_EQ(doc["defaults"][i]["value"], sc.applied_defaults[i].value);
    EXPECT_EQ(doc["defaults"][i]["why"], sc.applied_defaults[i].why);
  }
  EXPECT_NE(std::find(doc["warnings"].begin(), doc["warnings"].end(), "a warning for the record"),
            doc["warnings"].end());
  // the metrics' configuration comes from the same scenario and settings
  const tf::core::RunSettings rs = tf::core::resolve_settings(sc);
  const tf::metrics::RunConfig c = metrics_run_config(sc, rs, 0.25);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.zero_stage, 3);
  EXPECT_EQ(c.micro_batch, rs.step.micro_batch);
  EXPECT_EQ(c.grad_accum, rs.step.grad_accum);
  EXPECT_EQ(c.offload_ratio, 0.25);
  EXPECT_EQ(c.precision, "fp16");
  EXPECT_EQ(c.optimizer, std::string(tf::core::optimizer_name(sc.optimizer.kind)));
  EXPECT_EQ(c.offload_device, "cpu");
}

TEST(CliWarnings, EachTextIsPrintedAndRecordedOnce) {
  const size_t before = warnings_given().size();
  warn("twice \x1b");
  warn("twice \x1b");
  EXPECT_EQ(warnings_given().size(), before + 1);
  EXPECT_EQ(warnings_given().back(), "twice \x1b");  // the record keeps the text; the terminal gets it escaped
}

// --save-master: two ranks own alternating runs of the model; the file holds every weight in model
// order, bit for bit, and only the file is left.
TEST(MasterWeights, RanksWriteOneFileInModelOrder) {
  tf::test::TempDir dir("tf_master");
  const fs::path p = dir.path() / "master.f32";
  constexpr int64_t kTotal = 10000;
  const auto value = [](int64_t i) { return float(i) * 0.5f - 3.25f; };
  std::vector<std::vector<std::pair<int64_t, float>>> mine(2);
  for (int64_t i = 0; i < kTotal; ++i) mine[size_t((i / 777) % 2)].push_back({i, value(i)});
  tf::core::AndBarrier and_barrier(2);
  const tf::core::RankBarrier barrier = and_barrier.callback();
  std::thread r1([&] { write_master_weights(p.string(), kTotal, mine[1], 1, 2, barrier); });
  write_master_weights(p.string(), kTotal, mine[0], 0, 2, barrier);
  r1.join();
  std::ifstream f(p, std::ios::binary);
  std::vector<float> got(kTotal + 1);
  f.read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 4));
  ASSERT_EQ(f.gcount(), kTotal * 4);
  for (int64_t i = 0; i < kTotal; ++i) {
    const float want = value(i);
    ASSERT_EQ(std::memcmp(&got[size_t(i)], &want, 4), 0) << "weight " << i;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // one rank: the file has every slot (zeros where none was given)
  write_master_weights(p.string(), 4, {{1, 2.0f}}, 0, 1, {});
  EXPECT_EQ(fs::file_size(p), 16u);
  EXPECT_THROW(write_master_weights(p.string(), 4, {{4, 1.0f}}, 0, 1, {}), std::logic_error);
}

// run_passing_stop_signals (validate's measuring run): the child's exit code; a SIGTERM that reaches the
// waiting thread goes to the child's whole group, so a child that would wait 30 s for its own child ends at
// once, both of them; the previous handler is back afterwards.
TEST(ChildRun, ExitCodesAndAStopSignalPassedOnToTheChildsGroup) {
  using namespace std::chrono_literals;
  using tf::app::run_passing_stop_signals;
  EXPECT_EQ(run_passing_stop_signals("t", {"/bin/sh", "-c", "exit 7"}).code, 7);
  const tf::app::ChildExit ok = run_passing_stop_signals("t", {"/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(ok.code, 0);
  EXPECT_EQ(ok.stop_signal, 0);
  EXPECT_EQ(run_passing_stop_signals("t", {"/nonexistent/twinflow"}).code, 127);
  EXPECT_THROW((void)run_passing_stop_signals("t", {}), std::logic_error);

  const pthread_t waiter = pthread_self();
  std::thread sender([waiter] {
    std::this_thread::sleep_for(300ms);
    pthread_kill(waiter, SIGTERM);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const tf::app::ChildExit e = run_passing_stop_signals("t", {"/bin/sh", "-c", "sleep 30 & wait"});
  const auto waited = std::chrono::steady_clock::now() - t0;
  sender.join();
  EXPECT_EQ(e.stop_signal, SIGTERM);
  EXPECT_EQ(e.code, 128 + SIGTERM);  // the shell ended by the signal passed on
  EXPECT_LT(waited, 10s);
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}
