// The region table board (core/table_board.h): what the owner publishes is
// what a reader reads, subscriptions, and a board that lies or is not
// there: refused, bounded, never trusted.
#include "core/table_board.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/registry.h"

namespace hixl::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Table(uint64_t generation, uint64_t base) {
  RegionTable t;
  t.generation = generation;
  RegionRecord r;
  r.base = base;
  r.len = 4096;
  r.keys["shm"] = "key";
  t.regions.push_back(r);
  return t.Serialize();
}

TEST(TableBoard, AReaderReadsWhatWasPublishedLast) {
  auto board = TableBoard::Create(4);
  ASSERT_TRUE(board.ok()) << board.status().message();
  (*board)->Publish([] { return Table(1, 0x1000); });
  auto reader = BoardReader::Open((*board)->Address(), "rank 1");
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  ASSERT_NE(*reader, nullptr);
  auto bytes = (*reader)->Read();
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, Table(1, 0x1000));
  (*board)->Publish([] { return Table(2, 0x9000); });
  bytes = (*reader)->Read();
  ASSERT_TRUE(bytes.ok());
  auto parsed = RegionTable::Parse(*bytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->generation, 2u);
  EXPECT_EQ(parsed->regions.at(0).base, 0x9000u);
}

TEST(TableBoard, SubscribersAreTheBitsReadersSet) {
  auto board = TableBoard::Create(130);
  ASSERT_TRUE(board.ok());
  auto a = BoardReader::Open((*board)->Address(), "rank 1");
  auto b = BoardReader::Open((*board)->Address(), "rank 129");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*board)->Subscribers().empty());
  (*a)->Subscribe(1);
  (*b)->Subscribe(129);
  (*b)->Subscribe(7);     // once only: a reader has one id
  (*a)->Subscribe(1000);  // out of range: ignored
  EXPECT_THAT((*board)->Subscribers(), ElementsAre(1, 129));
}

TEST(TableBoard, ATableLargerThanTheBoardIsAskedForElsewhere) {
  auto board = TableBoard::Create(2);
  ASSERT_TRUE(board.ok());
  (*board)->Publish([] { return std::string(kBoardTableBytes + 1, 'x'); });
  auto reader = BoardReader::Open((*board)->Address(), "rank 1");
  ASSERT_TRUE(reader.ok());
  auto bytes = (*reader)->Read();
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(), HasSubstr("larger than its board"));
  // Once it fits again it is read from the board again.
  (*board)->Publish([] { return Table(3, 0x2000); });
  EXPECT_TRUE((*reader)->Read().ok());
}

TEST(TableBoard, AddressesThatLieAreRefused) {
  auto board = TableBoard::Create(2);
  ASSERT_TRUE(board.ok());
  auto a = DecodeBoardAddress((*board)->Address());
  ASSERT_TRUE(a.has_value());

  BoardAddress other_host = *a;
  other_host.host = "another boot/net:1/pid:1";
  auto r = BoardReader::Open(Encode(other_host), "rank 1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, nullptr);  // not on this host: not an error, no board

  BoardAddress wrong_file = *a;
  wrong_file.ino += 1;
  r = BoardReader::Open(Encode(wrong_file), "rank 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not the file it names"));

  BoardAddress no_such_fd = *a;
  no_such_fd.fd = 100000;
  EXPECT_FALSE(BoardReader::Open(Encode(no_such_fd), "rank 1").ok());

  // More ids than the file has room for: the mapping would pass its end.
  BoardAddress too_many = *a;
  too_many.ids = kMaxBoardIds;
  r = BoardReader::Open(Encode(too_many), "rank 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("bytes, not the"));

  EXPECT_FALSE(DecodeBoardAddress("").has_value());
  EXPECT_FALSE(DecodeBoardAddress((*board)->Address() + "x").has_value());
  BoardAddress zero_ids = *a;
  zero_ids.ids = 0;
  EXPECT_FALSE(DecodeBoardAddress(Encode(zero_ids)).has_value());
}

TEST(TableBoard, AFileThatIsNotABoardIsRefused) {
  // A sealed memfd of the right size without the board's mark.
  const int fd = ::memfd_create("not-a-board", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4 << 20), 0);
  ASSERT_TRUE(sharedmem::SealSize(fd).ok());
  BoardAddress a{sharedmem::HostIdentity(), static_cast<int32_t>(::getpid()), fd, sharedmem::FileInode(fd), 2};
  auto r = BoardReader::Open(Encode(a), "rank 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not a table board"));
  ::close(fd);
}

TEST(TableBoard, AReadThatNeverSettlesIsBounded) {
  auto board = TableBoard::Create(2);
  ASSERT_TRUE(board.ok());
  auto reader = BoardReader::Open((*board)->Address(), "rank 1");
  ASSERT_TRUE(reader.ok());
  // The owner (here: anyone who can write the file) leaves the sequence odd
  // for good, as a writer that died mid-publish would.
  auto a = DecodeBoardAddress((*board)->Address());
  ASSERT_TRUE(a.has_value());
  auto writer = BoardReader::Open((*board)->Address(), "self");
  ASSERT_TRUE(writer.ok());
  const int fd = ::open(fmt::format("/proc/self/fd/{}", a->fd).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  static_cast<uint64_t*>(p)[1] = 1;  // the sequence word
  auto bytes = (*reader)->Read();
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), Errc::kTimeout);
  EXPECT_THAT(bytes.status().message(), HasSubstr("changed at each"));
  ::munmap(p, 4096);
  ::close(fd);
}

}  // namespace
}  // namespace hixl::core

namespace hixl::core {
namespace {

TEST(TableBoardRemovals, ARingIsTakenOnceAndAnAckEndsTheWait) {
  auto owner = TableBoard::Create(8);       // the board of the rank that removes
  auto subscriber = TableBoard::Create(8);  // the board of one that holds its table
  ASSERT_TRUE(owner.ok() && subscriber.ok());
  auto owners_view = BoardReader::Open((*subscriber)->Address(), "rank 3");  // the owner's view of rank 3
  auto subscribers_view = BoardReader::Open((*owner)->Address(), "rank 0");  // rank 3's view of rank 0
  ASSERT_TRUE(owners_view.ok() && subscribers_view.ok());

  EXPECT_TRUE((*subscriber)->TakeRings(0).empty());
  const uint64_t number = (*owner)->BeginRemoval(42);
  (*owners_view)->Ring(0);
  EXPECT_THAT((*subscriber)->TakeRings(-1), ElementsAre(0));
  EXPECT_TRUE((*subscriber)->TakeRings(0).empty());  // taken: cleared
  const BoardReader::Removal r = (*subscribers_view)->LatestRemoval();
  EXPECT_EQ(r.number, number);
  EXPECT_EQ(r.generation, 42u);

  (*subscribers_view)->Ack(3, r.number);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  EXPECT_TRUE((*owner)->AwaitAcks(number, {3}, deadline, [](int) { return false; }).empty());
  // An older acknowledgement does not answer a newer removal.
  const uint64_t next = (*owner)->BeginRemoval(41);  // generations only grow
  EXPECT_EQ((*subscribers_view)->LatestRemoval().generation, 42u);
  const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  auto failed = (*owner)->AwaitAcks(next, {3}, soon, [](int) { return false; });
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 3);
  EXPECT_EQ(failed[0].second, Errc::kTimeout);
}

TEST(TableBoardRemovals, AnAckFromAnotherThreadWakesTheOwnerAndAGoneSubscriberIsNamed) {
  auto owner = TableBoard::Create(4);
  ASSERT_TRUE(owner.ok());
  auto view = BoardReader::Open((*owner)->Address(), "rank 0");
  ASSERT_TRUE(view.ok());
  const uint64_t number = (*owner)->BeginRemoval(7);
  std::thread acker([&] { (*view)->Ack(1, number); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // Rank 1 answers; rank 2 is gone (asked every few ms), not waited for.
  auto failed = (*owner)->AwaitAcks(number, {1, 2}, deadline, [](int id) { return id == 2; });
  acker.join();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].first, 2);
  EXPECT_EQ(failed[0].second, Errc::kPeerFailed);
  // Rings and acks name ids the board has: others are ignored.
  (*view)->Ring(99);
  (*view)->Ack(99, number);
  EXPECT_TRUE((*owner)->TakeRings(0).empty());
}

TEST(TableBoardRemovals, AStopEndsAWaitWithNothingRungWhicheverComesFirst) {
  auto board = TableBoard::Create(2);
  ASSERT_TRUE(board.ok());
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
      stop.store(true);
      (*board)->WakeRings();
    });
    EXPECT_TRUE((*board)->TakeRings(-1, &stop).empty());  // never waits forever
    stopper.join();
  }
}

}  // namespace
}  // namespace hixl::core
