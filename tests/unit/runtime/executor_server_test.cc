// ExecutorServer (runtime/executor/executor_server.h) in this process, on a CPU device behind a
// ForwardingDevice that counts the device events, driven over a socket pair with the
// executor protocol's own messages: what gpukitd's RemoteDevice sends, written out by hand.
// DeferredEventsTest runs the same with deferred events on (GPUKIT_EXECUTOR_DEFER_EVENTS=all).
#include "runtime/executor/executor_server.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/executor/executor_protocol.h"
#include "runtime/op_registry.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>
#include <sys/socket.h>

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kStream = 1;
constexpr uint64_t kBuffer = 1;
constexpr uint64_t kSegment = 7;
constexpr int64_t kBytes = 4096;

class ExecutorServerTest : public ::testing::Test {
 protected:
  // GPUKIT_EXECUTOR_DEFER_EVENTS while the server runs (whatever the environment says);
  // nullptr: unset.
  virtual const char* DeferEvents() const { return "0"; }
  // The backend the device reports, when not the CPU's (the server decides on it).
  virtual std::optional<BackendKind> ReportedBackend() const { return std::nullopt; }
  virtual ExecutorServerOptions Options() const { return {}; }

  void SetUp() override {
    if (const char* outside = std::getenv("GPUKIT_EXECUTOR_DEFER_EVENTS")) outside_ = outside;
    if (DeferEvents() != nullptr) {
      ::setenv("GPUKIT_EXECUTOR_DEFER_EVENTS", DeferEvents(), 1);
    } else {
      ::unsetenv("GPUKIT_EXECUTOR_DEFER_EVENTS");
    }
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    peer_ = ScopedFd(fds[0]);
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> cpu, CpuDevice::Create({}));
    device_ = std::make_unique<::gpukit::testing::ForwardingDevice>(std::move(cpu));
    if (std::optional<BackendKind> backend = ReportedBackend()) device_->set_backend(*backend);
    server_ = std::make_unique<ExecutorServer>(*device_, ScopedFd(fds[1]), Options());
    serving_ = std::thread([this] { served_ = server_->Serve(); });
    executor::FromExecutor hello;
    GPUKIT_ASSERT_OK(ReceiveExecutorMessage(peer_.get(), hello).status());
    ASSERT_TRUE(hello.has_hello());
    executor::Request activate;
    activate.mutable_activate();
    GPUKIT_ASSERT_OK(SendExecutorMessage(peer_.get(), activate));

    // A stream and a buffer in a memfd segment, for work between the events.
    executor::Request stream;
    stream.mutable_create_stream()->set_stream(kStream);
    GPUKIT_ASSERT_OK(Call(stream));
    PoolBuffer(kBuffer, kSegment, kBytes);
  }

  // Buffer `buffer`: the whole of a memfd segment `segment` of `bytes`, which work names by
  // its place (Fill and NegBetween add it), as gpukitd names a buffer of its pool.
  void PoolBuffer(uint64_t buffer, uint64_t segment, int64_t bytes) {
    MapPoolSegment(segment, bytes);
    places_[buffer] = PlaceIn(segment, 0, bytes);
  }
  // The place of a PoolBuffer, else none (work names the buffer by id alone).
  executor::Place PlaceOf(uint64_t buffer) const {
    auto it = places_.find(buffer);
    return it == places_.end() ? executor::Place() : it->second;
  }

  // Maps a memfd segment `segment` of `bytes` into the executor, as gpukitd's device pool
  // does, and returns the test's own mapping of it (its floats), to fill and read.
  float* MapPoolSegment(uint64_t segment, int64_t bytes) {
    const int memfd = ::memfd_create("executor_server_test_pool", MFD_CLOEXEC);
    EXPECT_GE(memfd, 0);
    EXPECT_EQ(::ftruncate(memfd, bytes), 0);
    void* data =
        ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    EXPECT_NE(data, MAP_FAILED);
    executor::Request map;
    map.mutable_map_segment()->set_key(segment);
    map.mutable_map_segment()->set_bytes(bytes);
    GPUKIT_EXPECT_OK(Call(map, memfd));
    ::close(memfd);
    mappings_.emplace_back(data, bytes);
    return static_cast<float*>(data);
  }
  static executor::Place PlaceIn(uint64_t segment, int64_t offset, int64_t bytes) {
    executor::Place place;
    place.set_segment(segment);
    place.set_offset(offset);
    place.set_bytes(bytes);
    return place;
  }

  void TearDown() override {
    peer_ = ScopedFd();  // the server's Serve returns when gpukitd hangs up
    serving_.join();
    GPUKIT_EXPECT_OK(served_);
    server_.reset();
    device_.reset();
    for (const auto& [data, bytes] : mappings_) ::munmap(data, static_cast<size_t>(bytes));
    if (outside_.has_value()) {
      ::setenv("GPUKIT_EXECUTOR_DEFER_EVENTS", outside_->c_str(), 1);
    } else {
      ::unsetenv("GPUKIT_EXECUTOR_DEFER_EVENTS");
    }
  }

  // Sends a one-way request (no reply comes); between BeginBatch and EndBatch, adds it to the
  // batch instead.
  void Send(const executor::Request& request) {
    if (batch_.has_value()) {
      *batch_->add_requests() = request;
      return;
    }
    GPUKIT_ASSERT_OK(SendExecutorMessage(peer_.get(), request));
  }
  // The requests sent until EndBatch go in one datagram, as gpukitd's DeviceBatch sends them.
  void BeginBatch() { batch_.emplace(); }
  void EndBatch() {
    executor::Request request;
    *request.mutable_batch() = *std::move(batch_);
    batch_.reset();
    Send(request);
  }
  void Record(uint64_t event) {
    executor::Request request;
    request.mutable_record_event()->set_stream(kStream);
    request.mutable_record_event()->set_event(event);
    Send(request);
  }
  // Zeroes the buffer (or `buffer`): work on the stream.
  void Fill(uint64_t buffer = kBuffer) {
    executor::Request request;
    request.mutable_fill()->set_stream(kStream);
    request.mutable_fill()->set_buffer(buffer);
    *request.mutable_fill()->mutable_place() = PlaceOf(buffer);
    request.mutable_fill()->set_bytes(64);
    Send(request);
  }
  // `neg` of the buffer's first `floats` floats into themselves, on `stream`, between events
  // `start` and `end` carried by the request (Device::RunOpBetweenEvents's form). The buffer is
  // named by `place` too when given, else by its PoolBuffer place if it has one.
  void NegBetween(uint64_t start, uint64_t end, uint64_t stream = kStream,
                  uint64_t buffer = kBuffer, int64_t floats = 4,
                  const executor::Place* place = nullptr) {
    const OpRegistry& registry = OpRegistry::Builtin();
    OpLaunch launch;
    GPUKIT_ASSERT_OK_AND_ASSIGN(launch.op, registry.Find("neg"));
    OperandDesc desc;
    desc.tensor = {DType::kFloat32, {floats}};
    GPUKIT_ASSERT_OK_AND_ASSIGN(launch.plan, registry.Plan(*launch.op, {desc}, {}));
    OpOperand operand;
    operand.buffer = BufferId{buffer};
    operand.desc = desc.tensor;
    launch.inputs = {operand};
    launch.output = BufferId{buffer};
    executor::Request request;
    EncodeRunOp(launch, StreamId{stream}, *request.mutable_run_op());
    const executor::Place named = place != nullptr ? *place : PlaceOf(buffer);
    *request.mutable_run_op()->mutable_inputs(0)->mutable_place() = named;
    *request.mutable_run_op()->mutable_output_place() = named;
    request.mutable_run_op()->set_start_event(start);
    request.mutable_run_op()->set_end_event(end);
    Send(request);
  }
  void Destroy(uint64_t event) {
    executor::Request request;
    request.mutable_destroy_event()->set_event(event);
    Send(request);
  }

  // Sends `request` with a sequence number and returns its reply's status; the reply itself
  // in `reply` when given.
  absl::Status Call(executor::Request request, int fd = -1, executor::Reply* reply = nullptr) {
    request.set_seq(++seq_);
    GPUKIT_RETURN_IF_ERROR(SendExecutorMessage(peer_.get(), request, fd));
    return AwaitReply(seq_, reply);
  }
  // The reply with `seq` (others are skipped): its status, the reply itself in `reply` when
  // given.
  absl::Status AwaitReply(uint64_t seq, executor::Reply* reply = nullptr) {
    for (;;) {
      executor::FromExecutor message;
      GPUKIT_RETURN_IF_ERROR(ReceiveExecutorMessage(peer_.get(), message).status());
      if (!message.has_reply() || message.reply().seq() != seq) continue;
      if (reply != nullptr) *reply = message.reply();
      return ReplyStatus(message.reply());
    }
  }
  absl::Status Wait(uint64_t event, executor::Reply* reply = nullptr) {
    executor::Request request;
    request.mutable_wait_event()->set_event(event);
    return Call(request, -1, reply);
  }
  // Event 100, then a burst of 4 small ops (events 101 to 108) in one message; waits for
  // the last.
  absl::Status RunABurstOfFourSmallOps() {
    Record(100);
    BeginBatch();
    for (uint64_t op = 0; op < 4; ++op) NegBetween(101 + 2 * op, 102 + 2 * op);
    EndBatch();
    return Wait(108);
  }
  // The device time between pairs of events, as gpukitd asks for a batch's: each pair's
  // status, the time in `elapsed` when given.
  std::vector<absl::Status> Elapsed(const std::vector<std::pair<uint64_t, uint64_t>>& pairs,
                                    std::vector<int64_t>* elapsed = nullptr) {
    executor::Request request;
    for (const auto& [start, end] : pairs) {
      executor::EventPair& pair = *request.mutable_elapsed_ns()->add_pairs();
      pair.set_start(start);
      pair.set_end(end);
    }
    executor::Reply reply;
    std::vector<absl::Status> statuses;
    absl::Status status = Call(request, -1, &reply);
    for (int i = 0; i < static_cast<int>(pairs.size()); ++i) {
      statuses.push_back(status.ok() ? PairStatus(reply, i) : status);
    }
    if (elapsed != nullptr) {
      elapsed->assign(reply.pair_elapsed_ns().begin(), reply.pair_elapsed_ns().end());
    }
    return statuses;
  }

  std::optional<std::string> outside_;
  std::vector<std::pair<void*, int64_t>> mappings_;  // MapPoolSegment's
  std::map<uint64_t, executor::Place> places_;       // PoolBuffer's
  ScopedFd peer_;
  std::optional<executor::Batch> batch_;
  std::unique_ptr<::gpukit::testing::ForwardingDevice> device_;
  std::unique_ptr<ExecutorServer> server_;
  std::thread serving_;
  absl::Status served_;
  uint64_t seq_ = 0;
};

// A pipelined op's start event follows the previous op's end event with nothing between: the
// two share one device event (one record, one destroy), which lives until both are destroyed,
// and every pair still measures its own op.
TEST_F(ExecutorServerTest, BackToBackEventsShareOneDeviceEvent) {
  Record(10);
  Fill();
  Record(11);  // op 1 ends...
  Record(12);  // ... and op 2 starts at the same point of the stream
  Fill();
  Record(13);
  Destroy(11);  // before op 2's pair is measured: 12 keeps the device event
  executor::Reply reply;
  GPUKIT_ASSERT_OK(Wait(13, &reply));
  EXPECT_EQ(reply.elapsed_from(), 12u);  // the wait measured op 2 from its own start
  std::vector<int64_t> elapsed;
  const std::vector<absl::Status> statuses = Elapsed({{12, 13}, {10, 13}, {10, 11}}, &elapsed);
  GPUKIT_EXPECT_OK(statuses[0]);
  GPUKIT_EXPECT_OK(statuses[1]);
  EXPECT_THAT(statuses[2], StatusIs(absl::StatusCode::kNotFound));  // 11 was destroyed
  EXPECT_EQ(elapsed[0], reply.elapsed_ns());
  EXPECT_GE(elapsed[1], elapsed[0]);
  EXPECT_EQ(device_->events_recorded(), 3);  // 10, 11 and 12, 13

  Record(14);  // right after 13: shares its device event too
  Destroy(10);
  Destroy(12);
  Destroy(13);
  Record(15);
  Fill();
  Record(16);
  GPUKIT_ASSERT_OK(Wait(16));  // after the destroys (a stream's waits and destroys keep order)
  EXPECT_EQ(device_->events_recorded(), 4);  // 15 shares 14's: no work between them either
  // 10's and 11-12's device events are gone; 13-14-15's lives on with 14 and 15.
  EXPECT_EQ(device_->events_destroyed(), 2);
  GPUKIT_ASSERT_OK(Wait(14));
  for (uint64_t event : {14, 15, 16}) Destroy(event);
  // Work first: 17 right after 16 would share 16's device event whenever its record ran
  // before 16's destroy reached it (a destroy waits behind the stream's completion thread).
  Fill();
  Record(17);
  Fill();
  Record(18);
  GPUKIT_ASSERT_OK(Wait(18));
  EXPECT_EQ(device_->events_destroyed(), 4);
  Destroy(17);
  Destroy(18);
}

// An op that carries its events records them around it as RecordEvent requests would: its
// start shares the device event of an event right before it, each pair measures its own op,
// and an op on an unknown stream leaves its events NOT_FOUND, naming the stream.
TEST_F(ExecutorServerTest, AnOpCarriesItsEventsAsRecordsAroundIt) {
  Record(50);
  NegBetween(51, 52);  // 51 shares 50's device event: no work between them
  NegBetween(53, 54);  // 53 shares 52's
  GPUKIT_ASSERT_OK(Wait(54));
  EXPECT_EQ(device_->events_recorded(), 3);  // 50-51, 52-53, 54
  std::vector<int64_t> elapsed;
  const std::vector<absl::Status> statuses = Elapsed({{51, 52}, {53, 54}, {50, 54}}, &elapsed);
  for (const absl::Status& status : statuses) GPUKIT_EXPECT_OK(status);
  EXPECT_GE(elapsed[2], elapsed[0] + elapsed[1]);
  NegBetween(55, 56, /*stream=*/999);
  // As a RecordEvent on it: the wait names the stream.
  EXPECT_THAT(Wait(56), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no stream 999")));
  for (uint64_t event : {50, 51, 52, 53, 54, 55, 56}) Destroy(event);
}

// One DestroyEvent request may carry many events (a pipeline's completion batch): each is
// destroyed, and an unknown one is named in the reply without keeping the others.
TEST_F(ExecutorServerTest, OneRequestDestroysManyEventsAndNamesAnUnknownOne) {
  Record(30);
  Fill();
  Record(31);
  Fill();
  Record(32);
  GPUKIT_ASSERT_OK(Wait(32));
  EXPECT_EQ(device_->events_recorded(), 3);
  executor::Request destroy;
  destroy.mutable_destroy_event()->set_event(30);
  for (uint64_t event : {31, 99, 32}) destroy.mutable_destroy_event()->add_more_events(event);
  EXPECT_THAT(Call(destroy), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no event 99")));
  Fill();
  Record(33);
  GPUKIT_ASSERT_OK(Wait(33));  // after the destroys (they keep the stream's order)
  EXPECT_EQ(device_->events_destroyed(), 3);
  for (uint64_t event : {30, 31, 32}) {
    EXPECT_THAT(Wait(event), StatusIs(absl::StatusCode::kNotFound)) << event;
  }
  Destroy(33);
}

// Work between two events, even work that failed to enqueue, means a record of its own; the
// error goes to the event after the failed work only, not to the one that shares it.
TEST_F(ExecutorServerTest, FailedWorkBetweenEventsIsItsEndEventsOnly) {
  Record(20);
  Fill(/*buffer=*/99);  // no such buffer: the enqueue fails
  Record(21);
  Record(22);
  Fill();
  Record(23);
  EXPECT_THAT(Wait(21), StatusIs(absl::StatusCode::kNotFound));
  GPUKIT_EXPECT_OK(Wait(22));
  GPUKIT_EXPECT_OK(Wait(23));
  EXPECT_EQ(device_->events_recorded(), 3);  // 20, 21 and 22, 23
  const std::vector<absl::Status> statuses = Elapsed({{20, 21}, {22, 23}});
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kNotFound));
  GPUKIT_EXPECT_OK(statuses[1]);
  for (uint64_t event : {20, 21, 22, 23}) Destroy(event);
}

// A stream destroyed while one of its events lives: the event's destroy runs on the stream's
// own thread and lets go of the stream's last reference there, which must not make that thread
// join itself (the state is deleted on another thread), and the executor serves on.
TEST_F(ExecutorServerTest, AStreamsLastReferenceMayGoOnItsOwnThread) {
  constexpr uint64_t kOther = 2;
  executor::Request create;
  create.mutable_create_stream()->set_stream(kOther);
  GPUKIT_ASSERT_OK(Call(create));
  executor::Request record;
  record.mutable_record_event()->set_stream(kOther);
  record.mutable_record_event()->set_event(40);
  Send(record);
  executor::Request destroy_stream;
  destroy_stream.mutable_destroy_stream()->set_stream(kOther);
  GPUKIT_ASSERT_OK(Call(destroy_stream));
  Destroy(40);
  Record(41);
  Fill();
  Record(42);
  GPUKIT_EXPECT_OK(Wait(42));
  for (uint64_t event : {41, 42}) Destroy(event);
}

constexpr uint64_t kPoolSegment = 9;

// Work names a buffer of gpukitd's pool by its place, which nothing defined: the executor
// makes a view of that range on first use and keeps it for every later use of the place (a
// view per place); an id without a place is looked up as before, and a place outside its
// segment fails the work, reported by its end event.
TEST_F(ExecutorServerTest, WorkNamesABufferOfThePoolByItsPlace) {
  float* data = MapPoolSegment(kPoolSegment, kBytes);
  for (int i = 0; i < 8; ++i) data[i] = static_cast<float>(i + 1);
  const int64_t views = device_->buffers_in_segment();
  const executor::Place second = PlaceIn(kPoolSegment, 16, 16);  // floats 4 to 7
  // Id 12345 is unknown to the executor: the place is what counts.
  NegBetween(20, 21, kStream, /*buffer=*/12345, 4, &second);
  GPUKIT_ASSERT_OK(Wait(21));
  EXPECT_EQ(std::vector<float>(data, data + 8), (std::vector<float>{1, 2, 3, 4, -5, -6, -7, -8}));
  NegBetween(22, 23, kStream, 12345, 4, &second);
  GPUKIT_ASSERT_OK(Wait(23));
  EXPECT_EQ(std::vector<float>(data + 4, data + 8), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(device_->buffers_in_segment() - views, 1);  // made once, used twice

  const executor::Place first = PlaceIn(kPoolSegment, 0, 16);
  NegBetween(24, 25, kStream, 12345, 4, &first);
  GPUKIT_ASSERT_OK(Wait(25));
  EXPECT_EQ(std::vector<float>(data, data + 4), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(device_->buffers_in_segment() - views, 2);

  NegBetween(26, 27, kStream, 12345);  // no place: by id
  EXPECT_THAT(Wait(27), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no buffer 12345")));
  const executor::Place outside = PlaceIn(kPoolSegment, kBytes - 8, 16);
  NegBetween(28, 29, kStream, 12345, 4, &outside);
  EXPECT_THAT(Wait(29), StatusIs(absl::StatusCode::kOutOfRange));
  NegBetween(30, 31, kStream, 12345, 4, &second);  // the stream serves on
  GPUKIT_ASSERT_OK(Wait(31));
  EXPECT_EQ(std::vector<float>(data + 4, data + 8), (std::vector<float>{-5, -6, -7, -8}));
  for (uint64_t event = 20; event <= 31; ++event) Destroy(event);
}

// Copies and fills name places too (ids the executor never heard of): a device-to-device copy
// between two places of the pool and a fill of a third, each through the place's view.
TEST_F(ExecutorServerTest, CopiesAndFillsNameBuffersOfThePoolByPlace) {
  float* data = MapPoolSegment(kPoolSegment, kBytes);
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i + 1);
  executor::Request copy;
  copy.mutable_copy()->set_stream(kStream);
  copy.mutable_copy()->set_bytes(16);
  copy.mutable_copy()->set_dst_buffer(600);
  *copy.mutable_copy()->mutable_dst_place() = PlaceIn(kPoolSegment, 16, 16);
  copy.mutable_copy()->set_src_buffer(601);
  *copy.mutable_copy()->mutable_src_place() = PlaceIn(kPoolSegment, 0, 16);
  Send(copy);
  executor::Request fill;
  fill.mutable_fill()->set_stream(kStream);
  fill.mutable_fill()->set_buffer(602);
  *fill.mutable_fill()->mutable_place() = PlaceIn(kPoolSegment, 32, 16);
  fill.mutable_fill()->set_offset(4);
  fill.mutable_fill()->set_bytes(8);
  Send(fill);
  Record(60);
  GPUKIT_ASSERT_OK(Wait(60));
  EXPECT_EQ(std::vector<float>(data, data + 12),
            (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 9, 0, 0, 12}));
  Destroy(60);
}

// Unmapping a segment drops the views of it first (the device refuses to unmap a segment
// that buffers still use) and only those: work naming the segment's places fails from then
// on, naming the segment, while another segment's view serves on without being made again.
TEST_F(ExecutorServerTest, UnmappingASegmentDropsItsViewsOnly) {
  float* data = MapPoolSegment(kPoolSegment, kBytes);
  for (int i = 0; i < 4; ++i) data[i] = static_cast<float>(i + 1);
  const executor::Place pooled = PlaceIn(kPoolSegment, 0, 16);
  const executor::Place other = PlaceIn(kSegment, 0, 16);  // the fixture's segment
  NegBetween(40, 41, kStream, 500, 4, &pooled);
  NegBetween(42, 43, kStream, 501, 4, &other);
  GPUKIT_ASSERT_OK(Wait(43));
  const int64_t views = device_->buffers_in_segment();
  auto frees = std::make_shared<std::atomic<int>>(0);
  device_->before_free = [frees](BufferId) { frees->fetch_add(1); };

  executor::Request unmap;
  unmap.mutable_unmap_segment()->set_key(kPoolSegment);
  GPUKIT_ASSERT_OK(Call(unmap));
  EXPECT_EQ(frees->load(), 1);  // the pooled place's view; the other segment's stays
  EXPECT_EQ(std::vector<float>(data, data + 4), (std::vector<float>{-1, -2, -3, -4}));

  NegBetween(44, 45, kStream, 500, 4, &pooled);
  EXPECT_THAT(Wait(45), StatusIs(absl::StatusCode::kNotFound,
                                 HasSubstr(absl::StrCat("segment ", kPoolSegment))));
  NegBetween(46, 47, kStream, 501, 4, &other);
  GPUKIT_ASSERT_OK(Wait(47));
  EXPECT_EQ(device_->buffers_in_segment(), views);  // the other view was kept
  for (uint64_t event = 40; event <= 47; ++event) Destroy(event);
}

// At most ExecutorServerOptions::most_views views (2 here): the view that goes past it drops
// every view once its work is enqueued, and a place named again gets a new one.
class FewViewsTest : public ExecutorServerTest {
 protected:
  ExecutorServerOptions Options() const override { return {.most_views = 2}; }
};

TEST_F(FewViewsTest, PastTheLimitEveryViewIsDroppedAndMadeAgain) {
  float* data = MapPoolSegment(kPoolSegment, kBytes);
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i + 1);
  const int64_t views = device_->buffers_in_segment();
  auto frees = std::make_shared<std::atomic<int>>(0);
  device_->before_free = [frees](BufferId) { frees->fetch_add(1); };
  const executor::Place places[3] = {PlaceIn(kPoolSegment, 0, 16), PlaceIn(kPoolSegment, 16, 16),
                                     PlaceIn(kPoolSegment, 32, 16)};
  NegBetween(50, 51, kStream, 500, 4, &places[0]);
  NegBetween(52, 53, kStream, 501, 4, &places[1]);
  GPUKIT_ASSERT_OK(Wait(53));
  EXPECT_EQ(device_->buffers_in_segment() - views, 2);
  EXPECT_EQ(frees->load(), 0);
  NegBetween(54, 55, kStream, 502, 4, &places[2]);
  GPUKIT_ASSERT_OK(Wait(55));
  EXPECT_EQ(device_->buffers_in_segment() - views, 3);
  EXPECT_EQ(frees->load(), 3);  // all three
  NegBetween(56, 57, kStream, 500, 4, &places[0]);
  GPUKIT_ASSERT_OK(Wait(57));
  EXPECT_EQ(device_->buffers_in_segment() - views, 4);  // made again
  std::vector<float> expected = {1, 2, 3, 4, -5, -6, -7, -8, -9, -10, -11, -12};
  EXPECT_EQ(std::vector<float>(data, data + 12), expected);
  for (uint64_t event = 50; event <= 57; ++event) Destroy(event);
}

// With deferred events on, on the CPU device too (GPUKIT_EXECUTOR_DEFER_EVENTS=all).
class DeferredEventsTest : public ExecutorServerTest {
 protected:
  const char* DeferEvents() const override { return "all"; }
};

// A burst of small ops in one message: their end events (and the starts that follow them)
// wait for one device event after the burst, and the burst's device time is shared evenly
// among its ops, adding up to the whole.
TEST_F(DeferredEventsTest, ABurstOfSmallOpsSharesOneDeviceEventAndItsTime) {
  GPUKIT_ASSERT_OK(RunABurstOfFourSmallOps());
  EXPECT_EQ(device_->events_recorded(), 2);  // 100 (and 101), then one for 102 to 108
  std::vector<int64_t> elapsed;
  const std::vector<absl::Status> statuses =
      Elapsed({{101, 102}, {103, 104}, {105, 106}, {107, 108}, {100, 108}}, &elapsed);
  for (const absl::Status& status : statuses) GPUKIT_EXPECT_OK(status);
  int64_t sum = 0;
  for (int op = 0; op < 4; ++op) {
    EXPECT_GE(elapsed[op], 0);
    EXPECT_NEAR(elapsed[op], elapsed[4] / 4, 1) << op;
    sum += elapsed[op];
  }
  EXPECT_NEAR(sum, elapsed[4], 4);
  // A pair given the wrong way round is refused, as the device refuses one of its own events.
  EXPECT_THAT(Elapsed({{106, 102}})[0], StatusIs(absl::StatusCode::kInvalidArgument));
  for (uint64_t event = 100; event <= 108; ++event) Destroy(event);
  Fill();
  Record(109);
  GPUKIT_ASSERT_OK(Wait(109));  // after the destroys
  EXPECT_EQ(device_->events_destroyed(), 2);
  Destroy(109);
}

// Without deferral the same burst records a device event per op. Who defers by default: a GPU does
// unless GPUKIT_EXECUTOR_DEFER_EVENTS=0; the CPU device only with =all (it reports a kernel's error
// at the next event, which would reach every op of a span).
struct DeferralCase {
  const char* setting;  // nullptr: unset
  BackendKind backend;
  int64_t device_events;  // for the burst of 4 small ops after one event
};

class DeferralSettingTest : public ExecutorServerTest,
                            public ::testing::WithParamInterface<DeferralCase> {
 protected:
  const char* DeferEvents() const override { return GetParam().setting; }
  std::optional<BackendKind> ReportedBackend() const override { return GetParam().backend; }
};

TEST_P(DeferralSettingTest, DecidesWhetherABurstSharesOneDeviceEvent) {
  GPUKIT_ASSERT_OK(RunABurstOfFourSmallOps());
  EXPECT_EQ(device_->events_recorded(), GetParam().device_events);
  for (uint64_t event = 100; event <= 108; ++event) Destroy(event);
}

INSTANTIATE_TEST_SUITE_P(Settings, DeferralSettingTest,
                         ::testing::Values(DeferralCase{nullptr, BackendKind::kCuda, 2},
                                           DeferralCase{"1", BackendKind::kCuda, 2},
                                           DeferralCase{"0", BackendKind::kCuda, 5},
                                           DeferralCase{"off", BackendKind::kCuda, 5},
                                           DeferralCase{"false", BackendKind::kCuda, 5},
                                           DeferralCase{"yes please", BackendKind::kCuda, 2},
                                           DeferralCase{nullptr, BackendKind::kCpu, 5},
                                           DeferralCase{"1", BackendKind::kCpu, 5},
                                           DeferralCase{"all", BackendKind::kCpu, 2}));

// A large op is never inside a deferred span: the events deferred before it get a device event
// before it runs, and its own end gets one, so its time is measured, not shared.
TEST_F(DeferredEventsTest, ALargeOpEndsTheSpanBeforeItAndRecordsItsOwnEnd) {
  constexpr uint64_t kLarge = 2;
  PoolBuffer(kLarge, /*segment=*/8, /*bytes=*/int64_t{4} << 18);
  Record(200);
  BeginBatch();
  NegBetween(201, 202);
  NegBetween(203, 204);
  NegBetween(205, 206, kStream, kLarge, int64_t{1} << 18);
  NegBetween(207, 208);
  NegBetween(209, 210);
  EndBatch();
  GPUKIT_ASSERT_OK(Wait(210));
  // 200; one before the large op for 202-204; 206, the large op's end; one for 208-210.
  EXPECT_EQ(device_->events_recorded(), 4);
  std::vector<int64_t> elapsed;
  const std::vector<absl::Status> statuses =
      Elapsed({{201, 202}, {203, 204}, {205, 206}, {207, 208}, {209, 210}, {200, 210}}, &elapsed);
  for (const absl::Status& status : statuses) GPUKIT_EXPECT_OK(status);
  EXPECT_NEAR(elapsed[0] + elapsed[1] + elapsed[2] + elapsed[3] + elapsed[4], elapsed[5], 5);
  for (uint64_t event = 200; event <= 210; ++event) Destroy(event);
}

// A wait on an event that is still deferred records the device event at once (no work
// between), and measures the op from its start; an event destroyed while deferred is gone.
TEST_F(DeferredEventsTest, AWaitOnADeferredEventRecordsItAtOnce) {
  Record(300);
  BeginBatch();
  NegBetween(301, 302);
  NegBetween(303, 304);
  executor::Request destroy;
  destroy.mutable_destroy_event()->set_event(302);
  Send(destroy);
  executor::Request wait;
  wait.set_seq(++seq_);
  wait.mutable_wait_event()->set_event(304);
  Send(wait);
  NegBetween(305, 306);  // more work follows the wait in the same message
  EndBatch();
  executor::Reply reply;
  GPUKIT_ASSERT_OK(AwaitReply(seq_, &reply));
  EXPECT_EQ(reply.elapsed_from(), 303u);
  EXPECT_GE(reply.elapsed_ns(), 0);
  GPUKIT_ASSERT_OK(Wait(306));
  EXPECT_EQ(device_->events_recorded(), 3);  // 300; at the wait, for 302-304; 306
  EXPECT_THAT(Wait(302), StatusIs(absl::StatusCode::kNotFound));
  const std::vector<absl::Status> statuses = Elapsed({{303, 304}, {305, 306}});
  GPUKIT_EXPECT_OK(statuses[0]);
  GPUKIT_EXPECT_OK(statuses[1]);
  for (uint64_t event : {300, 301, 303, 304, 305, 306}) Destroy(event);
}

// A span holds at most 16 works: 40 small ops in one message record a device event after the
// 16th and the 32nd and one at the end; the shares add up to the whole, and a lone ElapsedNs
// gives what the batch's pairs give.
TEST_F(DeferredEventsTest, ASpanHoldsAtMostSixteenWorks) {
  Record(1000);
  BeginBatch();
  for (uint64_t op = 0; op < 40; ++op) NegBetween(1001 + 2 * op, 1002 + 2 * op);
  EndBatch();
  GPUKIT_ASSERT_OK(Wait(1080));
  EXPECT_EQ(device_->events_recorded(), 4);
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (uint64_t op = 0; op < 40; ++op) pairs.emplace_back(1001 + 2 * op, 1002 + 2 * op);
  pairs.emplace_back(1000, 1080);
  std::vector<int64_t> elapsed;
  const std::vector<absl::Status> statuses = Elapsed(pairs, &elapsed);
  int64_t sum = 0;
  for (size_t i = 0; i < pairs.size(); ++i) GPUKIT_EXPECT_OK(statuses[i]) << i;
  for (size_t i = 0; i < 40; ++i) sum += elapsed[i];
  EXPECT_NEAR(sum, elapsed[40], 40);
  executor::Request one;
  one.mutable_elapsed_ns()->set_start(1011);
  one.mutable_elapsed_ns()->set_end(1012);
  executor::Reply reply;
  GPUKIT_ASSERT_OK(Call(one, -1, &reply));
  EXPECT_EQ(reply.int_value(), elapsed[5]);
  for (uint64_t event = 1000; event <= 1080; ++event) Destroy(event);
}

// A stream destroyed right after small ops in the same message: their deferred events get
// their device event before the stream goes, so each pair is answered.
TEST_F(DeferredEventsTest, DestroyingAStreamRecordsItsDeferredEventsFirst) {
  for (uint64_t round = 0; round < 10; ++round) {
    const uint64_t stream = 10 + round;
    const uint64_t first = 2000 + 10 * round;
    executor::Request create;
    create.mutable_create_stream()->set_stream(stream);
    GPUKIT_ASSERT_OK(Call(create));
    executor::Request record;
    record.mutable_record_event()->set_stream(stream);
    record.mutable_record_event()->set_event(first);
    Send(record);
    BeginBatch();
    NegBetween(first + 1, first + 2, stream);
    NegBetween(first + 3, first + 4, stream);
    executor::Request destroy;
    destroy.set_seq(++seq_);
    destroy.mutable_destroy_stream()->set_stream(stream);
    Send(destroy);
    EndBatch();
    GPUKIT_ASSERT_OK(AwaitReply(seq_));
    const std::vector<absl::Status> statuses =
        Elapsed({{first + 1, first + 2}, {first + 3, first + 4}});
    GPUKIT_EXPECT_OK(statuses[0]) << round;
    GPUKIT_EXPECT_OK(statuses[1]) << round;
    for (uint64_t event = first; event <= first + 4; ++event) Destroy(event);
  }
}

// A query of a deferred event records its device event at once, as a wait does, and answers
// whether the work before it has run (on the CPU device it has).
TEST_F(DeferredEventsTest, AQueryOfADeferredEventRecordsItAtOnce) {
  Record(700);
  BeginBatch();
  NegBetween(701, 702);
  NegBetween(703, 704);
  executor::Request query;
  query.set_seq(++seq_);
  query.mutable_wait_event()->set_event(702);
  query.mutable_wait_event()->set_query(true);
  Send(query);
  NegBetween(705, 706);  // more work follows the query in the same message
  EndBatch();
  executor::Reply reply;
  GPUKIT_ASSERT_OK(AwaitReply(seq_, &reply));
  EXPECT_EQ(reply.int_value(), 1);
  GPUKIT_ASSERT_OK(Wait(706));
  EXPECT_EQ(device_->events_recorded(), 3);  // 700; at the query, for 702-704; 706
  const std::vector<absl::Status> statuses = Elapsed({{701, 702}, {703, 704}, {705, 706}});
  for (const absl::Status& status : statuses) GPUKIT_EXPECT_OK(status);
  for (uint64_t event = 700; event <= 706; ++event) Destroy(event);
}

// An op whose enqueue fails in the middle of a burst: its end event alone carries the error.
TEST_F(DeferredEventsTest, AFailedOpInABurstIsItsEndEventsOnly) {
  Record(400);
  BeginBatch();
  NegBetween(401, 402);
  NegBetween(403, 404, kStream, /*buffer=*/99);  // no such buffer
  NegBetween(405, 406);
  NegBetween(407, 408);
  EndBatch();
  GPUKIT_EXPECT_OK(Wait(408));
  const std::vector<absl::Status> statuses =
      Elapsed({{401, 402}, {403, 404}, {405, 406}, {407, 408}});
  GPUKIT_EXPECT_OK(statuses[0]);
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kNotFound, HasSubstr("no buffer 99")));
  GPUKIT_EXPECT_OK(statuses[2]);
  GPUKIT_EXPECT_OK(statuses[3]);
  for (uint64_t event = 400; event <= 408; ++event) Destroy(event);
}

}  // namespace
}  // namespace gpukit
