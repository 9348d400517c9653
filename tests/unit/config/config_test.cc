// gpukitd's configuration (daemon/config/config.h): the embedded default, JSON overlays, the
// command line and their precedence.
#include "daemon/config/config.h"

#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

DaemonConfig EmbeddedDefault() {
  absl::StatusOr<DaemonConfig> config =
      ApplyConfigJson(EmbeddedDefaultConfigJson(), DaemonConfig{});
  EXPECT_THAT(config, IsOk());
  return config.ok() ? *config : DaemonConfig{};
}

absl::StatusOr<CommandLine> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "gpukitd");
  return ParseCommandLine(static_cast<int>(args.size()), args.data());
}

// ---- The embedded default ----

TEST(EmbeddedDefaultTest, ParsesAndGivesTheDocumentedDefaults) {
  const DaemonConfig config = EmbeddedDefault();
  EXPECT_THAT(config.listen, IsEmpty());
  EXPECT_EQ(config.backend, BackendChoice::kAuto);
  EXPECT_EQ(config.log_level, "info");
  EXPECT_EQ(config.cpu_memory_bytes, 4 * kGiB);
  EXPECT_EQ(config.core.limits.max_array_bytes, 2 * kGiB);
  EXPECT_EQ(config.core.limits.max_sessions, 1024);
  EXPECT_EQ(config.core.limits.max_arrays_per_session, 65536);
  EXPECT_EQ(config.core.sessions.default_lease, absl::Seconds(30));
  EXPECT_EQ(config.core.sessions.min_lease, absl::Seconds(1));
  EXPECT_EQ(config.core.sessions.max_lease, absl::Minutes(10));
  EXPECT_EQ(config.core.streams_per_partition, 2);
}

TEST(EmbeddedDefaultTest, AgreesWithTheCompiledInDefaults) {
  // The JSON and the option structs' own defaults must not drift apart.
  const DaemonConfig config = EmbeddedDefault();
  const CoreOptions core;
  EXPECT_EQ(config.core.limits.max_array_bytes, core.limits.max_array_bytes);
  EXPECT_EQ(config.core.limits.max_sessions, core.limits.max_sessions);
  EXPECT_EQ(config.core.limits.max_arrays_per_session, core.limits.max_arrays_per_session);
  EXPECT_EQ(config.core.sessions.default_lease, core.sessions.default_lease);
  EXPECT_EQ(config.core.sessions.min_lease, core.sessions.min_lease);
  EXPECT_EQ(config.core.sessions.max_lease, core.sessions.max_lease);
  EXPECT_EQ(config.core.streams_per_partition, core.streams_per_partition);
  EXPECT_EQ(config.cpu_memory_bytes, DeviceFactoryOptions{}.cpu_memory_bytes);
}

#ifdef GPUKIT_SOURCE_DIR
TEST(ShippedConfigTest, DeployExampleIsValid) {
  std::ifstream file(GPUKIT_SOURCE_DIR "/deploy/gpukitd.json");
  ASSERT_TRUE(file) << "deploy/gpukitd.json not found";
  const std::string json((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  absl::StatusOr<DaemonConfig> config = ApplyConfigJson(json, EmbeddedDefault());
  ASSERT_THAT(config, IsOk());
  EXPECT_THAT(config->listen, ElementsAre("unix:///run/gpukit/gpukitd.sock"));
}
#endif

// ---- ApplyConfigJson: overlays ----

struct OverlayCase {
  std::string name;
  std::string json;
  std::function<void(DaemonConfig&)> expect;  // edits the base into the expected config
};

class ApplyConfigJsonTest : public ::testing::TestWithParam<OverlayCase> {};

void ExpectSameConfig(const DaemonConfig& got, const DaemonConfig& want) {
  EXPECT_EQ(got.listen, want.listen);
  EXPECT_EQ(got.backend, want.backend);
  EXPECT_EQ(got.log_level, want.log_level);
  EXPECT_EQ(got.cpu_memory_bytes, want.cpu_memory_bytes);
  EXPECT_EQ(got.core.limits.max_array_bytes, want.core.limits.max_array_bytes);
  EXPECT_EQ(got.core.limits.max_sessions, want.core.limits.max_sessions);
  EXPECT_EQ(got.core.limits.max_arrays_per_session, want.core.limits.max_arrays_per_session);
  EXPECT_EQ(got.core.sessions.default_lease, want.core.sessions.default_lease);
  EXPECT_EQ(got.core.sessions.min_lease, want.core.sessions.min_lease);
  EXPECT_EQ(got.core.sessions.max_lease, want.core.sessions.max_lease);
  EXPECT_EQ(got.core.streams_per_partition, want.core.streams_per_partition);
}

TEST_P(ApplyConfigJsonTest, ChangesOnlyTheFieldsPresent) {
  const DaemonConfig base = EmbeddedDefault();
  absl::StatusOr<DaemonConfig> got = ApplyConfigJson(GetParam().json, base);
  ASSERT_THAT(got, IsOk());
  DaemonConfig want = base;
  GetParam().expect(want);
  ExpectSameConfig(*got, want);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ApplyConfigJsonTest,
    ::testing::Values(
        OverlayCase{"EmptyObject", "{}", [](DaemonConfig&) {}},
        OverlayCase{"Backend", R"({"backend": "cpu"})",
                    [](DaemonConfig& c) { c.backend = BackendChoice::kCpu; }},
        OverlayCase{"LogLevel", R"({"logLevel": "debug"})",
                    [](DaemonConfig& c) { c.log_level = "debug"; }},
        OverlayCase{"Listen", R"({"listen": ["unix:///tmp/g.sock", "127.0.0.1:7070"]})",
                    [](DaemonConfig& c) {
                      c.listen = {"unix:///tmp/g.sock", "127.0.0.1:7070"};
                    }},
        OverlayCase{"CpuMemory", R"({"cpu": {"memory": "512MiB"}})",
                    [](DaemonConfig& c) { c.cpu_memory_bytes = 512 * kMiB; }},
        OverlayCase{"MaxArraySizeInDecimalUnits", R"({"limits": {"maxArraySize": "1.5GB"}})",
                    [](DaemonConfig& c) { c.core.limits.max_array_bytes = 1500000000; }},
        OverlayCase{"CountLimits", R"({"limits": {"maxSessions": 5, "maxArraysPerSession": 9}})",
                    [](DaemonConfig& c) {
                      c.core.limits.max_sessions = 5;
                      c.core.limits.max_arrays_per_session = 9;
                    }},
        OverlayCase{"Leases",
                    R"({"sessions": {"defaultLease": "45s", "minLease": "500ms",
                                     "maxLease": "1h"}})",
                    [](DaemonConfig& c) {
                      c.core.sessions.default_lease = absl::Seconds(45);
                      c.core.sessions.min_lease = absl::Milliseconds(500);
                      c.core.sessions.max_lease = absl::Hours(1);
                    }},
        OverlayCase{"AllLeasesEqual", R"({"sessions": {"defaultLease": "10m", "minLease": "10m"}})",
                    [](DaemonConfig& c) {
                      c.core.sessions.default_lease = absl::Minutes(10);
                      c.core.sessions.min_lease = absl::Minutes(10);
                    }},
        OverlayCase{"StreamsPerPartition", R"({"streamsPerPartition": 8})",
                    [](DaemonConfig& c) { c.core.streams_per_partition = 8; }}),
    [](const ::testing::TestParamInfo<OverlayCase>& info) { return info.param.name; });

TEST(ApplyConfigJsonTest, OverlaysStack) {
  absl::StatusOr<DaemonConfig> first = ApplyConfigJson(R"({"backend": "cpu"})", EmbeddedDefault());
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<DaemonConfig> second = ApplyConfigJson(R"({"logLevel": "warn"})", *first);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->backend, BackendChoice::kCpu);
  EXPECT_EQ(second->log_level, "warn");
}

// ---- ApplyConfigJson: rejections ----

struct RejectCase {
  std::string name;
  std::string json;
  std::string message;
};

class RejectConfigJsonTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(RejectConfigJsonTest, IsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ApplyConfigJson(GetParam().json, EmbeddedDefault()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, RejectConfigJsonTest,
    ::testing::Values(
        RejectCase{"MalformedJson", R"({"backend": )", "configuration is not valid"},
        RejectCase{"NotAnObject", R"(["cpu"])", "configuration is not valid"},
        RejectCase{"UnknownTopLevelField", R"({"backends": "cpu"})", "backends"},
        RejectCase{"UnknownNestedField", R"({"limits": {"maxArrays": 3}})", "maxArrays"},
        RejectCase{"WrongType", R"({"streamsPerPartition": "four"})", "configuration is not valid"},
        RejectCase{"RenamedStreamsPerDevice", R"({"streamsPerDevice": 4})",
                   "streamsPerDevice was replaced by streamsPerPartition"},
        RejectCase{"BadBackend", R"({"backend": "gpu"})", "unknown backend \"gpu\""},
        RejectCase{"BadLogLevel", R"({"logLevel": "verbose"})",
                   "log level \"verbose\" is not one of"},
        RejectCase{"ListenWithoutPort", R"({"listen": ["localhost"]})",
                   "neither unix:///path nor host:port"},
        RejectCase{"RelativeUnixSocket", R"({"listen": ["unix://gpukit.sock"]})",
                   "needs an absolute path"},
        RejectCase{"SizeWithoutNumber", R"({"cpu": {"memory": "lots"}})", "cpu.memory"},
        RejectCase{"SizeWithUnknownUnit", R"({"limits": {"maxArraySize": "2GiBs"}})",
                   "limits.maxArraySize"},
        RejectCase{"ZeroSize", R"({"cpu": {"memory": "0GiB"}})",
                   "cpu.memory = \"0GiB\" must be > 0"},
        RejectCase{"NegativeSize", R"({"limits": {"maxArraySize": "-1"}})", "limits.maxArraySize"},
        RejectCase{"DurationWithoutUnit", R"({"sessions": {"defaultLease": "30"}})",
                   "sessions.defaultLease = \"30\" is not a positive duration"},
        RejectCase{"ZeroDuration", R"({"sessions": {"minLease": "0s"}})", "sessions.minLease"},
        RejectCase{"NegativeDuration", R"({"sessions": {"maxLease": "-5m"}})", "sessions.maxLease"},
        RejectCase{"GarbageDuration", R"({"sessions": {"maxLease": "soon"}})", "sessions.maxLease"},
        RejectCase{"MinLeaseAboveMax", R"({"sessions": {"minLease": "2m", "maxLease": "1m"}})",
                   "sessions.minLease is longer than sessions.maxLease"},
        RejectCase{"MaxLeaseBelowDefaultMin", R"({"sessions": {"maxLease": "500ms"}})",
                   "sessions.minLease is longer than sessions.maxLease"},
        RejectCase{"DefaultLeaseBelowMin", R"({"sessions": {"defaultLease": "500ms"}})",
                   "sessions.defaultLease must lie between"},
        RejectCase{"DefaultLeaseAboveMax", R"({"sessions": {"defaultLease": "11m"}})",
                   "sessions.defaultLease must lie between"},
        RejectCase{"MinLeaseAboveTheDefault", R"({"sessions": {"minLease": "1m"}})",
                   "sessions.defaultLease must lie between"},
        RejectCase{"NegativeMaxSessions", R"({"limits": {"maxSessions": -1}})", "maxSessions"},
        RejectCase{"NegativeArraysPerSession", R"({"limits": {"maxArraysPerSession": -3}})",
                   "maxArraysPerSession"},
        RejectCase{"NegativeStreams", R"({"streamsPerPartition": -2})",
                   "streamsPerPartition = -2 must be > 0"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

// ---- access: tenants and roles ----

TEST(AccessConfigTest, AbsentMeansTheDefaultPolicy) {
  EXPECT_FALSE(EmbeddedDefault().access.has_value());
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig empty,
                              ApplyConfigJson(R"({"access": {}})", EmbeddedDefault()));
  ASSERT_TRUE(empty.access.has_value()) << "an empty block is configured, with no rule";
  EXPECT_TRUE(empty.access->uid_tenants.empty());
  EXPECT_TRUE(empty.access->tenant_partitions.empty());
}

TEST(AccessConfigTest, MapsUidsGidsTenantsAndAdmins) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig config, ApplyConfigJson(R"({"access": {
      "uids": {"1000": "vision", "1001": "speech"},
      "gids": {"2000": "research"},
      "tenants": [{"name": "vision", "partitions": ["gpu-a", "default"]},
                  {"name": "guests", "partitions": []}],
      "adminUids": [1005], "adminGids": [3000, 3001]}})",
                                                                   EmbeddedDefault()));
  ASSERT_TRUE(config.access.has_value());
  const AccessRules& rules = *config.access;
  EXPECT_EQ(rules.uid_tenants.at(1000), "vision");
  EXPECT_EQ(rules.uid_tenants.at(1001), "speech");
  EXPECT_EQ(rules.gid_tenants.at(2000), "research");
  EXPECT_THAT(rules.tenant_partitions.at("vision"), ElementsAre("gpu-a", "default"));
  EXPECT_THAT(rules.tenant_partitions.at("guests"), IsEmpty());
  EXPECT_TRUE(rules.admin_uids.contains(1005));
  EXPECT_EQ(rules.admin_gids.size(), 2u);
}

TEST(AccessConfigTest, TokensTlsAndInsecureTcp) {
  const std::string hash(64, 'A');  // hex digits in either case; kept in lowercase
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      DaemonConfig config,
      ApplyConfigJson(absl::StrCat(R"({"access": {"tokens": [{"sha256": ")", hash,
                                   R"(", "tenant": "ci", "admin": true}],
        "tls": {"certFile": "/etc/gpukit/server.pem", "keyFile": "/etc/gpukit/server.key",
                "clientCaFile": "/etc/gpukit/clients.pem"}, "insecureTcp": true}})"),
                      EmbeddedDefault()));
  ASSERT_TRUE(config.access.has_value());
  const AccessRules::TokenGrant& grant = config.access->tokens.at(std::string(64, 'a'));
  EXPECT_EQ(grant.tenant, "ci");
  EXPECT_TRUE(grant.admin);
  EXPECT_EQ(config.tcp.cert_file, "/etc/gpukit/server.pem");
  EXPECT_EQ(config.tcp.key_file, "/etc/gpukit/server.key");
  EXPECT_EQ(config.tcp.client_ca_file, "/etc/gpukit/clients.pem");
  EXPECT_TRUE(config.tcp.insecure);
  // By default: no TLS and no insecure TCP, so a TCP address is refused at start-up.
  EXPECT_FALSE(EmbeddedDefault().tcp.insecure);
  EXPECT_TRUE(EmbeddedDefault().tcp.cert_file.empty());
}

TEST(AccessConfigTest, InsecureTcpFlagSetsIt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--insecure-tcp"}));
  EXPECT_TRUE(flags.insecure_tcp);
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig config, ResolveConfig(flags));
  EXPECT_TRUE(config.tcp.insecure);
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig plain, ResolveConfig(CommandLine{}));
  EXPECT_FALSE(plain.tcp.insecure);
}

TEST(AccessConfigTest, BadEntriesAreRefusedNamingThem) {
  for (const auto& [json, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"access": {"uids": {"1000": "a b"}}})", "access.uids[\"1000\"]"},
           {R"({"access": {"gids": {"7": ""}}})", "access.gids[\"7\"]"},
           {R"({"access": {"uids": {"alice": "x"}}})", "configuration is not valid"},
           {R"({"access": {"tenants": [{"name": "x"}, {"name": "x"}]}})",
            "access.tenants[1]: tenant \"x\" is listed twice"},
           {R"({"access": {"tenants": [{"name": "x", "partitions": ["a/b"]}]}})",
            "access.tenants[\"x\"].partitions[]"},
           {R"({"access": {"adminUids": [-1]}})", "configuration is not valid"},
           {R"({"access": {"admins": [0]}})", "admins"},
           {R"({"access": {"tokens": [{"sha256": "abc", "tenant": "t"}]}})",
            "64 lowercase hex digits"},
           {absl::StrCat(R"({"access": {"tokens": [{"sha256": ")", std::string(64, 'a'),
                         R"(", "tenant": "t"}, {"sha256": ")", std::string(64, 'A'),
                         R"(", "tenant": "u"}]}})"),
            "access.tokens[1]: the same sha256 is listed twice"},
           {R"({"access": {"tls": {"certFile": "/c.pem"}}})", "needs both certFile and keyFile"},
           {R"({"access": {"tls": {"clientCaFile": "/ca.pem"}}})", "needs both"}}) {
    EXPECT_THAT(ApplyConfigJson(json, EmbeddedDefault()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(field)))
        << json;
  }
}

// ---- Listen addresses ----

class ValidListenAddressTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidListenAddressTest, IsAccepted) {
  EXPECT_THAT(ValidateListenAddress(GetParam()), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Table, ValidListenAddressTest,
                         ::testing::Values("unix:///run/gpukit/gpukitd.sock", "unix:///s",
                                           "unix:///" + std::string(106, 'p'), "localhost:50051",
                                           "0.0.0.0:0", "[::1]:7070", "gpu-host.example:65535"));

class BadListenAddressTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BadListenAddressTest, IsInvalidArgumentQuotingIt) {
  EXPECT_THAT(ValidateListenAddress(GetParam()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listen address \"")));
}

INSTANTIATE_TEST_SUITE_P(Table, BadListenAddressTest,
                         ::testing::Values("", "localhost", ":50051", "host:", "host:65536",
                                           "host:-1", "host:http", "unix://", "unix://run/x.sock",
                                           "unix:///" + std::string(107, 'p')));

// ---- ParseCommandLine ----

TEST(ParseCommandLineTest, NoArgumentsSetNothing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({}));
  EXPECT_THAT(flags.listen, IsEmpty());
  EXPECT_FALSE(flags.backend.has_value());
  EXPECT_FALSE(flags.config_path.has_value());
  EXPECT_FALSE(flags.log_level.has_value());
  EXPECT_FALSE(flags.help || flags.version || flags.print_default_config);
}

TEST(ParseCommandLineTest, AcceptsSpaceAndEqualsForms) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      CommandLine flags,
      Parse({"--backend", "cpu", "--config=/etc/gpukit/gpukitd.json", "--log-level", "debug"}));
  EXPECT_EQ(flags.backend, "cpu");
  EXPECT_EQ(flags.config_path, "/etc/gpukit/gpukitd.json");
  EXPECT_EQ(flags.log_level, "debug");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine equals,
                              Parse({"--backend=cuda", "--config", "a.json", "--log-level=off"}));
  EXPECT_EQ(equals.backend, "cuda");
  EXPECT_EQ(equals.config_path, "a.json");
  EXPECT_EQ(equals.log_level, "off");
}

TEST(ParseCommandLineTest, ListenIsRepeatableInOrder) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      CommandLine flags,
      Parse({"--listen", "unix:///tmp/a.sock", "--listen=127.0.0.1:7070", "--listen", "[::]:1"}));
  EXPECT_THAT(flags.listen, ElementsAre("unix:///tmp/a.sock", "127.0.0.1:7070", "[::]:1"));
}

TEST(ParseCommandLineTest, ValueMayContainEqualsSigns) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--config=/tmp/a=b.json"}));
  EXPECT_EQ(flags.config_path, "/tmp/a=b.json");
}

TEST(ParseCommandLineTest, LaterFlagsOverrideEarlierOnes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--backend=cpu", "--backend=auto"}));
  EXPECT_EQ(flags.backend, "auto");
}

TEST(ParseCommandLineTest, RecognisesTheInformationalFlags) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine help, Parse({"--help"}));
  EXPECT_TRUE(help.help);
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine h, Parse({"-h"}));
  EXPECT_TRUE(h.help);
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine version, Parse({"--version"}));
  EXPECT_TRUE(version.version);
  EXPECT_FALSE(version.help);
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine print, Parse({"--print-default-config"}));
  EXPECT_TRUE(print.print_default_config);
}

struct BadArgsCase {
  std::string name;
  std::vector<const char*> args;
  std::string message;
};

class BadCommandLineTest : public ::testing::TestWithParam<BadArgsCase> {};

TEST_P(BadCommandLineTest, IsInvalidArgument) {
  EXPECT_THAT(Parse(GetParam().args),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadCommandLineTest,
    ::testing::Values(
        BadArgsCase{"UnknownFlag", {"--frobnicate"}, "unknown argument \"--frobnicate\""},
        BadArgsCase{"UnknownFlagWithValue", {"--port=80"}, "unknown argument \"--port=80\""},
        BadArgsCase{"UnknownShortFlag", {"-x"}, "unknown argument \"-x\""},
        BadArgsCase{"PositionalArgument", {"serve"}, "unknown argument \"serve\""},
        BadArgsCase{"SingleDashLongFlag", {"-listen", "host:1"}, "unknown argument \"-listen\""},
        BadArgsCase{"ListenWithoutValue", {"--listen"}, "--listen needs a value"},
        BadArgsCase{
            "BackendWithoutValue", {"--backend=cpu", "--backend"}, "--backend needs a value"},
        BadArgsCase{"ConfigWithoutValue", {"--config"}, "--config needs a value"},
        BadArgsCase{"LogLevelWithoutValue", {"--log-level"}, "--log-level needs a value"},
        BadArgsCase{"BadBackend", {"--backend", "gpu"}, "unknown backend \"gpu\""},
        BadArgsCase{"BadLogLevel", {"--log-level=loud"}, "log level \"loud\""},
        BadArgsCase{"ListenWithoutPort", {"--listen", "localhost"}, "listen address \"localhost\""},
        BadArgsCase{"EmptyListen", {"--listen="}, "listen address \"\""},
        BadArgsCase{"RelativeUnixListen", {"--listen=unix://x.sock"}, "absolute path"},
        BadArgsCase{"ListenSwallowsNextFlag",
                    {"--listen", "--backend=cpu"},
                    "listen address \"--backend=cpu\""}),
    [](const ::testing::TestParamInfo<BadArgsCase>& info) { return info.param.name; });

TEST(UsageTextTest, DocumentsEveryFlag) {
  const std::string usage = UsageText();
  for (const char* flag : {"--listen", "--backend", "--config", "--log-level",
                           "--metrics-address", "--print-default-config", "--version",
                           "--help"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
}

// ---- ResolveConfig: precedence ----

TEST(ResolveConfigTest, WithoutFileOrFlagsIsTheEmbeddedDefault) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig config, ResolveConfig(flags));
  ExpectSameConfig(config, EmbeddedDefault());
}

TEST(ResolveConfigTest, FileOverridesDefaultAndFlagsOverrideFile) {
  ScopedTempDir dir;
  const std::string path = dir.WriteFile("gpukitd.json", R"({
    "listen": ["unix:///tmp/from-file.sock"],
    "backend": "cpu",
    "logLevel": "warn",
    "limits": {"maxSessions": 7},
    "sessions": {"defaultLease": "1m"}
  })");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags,
                              Parse({"--config", path.c_str(), "--backend=cuda", "--listen=h:1"}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig config, ResolveConfig(flags));
  // Flags win over the file.
  EXPECT_EQ(config.backend, BackendChoice::kCuda);
  EXPECT_THAT(config.listen, ElementsAre("h:1"));
  // The file wins over the default where no flag is given.
  EXPECT_EQ(config.log_level, "warn");
  EXPECT_EQ(config.core.limits.max_sessions, 7);
  EXPECT_EQ(config.core.sessions.default_lease, absl::Minutes(1));
  // The default fills in what neither sets.
  EXPECT_EQ(config.cpu_memory_bytes, 4 * kGiB);
  EXPECT_EQ(config.core.limits.max_arrays_per_session, 65536);
  EXPECT_EQ(config.core.sessions.max_lease, absl::Minutes(10));
  EXPECT_EQ(config.core.streams_per_partition, 2);
}

TEST(ResolveConfigTest, FileValuesStandWhereNoFlagIsGiven) {
  ScopedTempDir dir;
  const std::string path =
      dir.WriteFile("gpukitd.json", R"({"listen": ["unix:///tmp/f.sock"], "backend": "cpu"})");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags,
                              Parse({"--config", path.c_str(), "--log-level", "error"}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig config, ResolveConfig(flags));
  EXPECT_THAT(config.listen, ElementsAre("unix:///tmp/f.sock"));
  EXPECT_EQ(config.backend, BackendChoice::kCpu);
  EXPECT_EQ(config.log_level, "error");
}

TEST(ResolveConfigTest, MissingFileIsNotFoundNamingIt) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/absent.json";
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--config", path.c_str()}));
  EXPECT_THAT(ResolveConfig(flags), StatusIs(absl::StatusCode::kNotFound,
                                             HasSubstr("cannot read --config file " + path)));
}

TEST(ResolveConfigTest, InvalidFileIsInvalidArgumentPrefixedWithItsPathAndLine) {
  ScopedTempDir dir;
  const std::string path =
      dir.WriteFile("bad.json", "{\n  \"limits\": {\n    \"maxArraySize\": \"huge\"\n  }\n}\n");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--config", path.c_str()}));
  EXPECT_THAT(ResolveConfig(flags), StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::testing::AllOf(HasSubstr(path + ":3: "),
                                                              HasSubstr("limits.maxArraySize"))));
}

TEST(ResolveConfigTest, MalformedFileNamesItsLineAndColumn) {
  ScopedTempDir dir;
  const std::string path = dir.WriteFile("bad.json", "{\n  \"logLevel\" \"debug\"\n}\n");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--config", path.c_str()}));
  EXPECT_THAT(ResolveConfig(flags),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(path + ":2:"), HasSubstr("expected ':'"))));
}

TEST(ResolveConfigTest, EmptyFileIsInvalid) {
  ScopedTempDir dir;
  const std::string path = dir.WriteFile("empty.json", "");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--config", path.c_str()}));
  EXPECT_THAT(ResolveConfig(flags), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpukit

// ---- Partitions and the scheduler ----

namespace gpukit {
namespace {

TEST(PartitionConfigTest, EmbeddedDefaultHasNoPartitionsAndTheSchedulerDefaults) {
  const DaemonConfig config = EmbeddedDefault();
  EXPECT_THAT(config.core.partitions, IsEmpty());
  EXPECT_EQ(config.core.pacing_burst, absl::Milliseconds(20));
  EXPECT_EQ(config.core.best_effort_in_flight, absl::Milliseconds(1));
  EXPECT_EQ(config.core.burstable_in_flight, absl::Milliseconds(4));
  EXPECT_EQ(config.core.task_history, 1000);
}

TEST(PartitionConfigTest, ParsesEveryPartitionField) {
  absl::StatusOr<DaemonConfig> config = ApplyConfigJson(R"({
    "partitions": [
      {"name": "gold", "device": 0, "memory": "1GiB", "compute": 0.5, "bandwidth": 0.75,
       "maxQueuedTasks": 8, "maxRunningTasks": 2, "maxSessions": 3, "spill": true,
       "reserveSms": true,
       "defaultRequests": {"memory": "64MiB", "compute": 0.1},
       "defaultLimits": {"memory": "128MiB", "compute": 0.2}},
      {"name": "bronze", "memory": "512MiB", "compute": 0.25}
    ],
    "scheduler": {"pacingBurst": "5ms", "taskHistory": 10, "bestEffortInFlight": "500us",
                  "burstableInFlight": "2ms"}
  })",
                                                        EmbeddedDefault());
  ASSERT_THAT(config, IsOk());
  ASSERT_EQ(config->core.partitions.size(), 2u);
  const PartitionSpec& gold = config->core.partitions[0];
  EXPECT_EQ(gold.name, "gold");
  EXPECT_EQ(gold.memory_quota_bytes, kGiB);
  EXPECT_DOUBLE_EQ(gold.compute_share, 0.5);
  EXPECT_DOUBLE_EQ(gold.bandwidth_cap, 0.75);
  EXPECT_EQ(gold.max_queued_tasks, 8);
  EXPECT_EQ(gold.max_running_tasks, 2);
  EXPECT_EQ(gold.max_sessions, 3);
  EXPECT_TRUE(gold.spill);
  EXPECT_TRUE(gold.reserve_sms);
  EXPECT_EQ(gold.session_defaults.memory_request_bytes, 64 * kMiB);
  EXPECT_EQ(gold.session_defaults.memory_limit_bytes, 128 * kMiB);
  EXPECT_EQ(gold.session_defaults.compute_request, 0.1);
  EXPECT_EQ(gold.session_defaults.compute_limit, 0.2);
  const PartitionSpec& bronze = config->core.partitions[1];
  EXPECT_EQ(bronze.device_index, 0);
  EXPECT_EQ(bronze.max_queued_tasks, 1024);  // defaults
  EXPECT_EQ(bronze.max_running_tasks, 1024);
  EXPECT_FALSE(bronze.spill);
  EXPECT_FALSE(bronze.reserve_sms);
  EXPECT_TRUE(bronze.session_defaults.empty());
  EXPECT_EQ(config->core.pacing_burst, absl::Milliseconds(5));
  EXPECT_EQ(config->core.best_effort_in_flight, absl::Microseconds(500));
  EXPECT_EQ(config->core.burstable_in_flight, absl::Milliseconds(2));
  EXPECT_EQ(config->core.task_history, 10);
}

TEST(PartitionConfigTest, TaskHistoryZeroTurnsHistoryOffAndAbsentKeepsTheBase) {
  absl::StatusOr<DaemonConfig> off =
      ApplyConfigJson(R"({"scheduler": {"taskHistory": 0}})", EmbeddedDefault());
  ASSERT_THAT(off, IsOk());
  EXPECT_EQ(off->core.task_history, 0);
  absl::StatusOr<DaemonConfig> absent =
      ApplyConfigJson(R"({"scheduler": {"pacingBurst": "5ms"}})", *off);
  ASSERT_THAT(absent, IsOk());
  EXPECT_EQ(absent->core.task_history, 0);
}

TEST(JitConfigTest, EmbeddedDefaultAndEveryField) {
  const DaemonConfig defaults = EmbeddedDefault();
  EXPECT_EQ(defaults.jit.cache_dir, "");
  EXPECT_EQ(defaults.jit.memory_budget_bytes, 256 * kMiB);
  EXPECT_EQ(defaults.jit.compile_time_budget, absl::Seconds(30));
  EXPECT_EQ(defaults.core.cpu_kernel_arch, "sm_90");
  absl::StatusOr<DaemonConfig> config = ApplyConfigJson(R"({"jit": {
      "cacheDir": "/var/cache/gpukit/kernels", "nvrtcDir": "/opt/nvrtc/lib",
      "memoryCache": "64MiB", "compileTimeout": "5s", "cpuArch": "sm_80"}})",
                                                        defaults);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->jit.cache_dir, "/var/cache/gpukit/kernels");
  EXPECT_EQ(config->jit.library_dir, "/opt/nvrtc/lib");
  EXPECT_EQ(config->jit.memory_budget_bytes, 64 * kMiB);
  EXPECT_EQ(config->jit.compile_time_budget, absl::Seconds(5));
  EXPECT_EQ(config->core.cpu_kernel_arch, "sm_80");
  absl::StatusOr<DaemonConfig> limited =
      ApplyConfigJson(R"({"limits": {"maxKernelsPerSession": 3}})", defaults);
  ASSERT_THAT(limited, IsOk());
  EXPECT_EQ(limited->core.max_kernels_per_session, 3);
  EXPECT_EQ(defaults.core.max_kernels_per_session, 256);
}

TEST(LimitsConfigTest, MaxOpsInFlightDefaultsTo128AndMustBePositive) {
  const DaemonConfig defaults;
  EXPECT_EQ(defaults.core.max_ops_in_flight, 128);
  absl::StatusOr<DaemonConfig> set =
      ApplyConfigJson(R"({"limits": {"maxOpsInFlight": 4}})", defaults);
  ASSERT_THAT(set, IsOk());
  EXPECT_EQ(set->core.max_ops_in_flight, 4);
  EXPECT_THAT(ApplyConfigJson(R"({"limits": {"maxOpsInFlight": -1}})", defaults),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limits.maxOpsInFlight")));
}

TEST(JitConfigTest, KernelCacheDirFollowsTheConfigThenSystemdThenXdgThenHome) {
  EXPECT_EQ(KernelCacheDir("none"), "");
  EXPECT_EQ(KernelCacheDir("/srv/kernels"), "/srv/kernels");
  {
    gpukit::testing::ScopedEnv systemd("CACHE_DIRECTORY", "/var/cache/gpukit:/other");
    EXPECT_EQ(KernelCacheDir(""), "/var/cache/gpukit/kernels");
  }
  gpukit::testing::ScopedEnv no_systemd("CACHE_DIRECTORY", std::nullopt);
  {
    gpukit::testing::ScopedEnv xdg("XDG_CACHE_HOME", "/home/u/.xdg");
    EXPECT_EQ(KernelCacheDir(""), "/home/u/.xdg/gpukit/kernels");
  }
  gpukit::testing::ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  gpukit::testing::ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(KernelCacheDir(""), "/home/u/.cache/gpukit/kernels");
}

INSTANTIATE_TEST_SUITE_P(
    Jit, RejectConfigJsonTest,
    ::testing::Values(RejectCase{"RelativeCacheDir", R"({"jit": {"cacheDir": "cache"}})",
                                 "jit.cacheDir"},
                      RejectCase{"OldArch", R"({"jit": {"cpuArch": "sm_70"}})", "jit.cpuArch"},
                      RejectCase{"NotAnArch", R"({"jit": {"cpuArch": "hopper"}})", "jit.cpuArch"},
                      RejectCase{"BadTimeout", R"({"jit": {"compileTimeout": "soon"}})",
                                 "jit.compileTimeout"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Partitions, RejectConfigJsonTest,
    ::testing::Values(
        RejectCase{"PartitionWithoutMemory", R"({"partitions": [{"name": "p", "compute": 0.5}]})",
                   "partitions[0]: memory is required"},
        RejectCase{"PartitionWithBadSize",
                   R"({"partitions": [{"name": "p", "memory": "big", "compute": 0.5}]})",
                   "partitions[0]: memory"},
        RejectCase{"PartitionShareAboveOne",
                   R"({"partitions": [{"name": "p", "memory": "1GiB", "compute": 1.5}]})",
                   "compute share = 1.5 must be in (0, 1]"},
        RejectCase{"PartitionWithoutName",
                   R"({"partitions": [{"memory": "1GiB", "compute": 0.5}]})",
                   "partition name \"\" must be 1 to 63 characters"},
        RejectCase{"PartitionCapBelowShare",
                   R"({"partitions": [{"name": "p", "memory": "1GiB", "compute": 0.5,
                                       "bandwidth": 0.25}]})",
                   "bandwidth cap = 0.25"},
        RejectCase{"PartitionDefaultRequestAboveLimit",
                   R"({"partitions": [{"name": "p", "memory": "1GiB", "compute": 0.5,
                                       "defaultRequests": {"memory": "2GiB"},
                                       "defaultLimits": {"memory": "1GiB"}}]})",
                   "requests.memory"},
        RejectCase{"NegativeTaskHistory", R"({"scheduler": {"taskHistory": -1}})",
                   "scheduler.taskHistory = -1"},
        RejectCase{"BadPacingBurst", R"({"scheduler": {"pacingBurst": "soon"}})",
                   "scheduler.pacingBurst"},
        RejectCase{"ZeroBestEffortInFlight", R"({"scheduler": {"bestEffortInFlight": "0s"}})",
                   "scheduler.bestEffortInFlight = \"0s\" is not a positive duration"},
        RejectCase{"BadBurstableInFlight", R"({"scheduler": {"burstableInFlight": "lots"}})",
                   "scheduler.burstableInFlight"},
        RejectCase{"BurstableBoundBelowBestEffort",
                   R"({"scheduler": {"bestEffortInFlight": "2ms", "burstableInFlight": "1ms"}})",
                   "scheduler.burstableInFlight = 1ms must be at least "
                   "scheduler.bestEffortInFlight = 2ms"},
        RejectCase{"BestEffortBoundAboveTheDefaultBurstableOne",
                   R"({"scheduler": {"bestEffortInFlight": "5ms"}})",
                   "scheduler.burstableInFlight = 4ms must be at least"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Server, RejectConfigJsonTest,
    ::testing::Values(RejectCase{"OneThread", R"({"server": {"maxThreads": 1}})",
                                 "server.maxThreads = 1 must be >= 2"},
                      RejectCase{"NegativeThreads", R"({"server": {"maxThreads": -4}})",
                                 "server.maxThreads = -4 must be >= 2"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) { return info.param.name; });

TEST(ServerConfigTest, MaxThreadsDefaultsTo256AndAFileMaySetIt) {
  const DaemonConfig defaults = EmbeddedDefault();
  EXPECT_EQ(defaults.server_max_threads, 256);
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig set,
                              ApplyConfigJson(R"({"server": {"maxThreads": 16}})", defaults));
  EXPECT_EQ(set.server_max_threads, 16);
}

TEST(SchedulerConfigTest, PacingAnticipationDefaultAgreesAndAFileMaySetIt) {
  const DaemonConfig defaults = EmbeddedDefault();
  EXPECT_EQ(defaults.core.pacing_anticipation, absl::ZeroDuration());
  EXPECT_EQ(defaults.core.pacing_anticipation, CoreOptions{}.pacing_anticipation);
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      DaemonConfig set, ApplyConfigJson(R"({"scheduler": {"pacingAnticipation": "2ms"}})", defaults));
  EXPECT_EQ(set.core.pacing_anticipation, absl::Milliseconds(2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      DaemonConfig off, ApplyConfigJson(R"({"scheduler": {"pacingAnticipation": "0s"}})", defaults));
  EXPECT_EQ(off.core.pacing_anticipation, absl::ZeroDuration());
  EXPECT_THAT(ApplyConfigJson(R"({"scheduler": {"pacingAnticipation": "-1ms"}})", defaults),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scheduler.pacingAnticipation")));
}

TEST(QosConfigTest, SliceLengthsDefaultAgreeAndAFileMaySetThem) {
  const DaemonConfig defaults = EmbeddedDefault();
  EXPECT_EQ(defaults.qos.best_effort_slice, absl::Microseconds(100));
  EXPECT_EQ(defaults.qos.burstable_slice, absl::Microseconds(500));
  // The JSON and the device options' own defaults must not drift apart.
  EXPECT_EQ(defaults.qos.best_effort_slice, DeviceFactoryOptions{}.matmul_slices.low_priority);
  EXPECT_EQ(defaults.qos.burstable_slice, DeviceFactoryOptions{}.matmul_slices.normal_priority);
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      DaemonConfig set,
      ApplyConfigJson(R"({"qos": {"bestEffortSlice": "50us", "burstableSlice": "0s"}})", defaults));
  EXPECT_EQ(set.qos.best_effort_slice, absl::Microseconds(50));
  EXPECT_EQ(set.qos.burstable_slice, absl::ZeroDuration());
  EXPECT_EQ(defaults.core.best_effort_sm_share, 1.0);
  EXPECT_EQ(defaults.core.best_effort_sm_share, CoreOptions{}.best_effort_sm_share);
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig shared,
                              ApplyConfigJson(R"({"qos": {"bestEffortSmShare": 0.875}})", defaults));
  EXPECT_EQ(shared.core.best_effort_sm_share, 0.875);
  for (const char* bad : {R"({"qos": {"bestEffortSlice": "-1us"}})",
                          R"({"qos": {"bestEffortSlice": "fast"}})",
                          R"({"qos": {"burstableSlice": "2s"}})",
                          R"({"qos": {"bestEffortSmShare": 0}})",
                          R"({"qos": {"bestEffortSmShare": 1.5}})"}) {
    EXPECT_THAT(ApplyConfigJson(bad, defaults),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("qos.")))
        << bad;
  }
}

TEST(MetricsConfigTest, OffByDefaultAFileSetsItAndTheFlagOverridesOrTurnsItOff) {
  const DaemonConfig defaults = EmbeddedDefault();
  EXPECT_EQ(defaults.metrics_address, "");
  GPUKIT_ASSERT_OK_AND_ASSIGN(DaemonConfig set,
                              ApplyConfigJson(R"({"metricsAddress": "127.0.0.1:9400"})", defaults));
  EXPECT_EQ(set.metrics_address, "127.0.0.1:9400");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine flags, Parse({"--metrics-address", "[::1]:0"}));
  EXPECT_EQ(flags.metrics_address, "[::1]:0");
  GPUKIT_ASSERT_OK_AND_ASSIGN(CommandLine off, Parse({"--metrics-address="}));
  EXPECT_EQ(off.metrics_address, "") << "an empty value turns a configured server off";
  for (const char* bad : {"9400", ":9400", "host:port", "127.0.0.1:65536", "unix:///tmp/m"}) {
    EXPECT_THAT(ValidateMetricsAddress(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metrics address")))
        << bad;
    EXPECT_THAT(ApplyConfigJson(absl::StrCat(R"({"metricsAddress": ")", bad, R"("})"), defaults),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_THAT(ValidateMetricsAddress("0.0.0.0:0"), IsOk());
}

}  // namespace
}  // namespace gpukit
