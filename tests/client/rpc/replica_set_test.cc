// ReplicaSet: a rank moves through its replicas in order; a round that came back where
// it began says so (the caller then waits its backoff), and a batch starts a new round.
#include "client/rpc/replica_set.h"

#include <gtest/gtest.h>

namespace shardcast::client {
namespace {

TEST(ReplicaSetTest, MovesInOrderAndSaysWhenARoundCameBackWhereItBegan) {
  ReplicaSet replicas(StreamSettings{}, {"a:1", "b:2", "c:3"});  // nothing connects
  ASSERT_EQ(replicas.size(), 3u);
  EXPECT_EQ(replicas.current().target, "a:1");
  EXPECT_TRUE(replicas.MoveToNext());
  EXPECT_EQ(replicas.current().target, "b:2");
  EXPECT_TRUE(replicas.MoveToNext());
  EXPECT_FALSE(replicas.MoveToNext());  // back at a:1: the round is over
  EXPECT_EQ(replicas.current().target, "a:1");
  EXPECT_TRUE(replicas.MoveToNext());
  replicas.StartRound();  // a batch arrived from b:2
  EXPECT_TRUE(replicas.MoveToNext());
  EXPECT_TRUE(replicas.MoveToNext());
  EXPECT_FALSE(replicas.MoveToNext());
  EXPECT_EQ(replicas.current().target, "b:2");
}

TEST(ReplicaSetTest, ASingleServerNeverMoves) {
  ReplicaSet replicas(StreamSettings{}, {"a:1"});
  EXPECT_FALSE(replicas.MoveToNext());
  EXPECT_EQ(replicas.current().target, "a:1");
}

}  // namespace
}  // namespace shardcast::client
