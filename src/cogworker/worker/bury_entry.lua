-- Bury an entry of the schedule or retry set that is not a job (not JSON, not an object, no
-- queue) into the dead set, wrapped (the caller counts it as failed).
-- KEYS[1]  the source set        KEYS[2]  cogworker:dead
-- ARGV[1]  entry as stored
-- ARGV[2]  dead score
-- ARGV[3]  wrapper JSON
-- Returns  1 if buried, 0 if another process took it first.
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("ZREM", KEYS[1], ARGV[1])
return 1
