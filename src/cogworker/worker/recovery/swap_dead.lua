-- Replace a raw payload buried straight into the dead set with its proper dead entry, in one
-- step so the job never shows twice.
-- KEYS[1]  cogworker:dead
-- ARGV[1]  old member
-- ARGV[2]  score
-- ARGV[3]  replacement member
-- Returns  1 if swapped, 0 if the old member is gone.
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[1], ARGV[2], ARGV[3])
redis.call("ZREM", KEYS[1], ARGV[1])
return 1
