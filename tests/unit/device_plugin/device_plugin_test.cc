// DevicePlugin's rounds against a fake partition source, in-process, with no kubelet (no
// registration happens; tests/integration/device_plugin_test.cc covers the kubelet's side):
// endpoints start, follow the partitions and gpukitd's health, stop and come back.
#include "daemon/device_plugin/device_plugin.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"
#include "tests/testing/temp_dir.h"
#include <sys/stat.h>

namespace gpukit::device_plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

class FakeSource final : public PartitionSource {
 public:
  absl::StatusOr<std::vector<PartitionView>> List() override { return next; }
  absl::StatusOr<std::vector<PartitionView>> next = std::vector<PartitionView>{};
};

std::vector<std::string> Devices(const v1beta1::ListAndWatchResponse& response) {
  std::vector<std::string> out;
  for (const v1beta1::Device& d : response.devices()) out.push_back(d.id() + ":" + d.health());
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// One ListAndWatch stream; a message that does not come within 30 s ends it.
class Watch {
 public:
  explicit Watch(const std::string& socket_path)
      : stub_(v1beta1::DevicePlugin::NewStub(
            grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials()))) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    reader_ = stub_->ListAndWatch(&context_, v1beta1::Empty());
  }
  bool Next(v1beta1::ListAndWatchResponse& out) { return reader_->Read(&out); }

 private:
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader_;
};

class DevicePluginLoopTest : public ::testing::Test {
 protected:
  PluginOptions Options() const {
    return {.plugin_dir = dir_.path(),
            .devices = {.devices_per_partition = 2},
            .mount = {.host_socket_dir = "/run/gpukit"}};
  }
  std::string Socket(const std::string& partition) const {
    return dir_.path() + "/gpukit-" + partition + ".sock";
  }

  gpukit::testing::ScopedTempDir dir_;
  FakeSource source_;
};

TEST_F(DevicePluginLoopTest, EndpointsFollowPartitionsAndHealth) {
  DevicePlugin plugin(Options(), source_);
  source_.next =
      std::vector<PartitionView>{{.name = "default"}, {.name = "team", .max_sessions = 1}};
  plugin.Reconcile();
  EXPECT_THAT(plugin.ServedResources(),
              UnorderedElementsAre("gpukit.io/default", "gpukit.io/team"));
  ASSERT_TRUE(Exists(Socket("default")));

  Watch watch(Socket("team"));
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("team-0:Healthy"));

  source_.next =
      std::vector<PartitionView>{{.name = "default"}, {.name = "team", .max_sessions = 2}};
  plugin.Reconcile();
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("team-0:Healthy", "team-1:Healthy"));

  source_.next = absl::UnavailableError("no gpukitd");
  plugin.Reconcile();
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("team-0:Unhealthy", "team-1:Unhealthy"));
  EXPECT_THAT(plugin.ServedResources(),
              UnorderedElementsAre("gpukit.io/default", "gpukit.io/team"));

  source_.next =
      std::vector<PartitionView>{{.name = "default"}, {.name = "team", .max_sessions = 2}};
  plugin.Reconcile();
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("team-0:Healthy", "team-1:Healthy"));

  source_.next = std::vector<PartitionView>{{.name = "default"}};
  plugin.Reconcile();
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), IsEmpty());
  EXPECT_FALSE(watch.Next(list));  // the stream ended
  EXPECT_FALSE(Exists(Socket("team")));
  EXPECT_THAT(plugin.ServedResources(), ElementsAre("gpukit.io/default"));
}

TEST_F(DevicePluginLoopTest, EndpointWhoseSocketWasRemovedIsServedAgain) {
  DevicePlugin plugin(Options(), source_);
  source_.next = std::vector<PartitionView>{{.name = "default"}};
  plugin.Reconcile();
  ASSERT_EQ(unlink(Socket("default").c_str()), 0);  // as a restarting kubelet does
  plugin.Reconcile();
  ASSERT_TRUE(Exists(Socket("default")));
  Watch watch(Socket("default"));
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(watch.Next(list));
  EXPECT_THAT(Devices(list), ElementsAre("default-0:Healthy", "default-1:Healthy"));
}

TEST_F(DevicePluginLoopTest, StartsUnhealthyWhileGpukitdIsDownAndServesNothingNew) {
  DevicePlugin plugin(Options(), source_);
  source_.next = absl::UnavailableError("no gpukitd");
  plugin.Reconcile();
  EXPECT_THAT(plugin.ServedResources(), IsEmpty());
}

TEST_F(DevicePluginLoopTest, UnadvertisablePartitionIsNotServed) {
  DevicePlugin plugin(Options(), source_);
  source_.next = std::vector<PartitionView>{{.name = "ok"}, {.name = "-bad"}};
  plugin.Reconcile();
  EXPECT_THAT(plugin.ServedResources(), ElementsAre("gpukit.io/ok"));
  EXPECT_FALSE(Exists(Socket("-bad")));
}

TEST_F(DevicePluginLoopTest, DestroyingThePluginRemovesItsSockets) {
  {
    DevicePlugin plugin(Options(), source_);
    source_.next = std::vector<PartitionView>{{.name = "a"}, {.name = "b"}};
    plugin.Reconcile();
    ASSERT_TRUE(Exists(Socket("a")));
    ASSERT_TRUE(Exists(Socket("b")));
  }
  EXPECT_FALSE(Exists(Socket("a")));
  EXPECT_FALSE(Exists(Socket("b")));
}

TEST_F(DevicePluginLoopTest, PreferredAllocationKeepsMustIncludeThenTakesTheFirstAvailable) {
  DevicePlugin plugin(Options(), source_);
  source_.next = std::vector<PartitionView>{{.name = "a", .max_sessions = 3}};
  plugin.Reconcile();
  auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + Socket("a"), grpc::InsecureChannelCredentials()));
  v1beta1::PreferredAllocationRequest request;
  v1beta1::ContainerPreferredAllocationRequest* container = request.add_container_requests();
  for (const char* id : {"a-0", "a-1", "a-2"}) container->add_available_deviceids(id);
  container->add_must_include_deviceids("a-2");
  container->set_allocation_size(2);
  grpc::ClientContext context;
  v1beta1::PreferredAllocationResponse response;
  ASSERT_TRUE(stub->GetPreferredAllocation(&context, request, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 1);
  EXPECT_THAT(response.container_responses(0).deviceids(), ElementsAre("a-2", "a-0"));

  // Nothing to prepare before a container starts.
  grpc::ClientContext pre_start_context;
  v1beta1::PreStartContainerRequest pre_start;
  pre_start.add_devices_ids("a-0");
  v1beta1::PreStartContainerResponse pre_started;
  EXPECT_TRUE(stub->PreStartContainer(&pre_start_context, pre_start, &pre_started).ok());
}

}  // namespace
}  // namespace gpukit::device_plugin
