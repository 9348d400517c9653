// gpukit-device-plugin against a fake kubelet (fake_kubelet.h: Registration from the
// repository's v1beta1 proto) and a live gpukitd on the CPU backend: registration per
// partition, ListAndWatch following partitions and gpukitd's health, Allocate's answer, a
// kubelet restart, and a client in the pod landing in its partition through $GPUKIT_PARTITION.
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpukit/client.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"
#include "tests/integration/daemon_fixture.h"  // PollUntil
#include "tests/integration/daemon_process.h"
#include "tests/integration/fake_kubelet.h"
#include "tests/integration/raw_api.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/stat.h>

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kWait = absl::Seconds(30);

// "id:health" of each device of a ListAndWatch message, in order.
std::vector<std::string> Devices(const v1beta1::ListAndWatchResponse& response) {
  std::vector<std::string> out;
  for (const v1beta1::Device& d : response.devices()) out.push_back(d.id() + ":" + d.health());
  return out;
}

// One ListAndWatch stream of a plugin endpoint, read message by message. A message that
// does not come within kWait ends the stream (Next returns false), so a test never hangs.
class Watch {
 public:
  explicit Watch(v1beta1::DevicePlugin::Stub& stub) {
    context_.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kWait));
    reader_ = stub.ListAndWatch(&context_, v1beta1::Empty());
  }
  bool Next(v1beta1::ListAndWatchResponse& out) { return reader_->Read(&out); }
  grpc::Status Finish() { return reader_->Finish(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader_;
};

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plugin_dir_ = dir_.path() + "/plugins";
    ASSERT_EQ(mkdir(plugin_dir_.c_str(), 0755), 0);
    ASSERT_NO_FATAL_FAILURE(StartDaemon());
    if (KubeletFirst()) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(kubelet_, FakeKubelet::Start(KubeletSocket()));
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        Subprocess plugin,
        Subprocess::Spawn({.argv = {FindBinary(GPUKIT_DEVICE_PLUGIN_PATH), "--gpukit-addr",
                                    daemon_->address(), "--plugin-dir", plugin_dir_,
                                    "--poll-interval=100ms", "--devices-per-partition=4"},
                           .stdout_path = dir_.path() + "/plugin.log"}));
    plugin_.emplace(std::move(plugin));
  }

  void TearDown() override {
    if (plugin_.has_value()) {
      // SIGTERM: the plugin stops its endpoints, removes their sockets and exits 0.
      GPUKIT_EXPECT_OK(plugin_->Signal(SIGTERM));
      absl::StatusOr<int> code = plugin_->WaitForExitCode(absl::Seconds(10));
      EXPECT_THAT(code, IsOkAndHolds(0));
      struct stat st;
      EXPECT_NE(stat(EndpointPath("default").c_str(), &st), 0) << "socket left behind";
      if (HasFailure()) {
        std::cout << "---- plugin log ----\n"
                  << plugin_->Output() << "---- end of plugin log ----\n";
      }
    }
    if (daemon_ != nullptr && daemon_->Running()) {
      if (HasFailure()) std::cout << "---- gpukitd log ----\n" << daemon_->Log();
      GPUKIT_EXPECT_OK(daemon_->Stop());
    }
  }

  // Whether SetUp starts the fake kubelet before the plugin.
  virtual bool KubeletFirst() const { return true; }

  void StartDaemon() {
    DaemonOptions options;
    options.dir = dir_.path();
    // Room on the device for a partition the tests create.
    options.config_json =
        R"({"partitions": [{"name": "default", "memory": "256MiB", "compute": 0.5}]})";
    GPUKIT_ASSERT_OK_AND_ASSIGN(daemon_, DaemonProcess::Start(options));
    GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi api, RawApi::Connect(daemon_->address()));
    admin_ = v1::AdminService::NewStub(api.channel());
  }

  std::string KubeletSocket() const { return plugin_dir_ + "/kubelet.sock"; }
  std::string EndpointPath(const std::string& partition) const {
    return absl::StrCat(plugin_dir_, "/gpukit-", partition, ".sock");
  }
  // A stub on the endpoint that a registration named.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> Dial(const std::string& endpoint) {
    return v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
        absl::StrCat("unix://", plugin_dir_, "/", endpoint), grpc::InsecureChannelCredentials()));
  }

  grpc::Status CreatePartition(const std::string& name, int max_sessions) {
    v1::CreatePartitionRequest request;
    v1::Partition* p = request.mutable_partition();
    p->set_name(name);
    p->set_memory_quota_bytes(int64_t{64} << 20);
    p->set_compute_share(0.25);
    p->set_max_sessions(max_sessions);
    grpc::ClientContext context;
    v1::CreatePartitionResponse response;
    return admin_->CreatePartition(&context, request, &response);
  }

  ScopedTempDir dir_;
  std::string plugin_dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::optional<Subprocess> plugin_;
};

TEST_F(DevicePluginTest, RegistersEachPartitionAndListsItsDevices) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait));
  EXPECT_EQ(registration.version(), "v1beta1");
  EXPECT_EQ(registration.endpoint(), "gpukit-default.sock");
  EXPECT_FALSE(registration.options().pre_start_required());

  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  grpc::ClientContext options_context;
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(plugin->GetDevicePluginOptions(&options_context, {}, &options).ok());
  EXPECT_FALSE(options.pre_start_required());
  EXPECT_FALSE(options.get_preferred_allocation_available());

  // "default" sets no max_sessions: --devices-per-partition slots.
  Watch watch(*plugin);
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("default-0:Healthy", "default-1:Healthy",
                                         "default-2:Healthy", "default-3:Healthy"));
}

TEST_F(DevicePluginTest, NewPartitionRegistersAndItsListFollowsUpdateAndDelete) {
  GPUKIT_ASSERT_OK(kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait).status());
  ASSERT_TRUE(CreatePartition("team-a", 2).ok());

  // A new resource, registered on its own endpoint, with max_sessions slots.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/team-a", 1, kWait));
  EXPECT_EQ(registration.version(), "v1beta1");
  EXPECT_EQ(registration.endpoint(), "gpukit-team-a.sock");
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  Watch watch(*plugin);
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("team-a-0:Healthy", "team-a-1:Healthy"));

  // A new max_sessions: a new list on the same stream.
  v1::UpdatePartitionRequest update;
  update.mutable_partition()->set_name("team-a");
  update.mutable_partition()->set_max_sessions(3);
  update.add_update_mask("max_sessions");
  grpc::ClientContext update_context;
  v1::UpdatePartitionResponse updated;
  ASSERT_TRUE(admin_->UpdatePartition(&update_context, update, &updated).ok());
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list),
              ElementsAre("team-a-0:Healthy", "team-a-1:Healthy", "team-a-2:Healthy"));

  // Deleted: an empty list, then the stream ends and the endpoint's socket is gone.
  v1::DeletePartitionRequest remove;
  remove.set_name("team-a");
  grpc::ClientContext delete_context;
  v1::DeletePartitionResponse removed;
  ASSERT_TRUE(admin_->DeletePartition(&delete_context, remove, &removed).ok());
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), IsEmpty());
  EXPECT_FALSE(watch.Next(list));
  EXPECT_TRUE(watch.Finish().ok());
  struct stat st;
  EXPECT_NE(stat(EndpointPath("team-a").c_str(), &st), 0);
  EXPECT_EQ(kubelet_->Registrations("gpukit.io/default"), 1);  // untouched
}

TEST_F(DevicePluginTest, AllocateMountsTheSocketDirectoryAndSetsAddressAndPartition) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait));
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("default-1");
  v1beta1::ContainerAllocateRequest* second = request.add_container_requests();
  second->add_devices_ids("default-0");
  second->add_devices_ids("default-3");
  grpc::ClientContext context;
  v1beta1::AllocateResponse response;
  grpc::Status status = plugin->Allocate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.container_responses_size(), 2);
  for (const v1beta1::ContainerAllocateResponse& container : response.container_responses()) {
    ASSERT_EQ(container.mounts_size(), 1);
    EXPECT_EQ(container.mounts(0).host_path(), dir_.path());  // where gpukitd.sock is
    EXPECT_EQ(container.mounts(0).container_path(), "/run/gpukit");
    EXPECT_TRUE(container.mounts(0).read_only());
    EXPECT_THAT(container.envs(),
                UnorderedElementsAre(Pair("GPUKIT_ADDR", "unix:///run/gpukit/gpukitd.sock"),
                                     Pair("GPUKIT_PARTITION", "default")));
    EXPECT_THAT(container.devices(), IsEmpty());
  }

  // An id the plugin never listed is refused.
  v1beta1::AllocateRequest unknown;
  unknown.add_container_requests()->add_devices_ids("default-99");
  grpc::ClientContext unknown_context;
  EXPECT_EQ(plugin->Allocate(&unknown_context, unknown, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DevicePluginTest, DevicesTurnUnhealthyWhileGpukitdIsDownAndHealthyWhenItIsBack) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait));
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  Watch watch(*plugin);
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  ASSERT_THAT(Devices(list), ElementsAre("default-0:Healthy", "default-1:Healthy",
                                         "default-2:Healthy", "default-3:Healthy"));

  GPUKIT_ASSERT_OK(daemon_->Stop());
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("default-0:Unhealthy", "default-1:Unhealthy",
                                         "default-2:Unhealthy", "default-3:Unhealthy"));

  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("default-0:Healthy", "default-1:Healthy",
                                         "default-2:Healthy", "default-3:Healthy"));
  EXPECT_EQ(kubelet_->Registrations("gpukit.io/default"), 1);  // the kubelet did not restart
}

TEST_F(DevicePluginTest, RegistersAgainWhenTheKubeletRestarts) {
  GPUKIT_ASSERT_OK(kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait).status());
  // A restarting kubelet removes every socket of its directory, then serves a new kubelet.sock.
  kubelet_->Stop();
  ASSERT_EQ(unlink(EndpointPath("default").c_str()), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(kubelet_, FakeKubelet::Start(KubeletSocket()));

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait));
  EXPECT_EQ(registration.endpoint(), "gpukit-default.sock");
  // The endpoint serves again at the path the registration names.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  Watch watch(*plugin);
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  EXPECT_EQ(list.devices_size(), 4);
}

TEST_F(DevicePluginTest, ClientInTheContainerOpensItsSessionInTheAllocatedPartition) {
  ASSERT_TRUE(CreatePartition("team-a", 2).ok());
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/team-a", 1, kWait));
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin = Dial(registration.endpoint());
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("team-a-0");
  grpc::ClientContext context;
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(plugin->Allocate(&context, request, &response).ok());
  const auto& envs = response.container_responses(0).envs();
  ASSERT_TRUE(envs.contains("GPUKIT_PARTITION"));

  // The container's environment (its address as the host sees it: no mount here), and a
  // client that names no partition.
  ScopedEnv partition("GPUKIT_PARTITION", envs.at("GPUKIT_PARTITION"));
  ScopedEnv address("GPUKIT_ADDR", daemon_->address());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect());
  EXPECT_EQ(client->partition(), "team-a");
}

class DevicePluginBeforeKubeletTest : public DevicePluginTest {
 protected:
  bool KubeletFirst() const override { return false; }
};

TEST_F(DevicePluginBeforeKubeletTest, RegistersOnceTheKubeletAppears) {
  // The plugin serves its endpoint with no kubelet to register with ...
  ASSERT_TRUE(PollUntil(
      [&] {
        struct stat st;
        return stat(EndpointPath("default").c_str(), &st) == 0;
      },
      kWait));
  // ... and registers once one is there.
  GPUKIT_ASSERT_OK_AND_ASSIGN(kubelet_, FakeKubelet::Start(KubeletSocket()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::RegisterRequest registration,
                              kubelet_->WaitForRegistration("gpukit.io/default", 1, kWait));
  EXPECT_EQ(registration.endpoint(), "gpukit-default.sock");
}

}  // namespace
}  // namespace gpukit::testing
